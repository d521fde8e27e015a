-- The life of a key within one session, one numbered case each; what two sessions at once do
-- is in test/isolation/specs.
\set VERBOSITY terse
\i sql/include/try.sql

-- 1. Unknown key: new, attempt 1; completed in the same transaction; later a replay.
BEGIN;
SELECT outcome, status_code, response, attempt, recovery_point,
       locked_until > first_seen_at AS leased, expires_at - first_seen_at AS retention
  FROM idempotency.reserve('life', 'k1', idempotency.fingerprint('{"amount": 100}'::jsonb));
SELECT idempotency.complete('life', 'k1', 201, '{"order": 7}', 1);
-- One row written once: an insert, never an insert followed by an update.
SELECT sum(n_tup_ins) AS inserted, sum(n_tup_upd) AS updated
  FROM pg_stat_xact_user_tables WHERE schemaname = 'idempotency' AND relname LIKE 'keys%';
COMMIT;
SELECT outcome, status_code, response, attempt, locked_until
  FROM idempotency.reserve('life', 'k1', idempotency.fingerprint('{"amount": 100}'::jsonb));
SELECT state, status_code, response, attempt, completed_at >= first_seen_at AS done_after_start,
       locked_until
  FROM idempotency.lookup('life', 'k1');
SELECT count(*) FROM idempotency.keys WHERE scope = 'life' AND key = 'k1';

-- A replay without a request hash is still a replay; completing again with the same
-- result is a no-op, with another result an error.
SELECT outcome, status_code FROM idempotency.reserve('life', 'k1');
SELECT pg_temp.try($$SELECT idempotency.complete('life', 'k1', 201, '{"order": 7}')$$);
SELECT pg_temp.try($$SELECT idempotency.complete('life', 'k1', 200, '{"order": 7}')$$);
SELECT pg_temp.try($$SELECT idempotency.complete('life', 'k1', 201, '{"order": 8}')$$);

-- 2. Same key, different request hash: mismatch, record unchanged.
SELECT outcome, status_code, response, attempt
  FROM idempotency.reserve('life', 'k1', idempotency.fingerprint('{"amount": 999}'::jsonb));
SELECT state, status_code, response,
       request_hash = idempotency.fingerprint('{"amount": 100}'::jsonb) AS same_hash
  FROM idempotency.lookup('life', 'k1');

-- 4. A rolled-back reserve leaves no trace.
BEGIN;
SELECT outcome FROM idempotency.reserve('life', 'k-rollback');
SELECT state FROM idempotency.lookup('life', 'k-rollback');
ROLLBACK;
SELECT count(*) FROM idempotency.lookup('life', 'k-rollback');
SELECT count(*) FROM idempotency.keys WHERE key = 'k-rollback';
-- ... also inside a savepoint
BEGIN;
SAVEPOINT s;
SELECT outcome FROM idempotency.reserve('life', 'k-savepoint');
ROLLBACK TO SAVEPOINT s;
SELECT outcome, attempt FROM idempotency.reserve('life', 'k-savepoint-2');
COMMIT;
SELECT key, state FROM idempotency.keys WHERE key LIKE 'k-savepoint%' ORDER BY key;
-- ... and a complete inside a rolled-back savepoint leaves the claim pending for commit.
BEGIN;
SELECT outcome FROM idempotency.reserve('life', 'k-sp-complete');
SAVEPOINT s;
SELECT idempotency.complete('life', 'k-sp-complete', 200, '{}');
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT state, status_code FROM idempotency.lookup('life', 'k-sp-complete');

-- 5. A committed claim left unfinished: in_progress while its lease lives, then taken over
-- with attempt + 1 and the last recovery point; the stale holder is fenced off.
SELECT outcome, attempt FROM idempotency.reserve('life', 'k-lapse', lock_ttl => '300 milliseconds');
SELECT idempotency.checkpoint('life', 'k-lapse', 'charged-card', 1);
SELECT outcome, attempt, recovery_point, status_code FROM idempotency.reserve('life', 'k-lapse');
SELECT pg_sleep(0.4);
SELECT outcome, attempt, recovery_point FROM idempotency.reserve('life', 'k-lapse');
SELECT pg_temp.try($$SELECT idempotency.complete('life', 'k-lapse', 200, '{"by": 1}', 1)$$);
SELECT pg_temp.try($$SELECT idempotency.fail('life', 'k-lapse', '{"by": 1}', 1)$$);
SELECT pg_temp.try($$SELECT idempotency.checkpoint('life', 'k-lapse', 'by-1', 1)$$);
SELECT state, attempt, recovery_point, status_code FROM idempotency.lookup('life', 'k-lapse');
SELECT pg_temp.try($$SELECT idempotency.complete('life', 'k-lapse', 200, '{"by": 2}', 2)$$);
SELECT state, attempt, status_code, response FROM idempotency.lookup('life', 'k-lapse');
-- A lapsed claim may still be completed by its holder while nobody took it over.
SELECT outcome FROM idempotency.reserve('life', 'k-late', lock_ttl => '100 milliseconds');
SELECT pg_sleep(0.2);
SELECT pg_temp.try($$SELECT idempotency.complete('life', 'k-late', 200, '{}', 1)$$);

