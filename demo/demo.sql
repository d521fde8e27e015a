-- A narrated tour of idempotency.reserve and its outcomes.
-- Run by scripts/demo.sh after CREATE EXTENSION idempotency; each step is one
-- or more transactions of an imaginary payments API or job runner.
\set QUIET on
\set ON_ERROR_STOP on
\pset footer off
\pset null '(null)'

-- try(sql): run a statement and report its error instead of aborting the demo.
CREATE FUNCTION pg_temp.try(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE sql;
  RETURN 'accepted';
EXCEPTION WHEN OTHERS THEN
  RETURN format('refused: SQLSTATE %s: %s', SQLSTATE, SQLERRM);
END $$;

\echo
\echo '== 1. new: an unknown key is claimed (attempt 1); the work and complete() run in the same transaction'
BEGIN;
SELECT outcome, attempt, locked_until > now() AS claimed
  FROM idempotency.reserve('payments', 'order-1001',
                           idempotency.fingerprint('{"amount": 100, "currency": "EUR"}'::jsonb));
-- ... the business write would go here ...
SELECT 'stored' AS complete
  FROM idempotency.complete('payments', 'order-1001', 201, '{"payment_id": "pay_1"}');
COMMIT;

\echo
\echo '== 2. replay: the client retries the same request; the stored response comes back'
SELECT outcome, status_code, response, attempt
  FROM idempotency.reserve('payments', 'order-1001',
                           idempotency.fingerprint('{"currency": "EUR", "amount": 100}'::jsonb));

\echo
\echo '== 3. mismatch: the same key with a different request body (HTTP 422)'
SELECT outcome, status_code, response
  FROM idempotency.reserve('payments', 'order-1001',
                           idempotency.fingerprint('{"amount": 999, "currency": "EUR"}'::jsonb));

\echo
\echo '== 4. in_progress: a second session (via dblink) holds order-1002 in an open transaction'
CREATE EXTENSION IF NOT EXISTS dblink;
SELECT dblink_connect('other', format('host=%s port=%s dbname=%s user=%s',
                      current_setting('unix_socket_directories'), current_setting('port'),
                      current_database(), current_user)) AS second_session;
SELECT dblink_exec('other', 'BEGIN') AS second_session;
SELECT * FROM dblink('other',
  $$SELECT outcome, attempt FROM idempotency.reserve('payments', 'order-1002')$$)
  AS second_session(outcome text, attempt integer);
\echo '-- this session asks for the same key without waiting (HTTP 409):'
SELECT outcome, status_code, response
  FROM idempotency.reserve('payments', 'order-1002', wait => '0');
\echo '-- the second session completes and commits; now this session gets a replay:'
SELECT * FROM dblink('other',
  $$SELECT 'completed' FROM idempotency.complete('payments', 'order-1002', 201, '{"payment_id": "pay_2"}')$$)
  AS second_session(result text);
SELECT dblink_exec('other', 'COMMIT') AS second_session;
SELECT dblink_disconnect('other');
SELECT outcome, status_code, response FROM idempotency.reserve('payments', 'order-1002');

\echo
\echo '== 5. too_old: a ULID key minted in 2016 is older than the 24 hour retention window'
SELECT idempotency.key_time('01ARZ3NDEKTSV4RRFFQ69G5FAV') AS key_time;
SELECT outcome, attempt
  FROM idempotency.reserve('payments', '01ARZ3NDEKTSV4RRFFQ69G5FAV', retention => '24 hours');
\echo '-- a fresh UUIDv7 key is fine:'
SELECT outcome, attempt FROM idempotency.reserve('payments', idempotency.uuidv7()::text);

\echo
\echo '== 6. takeover: worker A claims job-7 for 1 second, records a checkpoint, commits, then dies'
BEGIN;
SELECT outcome, attempt FROM idempotency.reserve('jobs', 'job-7', lock_ttl => '1 second');
SELECT 'recorded' AS checkpoint
  FROM idempotency.checkpoint('jobs', 'job-7', 'card-charged', attempt => 1);
COMMIT;
\echo '-- while the claim is live, worker B is told the job is in progress:'
SELECT outcome, attempt FROM idempotency.reserve('jobs', 'job-7');
SELECT 'slept 1.1 s' AS worker_b FROM pg_sleep(1.1);
\echo '-- 1.1 s later the claim has lapsed: worker B takes over with attempt 2 and A''s recovery point:'
SELECT outcome, attempt, recovery_point FROM idempotency.reserve('jobs', 'job-7');

\echo
\echo '== 7. fencing: worker A wakes up and tries to complete with its stale attempt 1'
SELECT pg_temp.try($$SELECT idempotency.complete('jobs', 'job-7', 200, '{"by": "A"}', attempt => 1)$$)
  AS stale_complete;
\echo '-- worker B (attempt 2) completes; lookup shows the final record:'
SELECT pg_temp.try($$SELECT idempotency.complete('jobs', 'job-7', 200, '{"by": "B"}', attempt => 2)$$)
  AS current_complete;
SELECT state, status_code, response, attempt, recovery_point
  FROM idempotency.lookup('jobs', 'job-7');
