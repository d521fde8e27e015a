-- Monotonic keys: create_stream, drop_stream, next_key.
\set VERBOSITY terse
\i sql/include/try.sql
CREATE FUNCTION pg_temp.bound(name text) RETURNS bigint LANGUAGE sql AS
    $$SELECT reserved_up_to FROM idempotency.streams WHERE stream = name$$;

-- Values start at 1 and follow each other within a session; the bound moves one block at a
-- time, ahead of the values handed out.
SELECT idempotency.create_stream('st_a', 3);
SELECT pg_temp.bound('st_a') AS bound_before_use;
SELECT idempotency.next_key('st_a') FROM generate_series(1, 7);
SELECT pg_temp.bound('st_a') AS bound_after_7;
SELECT block FROM idempotency.streams WHERE stream = 'st_a';

-- A rollback takes back neither the values nor the bound written for them.
BEGIN;
SELECT idempotency.next_key('st_a') AS in_rolled_back;
SELECT idempotency.next_key('st_a') AS in_rolled_back;
SELECT idempotency.next_key('st_a') AS refill_in_rolled_back;
ROLLBACK;
SELECT pg_temp.bound('st_a') AS bound_after_rollback;
SELECT idempotency.next_key('st_a') AS after_rollback;

-- Same in a failed transaction and in a rolled-back savepoint.
BEGIN;
SAVEPOINT s;
SELECT idempotency.next_key('st_a') AS in_savepoint;
ROLLBACK TO SAVEPOINT s;
SELECT idempotency.next_key('st_a') AS after_savepoint;
SELECT 1 / 0;
ROLLBACK;
SELECT idempotency.next_key('st_a') AS after_error;

-- REPEATABLE READ sees the newest values too.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT idempotency.next_key('st_a') AS repeatable_read;
SELECT idempotency.next_key('st_a') AS repeatable_read;
COMMIT;

-- The default block is 1000; streams are independent.
SELECT idempotency.create_stream('st_b');
SELECT idempotency.next_key('st_b') AS b1, idempotency.next_key('st_b') AS b2;
SELECT pg_temp.bound('st_b') AS default_block_bound;
SELECT idempotency.next_key('st_a') AS a_unaffected;

-- A block of one value writes the bound on every call.
SELECT idempotency.create_stream('st_one', 1);
SELECT idempotency.next_key('st_one') AS one, pg_temp.bound('st_one') AS bound;
SELECT idempotency.next_key('st_one') AS one, pg_temp.bound('st_one') AS bound;

-- Created and used in one statement and transaction; gone with a rollback, cache included.
BEGIN;
SELECT idempotency.create_stream('st_tx', 2), idempotency.next_key('st_tx') AS first;
SELECT idempotency.next_key('st_tx') AS second;
ROLLBACK;
SELECT pg_temp.try($$SELECT idempotency.next_key('st_tx')$$) AS after_rollback;

-- Same for a rolled-back savepoint.
BEGIN;
SAVEPOINT s;
SELECT idempotency.create_stream('st_sp', 5);
SELECT idempotency.next_key('st_sp') AS in_savepoint;
ROLLBACK TO SAVEPOINT s;
SELECT pg_temp.try($$SELECT idempotency.next_key('st_sp')$$) AS after_savepoint;
COMMIT;

-- drop_stream: the stream and its cached block are gone. Re-creating a name starts afresh
-- at 1 (a new stream: docs/streams.md says so).
SELECT idempotency.drop_stream('st_b');
SELECT pg_temp.try($$SELECT idempotency.next_key('st_b')$$) AS after_drop;
SELECT idempotency.create_stream('st_b', 10);
SELECT idempotency.next_key('st_b') AS recreated;
-- A drop that rolls back keeps the stream going where it was.
BEGIN;
SELECT idempotency.drop_stream('st_b');
ROLLBACK;
SELECT idempotency.next_key('st_b') AS after_drop_rollback;