-- 6. fail releases the claim: the next reserve gets new with attempt + 1; lookup shows the error.
SELECT outcome, attempt FROM idempotency.reserve('life', 'k-fail');
SELECT idempotency.fail('life', 'k-fail', '{"error": "upstream 503"}', 1);
SELECT state, attempt, last_error, locked_until FROM idempotency.lookup('life', 'k-fail');
SELECT pg_temp.try($$SELECT idempotency.complete('life', 'k-fail', 200, '{}')$$);
SELECT outcome, attempt FROM idempotency.reserve('life', 'k-fail');
SELECT state, attempt, last_error FROM idempotency.lookup('life', 'k-fail');
-- fail in the same transaction as the reserve
BEGIN;
SELECT outcome, attempt FROM idempotency.reserve('life', 'k-fail-tx');
SELECT idempotency.fail('life', 'k-fail-tx', NULL);
COMMIT;
SELECT state, attempt FROM idempotency.lookup('life', 'k-fail-tx');
SELECT outcome, attempt FROM idempotency.reserve('life', 'k-fail-tx');

-- 7. A record past expires_at is absent for every call, pruned or not. (Its retention counts
-- from the end of its lease: sql/expiry.sql.)
SELECT outcome FROM idempotency.reserve('life', 'k-expire', lock_ttl => '100 milliseconds',
                                        retention => '1 second');
SELECT idempotency.complete('life', 'k-expire', 200, '{"first": true}');
SELECT expires_at AS k_expire_at FROM idempotency.lookup('life', 'k-expire') \gset
SELECT outcome, status_code FROM idempotency.reserve('life', 'k-expire');
-- Until expires_at has passed.
SELECT pg_sleep(greatest(0, extract(epoch FROM :'k_expire_at'::timestamptz - clock_timestamp())) + 0.01);
SELECT count(*) FROM idempotency.lookup('life', 'k-expire');
SELECT pg_temp.try($$SELECT idempotency.complete('life', 'k-expire', 200, '{}')$$);
SELECT pg_temp.try($$SELECT idempotency.fail('life', 'k-expire')$$);
SELECT pg_temp.try($$SELECT idempotency.checkpoint('life', 'k-expire', 'x')$$);
SELECT outcome, attempt, status_code FROM idempotency.reserve('life', 'k-expire');
SELECT count(*) AS rows_incl_expired FROM idempotency.keys WHERE key = 'k-expire';
SELECT idempotency.forget('life', 'k-expire');
SELECT count(*) FROM idempotency.keys WHERE key = 'k-expire';
SELECT idempotency.forget('life', 'k-expire');

-- 8. A UUIDv7 / ULID key older than the retention window: too_old, and no claim is made.
SELECT outcome, attempt, expires_at FROM idempotency.reserve('life', '01ARZ3NDEKTSV4RRFFQ69G5FAV');
SELECT outcome, attempt, expires_at
  FROM idempotency.reserve('life', '017f22e2-79b0-7cc3-98c4-dc0c0c07398f');
SELECT count(*) FROM idempotency.keys WHERE scope = 'life' AND key LIKE '01%';
SET idempotency.max_retention = '8000d';
SELECT outcome FROM idempotency.reserve('life', '01ARZ3NDEKTSV4RRFFQ69G5FAV', retention => '20 years');
SET idempotency.max_retention = '30d';
SELECT outcome FROM idempotency.reserve('life', idempotency.uuidv7()::text);
-- A live record wins over the key's age.
SELECT outcome FROM idempotency.reserve('life', '01ARZ3NDEKTSV4RRFFQ69G5FAV');

-- 9. The same key in two scopes is two keys.
SELECT outcome FROM idempotency.reserve('life-a', 'shared');
SELECT outcome FROM idempotency.reserve('life-b', 'shared');
SELECT idempotency.complete('life-a', 'shared', 200, '"a"');
SELECT outcome, response FROM idempotency.reserve('life-a', 'shared');
SELECT outcome, response FROM idempotency.reserve('life-b', 'shared');

-- forget deletes on purpose; the key is new again.
SELECT idempotency.forget('life-a', 'shared');
SELECT outcome, attempt FROM idempotency.reserve('life-a', 'shared');

-- Reserving twice in one transaction: the second call sees the claim of the first.
BEGIN;
SELECT outcome FROM idempotency.reserve('life', 'k-twice');
SELECT outcome, attempt FROM idempotency.reserve('life', 'k-twice');
COMMIT;
