-- Behaviour 10: bad input is refused with a specific SQLSTATE and no partial write.
\set VERBOSITY terse
\i sql/include/try.sql

SELECT statement, pg_temp.try(statement) AS result FROM (VALUES
    ($$SELECT idempotency.reserve(NULL, 'k')$$),
    ($$SELECT idempotency.reserve('err', NULL)$$),
    ($$SELECT idempotency.reserve('', 'k')$$),
    ($$SELECT idempotency.reserve('err', '')$$),
    ($$SELECT idempotency.reserve(repeat('s', 256), 'k')$$),
    ($$SELECT idempotency.reserve('err', repeat('k', 256))$$),
    ($$SELECT idempotency.reserve('err', repeat('é', 128))$$),
    ($$SELECT idempotency.reserve('err', 'k', lock_ttl => '0')$$),
    ($$SELECT idempotency.reserve('err', 'k', lock_ttl => '-1 second')$$),
    ($$SELECT idempotency.reserve('err', 'k', lock_ttl => NULL)$$),
    ($$SELECT idempotency.reserve('err', 'k', retention => '0')$$),
    ($$SELECT idempotency.reserve('err', 'k', retention => '-1 day')$$),
    ($$SELECT idempotency.reserve('err', 'k', wait => '-1 second')$$),
    ($$SELECT idempotency.reserve('err', 'k', wait => NULL)$$),
    ($$SELECT idempotency.reserve('err', 'k', retention => '100000000 years')$$),
    ($$SELECT idempotency.complete('err', 'k', 99, '{}')$$),
    ($$SELECT idempotency.complete('err', 'k', 600, '{}')$$),
    ($$SELECT idempotency.complete('err', 'k', NULL, '{}')$$),
    ($$SELECT idempotency.complete('err', 'never-reserved', 200, '{}')$$),
    ($$SELECT idempotency.fail('err', 'never-reserved')$$),
    ($$SELECT idempotency.checkpoint('err', 'never-reserved', 'x')$$),
    ($$SELECT idempotency.lookup(NULL, 'k')$$),
    ($$SELECT idempotency.forget('err', '')$$)
) AS cases(statement);

-- The limits themselves are accepted.
SELECT outcome FROM idempotency.reserve(repeat('s', 255), repeat('k', 255));
SELECT outcome FROM idempotency.reserve('err', 'k', wait => '0');
SELECT idempotency.complete(repeat('s', 255), repeat('k', 255), 100, NULL);
SELECT outcome FROM idempotency.reserve('err', 'k599');
SELECT idempotency.complete('err', 'k599', 599, NULL);
SELECT outcome, status_code, response FROM idempotency.reserve('err', 'k599');

-- Nothing was written by the refused calls.
SELECT left(scope, 5) AS scope, length(scope) AS scope_len, left(key, 5) AS key, state
  FROM idempotency.keys WHERE scope = 'err' OR length(scope) = 255
 ORDER BY scope, key;

-- Refused in the middle of a transaction: the transaction is aborted, the claim with it.
BEGIN;
SELECT outcome FROM idempotency.reserve('err', 'k-tx');
SELECT idempotency.complete('err', 'k-tx', 700, '{}');
COMMIT;
SELECT count(*) FROM idempotency.keys WHERE key = 'k-tx';
