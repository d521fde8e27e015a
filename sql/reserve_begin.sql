-- reserve_begin: outside a transaction block, a new key opens one (the work and complete +
-- COMMIT follow in it); any other outcome leaves none open, so a replay takes one round trip
-- and needs no ROLLBACK. Inside a transaction block it is reserve.
\set VERBOSITY terse
\i sql/include/try.sql
CREATE FUNCTION pg_temp.holds_key_lock(scope text, key text) RETURNS boolean
LANGUAGE sql AS $$
    SELECT EXISTS (SELECT FROM idempotency.key_locks
                   WHERE pid = pg_backend_pid()
                     AND lock_id = idempotency.key_lock_id(scope, key))
$$;

-- 1. A new key, as its own statement: the key's lock is still held after the statement (the
-- transaction block it opened), the work and complete commit together.
SELECT outcome, attempt FROM idempotency.reserve_begin('rb', 'k1', '\x01');
SELECT pg_temp.holds_key_lock('rb', 'k1') AS held;
CREATE TEMP TABLE work_done (k text);
INSERT INTO work_done VALUES ('k1');
SELECT idempotency.complete('rb', 'k1', 201, '{"id": 1}');
COMMIT;
SELECT pg_temp.holds_key_lock('rb', 'k1') AS held_after_commit;
SELECT state, status_code, response FROM idempotency.lookup('rb', 'k1');

-- 2. A replay: the stored answer, and no transaction left open (COMMIT warns).
SELECT outcome, status_code, response FROM idempotency.reserve_begin('rb', 'k1', '\x01');
SELECT pg_temp.holds_key_lock('rb', 'k1') AS held;
COMMIT;
-- a mismatch leaves none open either
SELECT outcome FROM idempotency.reserve_begin('rb', 'k1', '\x02');
COMMIT;

-- 3. A rollback frees the key: the next reserve_begin is new again.
SELECT outcome FROM idempotency.reserve_begin('rb', 'k2');
ROLLBACK;
SELECT outcome FROM idempotency.reserve_begin('rb', 'k2');
ROLLBACK;

-- 4. A UUIDv7 key older than the retention window: too_old, nothing left open. (A key held
-- by another session, in_progress, is the isolation test reserve_begin_in_progress.)
SELECT outcome FROM idempotency.reserve_begin('rb', '017f22e2-79b0-7cc3-98c4-dc0c0c07398f');
COMMIT;

-- 5. Inside a transaction block it is reserve: the block stays open after any outcome.
BEGIN;
SELECT outcome FROM idempotency.reserve_begin('rb', 'k1', '\x01');
SELECT outcome FROM idempotency.reserve_begin('rb', 'k4');
SELECT idempotency.complete('rb', 'k4', 200, '"four"');
COMMIT;
SELECT state FROM idempotency.lookup('rb', 'k4');
-- in a multi-statement query's implicit block too: that block ends with the query
SELECT outcome FROM idempotency.reserve_begin('rb', 'k5') \; SELECT 'same query' AS next;
COMMIT;

-- 6. Outside a transaction block it must be a SELECT of its own: a procedure or a DO block
-- would lose its own COMMIT / ROLLBACK to the block (25000); a function a SELECT calls is
-- the SELECT's.
CREATE PROCEDURE pg_temp.claims() LANGUAGE plpgsql AS $$
BEGIN PERFORM idempotency.reserve_begin('rb', 'k6'); END $$;
\set VERBOSITY sqlstate
DO $$ BEGIN PERFORM idempotency.reserve_begin('rb', 'k6'); END $$;
CALL pg_temp.claims();
\set VERBOSITY terse
SELECT count(*) AS k6_records FROM idempotency.keys WHERE scope = 'rb' AND key = 'k6';
CREATE FUNCTION pg_temp.outcome_of(key text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN RETURN (idempotency.reserve_begin('rb', key)).outcome; END $$;
SELECT pg_temp.outcome_of('k6');
SELECT pg_temp.holds_key_lock('rb', 'k6') AS held;
ROLLBACK;
-- inside a block, a procedure may call it (it is reserve there)
BEGIN;
CALL pg_temp.claims();
ROLLBACK;

-- 7. The same checks as reserve: a bad key is refused before anything is opened.
SELECT outcome FROM idempotency.reserve_begin('rb', '');
COMMIT;
