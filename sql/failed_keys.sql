-- failed_keys: keys whose last attempt failed, for operators; `dead` for a message a consumer
-- gave up on (its stored error says "dead": true, as the clients' consumer helpers write it).
\set VERBOSITY terse

-- A retry still to come, a dead message, a failure without an error, errors of other shapes.
SELECT outcome, attempt FROM idempotency.reserve('fk', 'retrying');
SELECT idempotency.fail('fk', 'retrying', '{"error": "timeout", "attempt": 1, "dead": false}', 1);
SELECT outcome, attempt FROM idempotency.reserve('fk', 'poison');
SELECT idempotency.fail('fk', 'poison', '{"error": "not JSON", "attempt": 1, "dead": false}', 1);
SELECT outcome, attempt FROM idempotency.reserve('fk', 'poison');
SELECT idempotency.fail('fk', 'poison', '{"error": "not JSON", "attempt": 2, "dead": true}', 2);
SELECT outcome FROM idempotency.reserve('fk', 'no-error');
SELECT idempotency.fail('fk', 'no-error');
SELECT outcome FROM idempotency.reserve('fk', 'scalar');
SELECT idempotency.fail('fk', 'scalar', '"out of stock"');
SELECT outcome FROM idempotency.reserve('fk', 'not-a-boolean');
SELECT idempotency.fail('fk', 'not-a-boolean', '{"dead": "yes"}');
-- Not failed: in progress, completed, claimed once.
SELECT outcome FROM idempotency.reserve('fk', 'working');
SELECT outcome FROM idempotency.reserve('fk', 'done');
SELECT idempotency.complete('fk', 'done', 200, NULL);
SELECT idempotency.claim_once('fk', 'consumed');

SELECT key, attempt, dead, error, first_seen_at <= now() AS seen, expires_at > now() AS live
FROM idempotency.failed_keys WHERE scope = 'fk' ORDER BY key;
-- The operator's list of dead messages.
SELECT scope, key, attempt, error ->> 'error' AS error
FROM idempotency.failed_keys WHERE dead ORDER BY scope, key;

-- A takeover leaves the view: the next reserve, or claim_once of the redelivered message
-- (which completes it, as after a fix).
SELECT outcome, attempt FROM idempotency.reserve('fk', 'retrying');
SELECT idempotency.claim_once('fk', 'poison');
SELECT state, attempt, last_error ->> 'error' AS last_error FROM idempotency.lookup('fk', 'poison');
SELECT key FROM idempotency.failed_keys WHERE scope = 'fk' ORDER BY key;

-- An expired failed record is not listed.
INSERT INTO idempotency.keys (scope, key, state, attempt, last_error, first_seen_at, expires_at)
VALUES ('fk', 'gone', 'failed', 3, '{"dead": true}', now() - interval '2 days',
        now() - interval '1 day');
SELECT count(*) FROM idempotency.failed_keys WHERE scope = 'fk' AND key = 'gone';

-- Operators need a grant.
CREATE ROLE failed_keys_t;
GRANT USAGE ON SCHEMA idempotency TO failed_keys_t;
SET ROLE failed_keys_t;
SELECT count(*) FROM idempotency.failed_keys;
RESET ROLE;
GRANT SELECT ON idempotency.failed_keys TO failed_keys_t;
SET ROLE failed_keys_t;
SELECT key, dead FROM idempotency.failed_keys WHERE scope = 'fk' ORDER BY key;
RESET ROLE;
REVOKE ALL ON idempotency.failed_keys FROM failed_keys_t;
REVOKE USAGE ON SCHEMA idempotency FROM failed_keys_t;
DROP ROLE failed_keys_t;

DELETE FROM idempotency.keys WHERE scope = 'fk';