-- A transaction that drops or creates a stream never takes its values from the shared block:
-- a stream it dropped is unknown at once, one it re-created starts afresh from its own row
-- (one value per call, bound included), and after commit the new stream goes on above them.
SELECT idempotency.create_stream('st_re', 10);
SELECT idempotency.next_key('st_re') AS old_stream;
BEGIN;
SELECT idempotency.drop_stream('st_re');
SELECT pg_temp.try($$SELECT idempotency.next_key('st_re')$$) AS dropped_in_tx;
SELECT idempotency.create_stream('st_re', 10);
SELECT idempotency.next_key('st_re') AS new_stream, pg_temp.bound('st_re') AS bound;
SELECT idempotency.next_key('st_re') AS new_stream, pg_temp.bound('st_re') AS bound;
COMMIT;
SELECT idempotency.next_key('st_re') AS after_commit, pg_temp.bound('st_re') AS bound;
-- Same in a savepoint; rolled back to, the committed stream and its block are back.
BEGIN;
SAVEPOINT s;
SELECT idempotency.drop_stream('st_re');
SELECT pg_temp.try($$SELECT idempotency.next_key('st_re')$$) AS dropped_in_savepoint;
SELECT idempotency.create_stream('st_re', 10);
SELECT idempotency.next_key('st_re') AS new_in_savepoint;
ROLLBACK TO SAVEPOINT s;
SELECT idempotency.next_key('st_re') AS after_rollback_to, pg_temp.bound('st_re') AS bound;
COMMIT;
SELECT idempotency.next_key('st_re') AS after_commit, pg_temp.bound('st_re') AS bound;

-- Errors.
SELECT statement, pg_temp.try(statement) AS result FROM (VALUES
    ($$SELECT idempotency.create_stream(NULL)$$),
    ($$SELECT idempotency.create_stream('')$$),
    ($$SELECT idempotency.create_stream(repeat('s', 256))$$),
    ($$SELECT idempotency.create_stream('st_err', 0)$$),
    ($$SELECT idempotency.create_stream('st_err', -5)$$),
    ($$SELECT idempotency.create_stream('st_err', NULL)$$),
    ($$SELECT idempotency.create_stream('st_a')$$),
    ($$SELECT idempotency.drop_stream(NULL)$$),
    ($$SELECT idempotency.drop_stream('')$$),
    ($$SELECT idempotency.drop_stream('st_missing')$$),
    ($$SELECT idempotency.next_key(NULL)$$),
    ($$SELECT idempotency.next_key('')$$),
    ($$SELECT idempotency.next_key(repeat('s', 256))$$),
    ($$SELECT idempotency.next_key('st_missing')$$),
    ($$UPDATE idempotency.streams SET block = 7 WHERE stream = 'st_a'$$)
) AS t(statement);
SELECT count(*) AS streams_named_st_err FROM idempotency.streams WHERE stream = 'st_err';

-- next_key writes: refused in a read-only transaction.
BEGIN READ ONLY;
SELECT pg_temp.try($$SELECT idempotency.next_key('st_a')$$) AS read_only;
ROLLBACK;

-- A hostile search_path changes nothing.
CREATE SCHEMA st_evil;
CREATE TABLE st_evil.streams (stream text, block int, reserved_up_to bigint);
SET search_path = st_evil, public;
SELECT idempotency.next_key('st_a') AS hostile_path;
SELECT idempotency.create_stream('st_evil_path', 4);
RESET search_path;
SELECT count(*) AS evil_rows FROM st_evil.streams;
DROP SCHEMA st_evil CASCADE;

-- Names up to 255 bytes, multibyte included.
SELECT idempotency.create_stream(repeat('é', 127), 2);
SELECT idempotency.next_key(repeat('é', 127)) AS long_name;
SELECT idempotency.drop_stream(repeat('é', 127));

-- An error text is cut on a character boundary, never inside one: the message of a missing
-- stream named with 85 three-byte characters (255 bytes) is longer than the 255 bytes kept.
CREATE FUNCTION pg_temp.message_of(statement text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    message text;
BEGIN
    EXECUTE statement;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS message = MESSAGE_TEXT;
    RETURN message;
END $$;
SELECT octet_length(m) AS message_bytes,
       convert_from(convert_to(m, 'UTF8'), 'UTF8') = m AS valid_utf8,
       right(m, 1) = '€' AS ends_with_whole_character
FROM pg_temp.message_of($$SELECT idempotency.next_key(repeat('€', 85))$$) AS m;

-- The largest value is handed out once, then the stream says it is exhausted.
SELECT idempotency.create_stream('st_max', 1000);
SET client_min_messages = error;
ALTER TABLE idempotency.streams DISABLE TRIGGER streams_refuse_update;
RESET client_min_messages;
UPDATE idempotency.streams SET reserved_up_to = 9223372036854775806 WHERE stream = 'st_max';
ALTER TABLE idempotency.streams ENABLE TRIGGER streams_refuse_update;
SELECT idempotency.next_key('st_max') AS largest;
SELECT pg_temp.try($$SELECT idempotency.next_key('st_max')$$) AS exhausted;

SELECT idempotency.drop_stream(s) FROM unnest(ARRAY['st_a', 'st_b', 'st_one', 'st_evil_path', 'st_max', 'st_re']) AS s;
SELECT count(*) AS streams_left FROM idempotency.streams WHERE stream LIKE 'st\_%';
