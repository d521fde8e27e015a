-- claim_once: a key per message for queue consumers, claimed and completed in one statement
-- inside the caller's transaction.
\set VERBOSITY terse
\i sql/include/try.sql
SELECT idempotency.stats_reset();

-- 1. The first delivery: true, the record is completed in this transaction (one insert, no
-- update, no lease, no stored answer); a redelivery after commit: false.
BEGIN;
SELECT idempotency.claim_once('co', 'm1') AS applied;
SELECT state, status_code, response, attempt, locked_until, completed_at IS NOT NULL AS done,
       expires_at - first_seen_at AS retention
  FROM idempotency.lookup('co', 'm1');
SELECT sum(n_tup_ins) AS inserted, sum(n_tup_upd) AS updated
  FROM pg_stat_xact_user_tables WHERE schemaname = 'idempotency' AND relname LIKE 'keys%';
-- A duplicate inside the same transaction (a batch) is a redelivery too.
SELECT idempotency.claim_once('co', 'm1') AS applied;
COMMIT;
SELECT idempotency.claim_once('co', 'm1') AS applied;
SELECT count(*) FROM idempotency.keys WHERE scope = 'co' AND key = 'm1';
-- The retention argument sets expires_at.
SELECT idempotency.claim_once('co', 'm2', retention => '2 hours') AS applied;
SELECT expires_at - first_seen_at AS retention FROM idempotency.lookup('co', 'm2');

-- 2. A rollback (of the transaction or of a savepoint) frees the key: the message is applied
-- again on its redelivery.
BEGIN;
SELECT idempotency.claim_once('co', 'r1') AS applied;
ROLLBACK;
SELECT count(*) FROM idempotency.lookup('co', 'r1');
BEGIN;
SAVEPOINT s;
SELECT idempotency.claim_once('co', 'r1') AS applied;
ROLLBACK TO SAVEPOINT s;
SELECT idempotency.claim_once('co', 'r1') AS applied;
COMMIT;
SELECT state FROM idempotency.lookup('co', 'r1');

-- 3. With reserve and complete: a key reserve completed is a redelivery for claim_once; a key
-- claim_once completed is a replay for reserve, with no status_code or response.
SELECT outcome FROM idempotency.reserve('co', 'h1');
SELECT idempotency.complete('co', 'h1', 201, '{"order": 1}');
SELECT idempotency.claim_once('co', 'h1') AS applied;
SELECT outcome, status_code, response FROM idempotency.reserve('co', 'm1');

-- 4. Another holder's committed claim with a live lease: IK003 (reserve's in_progress), at
-- once and after a wait; the record is unchanged.
SELECT outcome, attempt FROM idempotency.reserve('co', 'lease', NULL, '5 minutes');
SELECT pg_temp.try($$SELECT idempotency.claim_once('co', 'lease')$$);
SELECT pg_temp.try($$SELECT idempotency.claim_once('co', 'lease', wait => '50 milliseconds')$$);
SELECT state, attempt FROM idempotency.lookup('co', 'lease');
-- This transaction's own claim of reserve, not completed yet: IK003 as well.
BEGIN;
SELECT outcome FROM idempotency.reserve('co', 'own');
SELECT pg_temp.try($$SELECT idempotency.claim_once('co', 'own')$$);
ROLLBACK;

-- 5. A claim whose lease lapsed, or that failed: claim_once takes it over (the next attempt)
-- and completes it.
SELECT outcome FROM idempotency.reserve('co', 'lapsed', NULL, '5 minutes');
UPDATE idempotency.keys SET locked_until = now() - interval '1 second'
 WHERE scope = 'co' AND key = 'lapsed';
SELECT idempotency.claim_once('co', 'lapsed') AS applied;
SELECT state, attempt, locked_until FROM idempotency.lookup('co', 'lapsed');
SELECT outcome FROM idempotency.reserve('co', 'failed');
SELECT idempotency.fail('co', 'failed', '{"error": "timeout"}');
SELECT idempotency.claim_once('co', 'failed') AS applied;
SELECT state, attempt, last_error FROM idempotency.lookup('co', 'failed');

-- 6. A UUIDv7 key older than the retention: IK004 (reserve's too_old), nothing written.
SELECT pg_temp.try($$SELECT idempotency.claim_once('co', '01890a5d-ac96-774b-bcce-b302099a8057', '1 hour')$$);
SELECT count(*) FROM idempotency.lookup('co', '01890a5d-ac96-774b-bcce-b302099a8057');
-- A fresh one is claimed.
SELECT idempotency.claim_once('co', idempotency.uuidv7()::text, '1 hour') AS applied;

-- 7. forget: the next claim_once is true again.
SELECT idempotency.forget('co', 'm1');
SELECT idempotency.claim_once('co', 'm1') AS applied;

-- 8. Bad input, refused before anything is written.
SELECT pg_temp.try($$SELECT idempotency.claim_once(NULL, 'k')$$);
SELECT pg_temp.try($$SELECT idempotency.claim_once('co', NULL)$$);
SELECT pg_temp.try($$SELECT idempotency.claim_once('co', 'k', NULL)$$);
SELECT pg_temp.try($$SELECT idempotency.claim_once('co', 'k', wait => NULL)$$);
SELECT pg_temp.try($$SELECT idempotency.claim_once('', 'k')$$);
SELECT pg_temp.try($$SELECT idempotency.claim_once('co', '')$$);
SELECT pg_temp.try($$SELECT idempotency.claim_once('co', repeat('k', 256))$$);
SELECT pg_temp.try($$SELECT idempotency.claim_once('co', 'k', '0')$$);
SELECT pg_temp.try($$SELECT idempotency.claim_once('co', 'k', '-1 hour')$$);
SELECT pg_temp.try($$SELECT idempotency.claim_once('co', 'k', wait => '-1 second')$$);
SELECT pg_temp.try($$SELECT idempotency.claim_once('co', 'k', '1000 days')$$);
SELECT pg_temp.try($$SELECT idempotency.claim_once('co', 'k', '100000000 years')$$);
BEGIN READ ONLY;
SELECT pg_temp.try($$SELECT idempotency.claim_once('co', 'k')$$);
ROLLBACK;
SELECT count(*) FROM idempotency.lookup('co', 'k');

-- 9. Counted as reserve outcomes (new with a complete; replay; in_progress; too_old) and
-- takeovers.
SELECT reserves_new, reserves_replay, reserves_in_progress, reserves_mismatch,
       reserves_too_old, completes, fails, takeovers
  FROM idempotency.stats;

SELECT idempotency.forget('co', k) FROM unnest(ARRAY['m1', 'm2', 'r1', 'h1', 'lease', 'lapsed',
                                                       'failed']) AS k;
DELETE FROM idempotency.keys WHERE scope = 'co';
