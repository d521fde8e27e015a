-- The managed edition's streams: next_key from a sequence per stream (the extension's
-- sql/streams.sql tests its block allocator, which the edition has not).
\set VERBOSITY terse
\i sql/include/try.sql

SELECT idempotency.create_stream('ms_a');
SELECT idempotency.create_stream('ms_b', 10);
-- 1, 2, 3 ... per stream, in call order.
SELECT idempotency.next_key('ms_a') AS a1, idempotency.next_key('ms_a') AS a2,
       idempotency.next_key('ms_b') AS b1;
SELECT bool_and(k = n + 2) AS in_order
  FROM (SELECT n, idempotency.next_key('ms_a') AS k FROM generate_series(1, 100) AS n ORDER BY n) s;
-- A rollback does not hand a key out again.
BEGIN;
SELECT idempotency.next_key('ms_a') AS in_rolled_back;
ROLLBACK;
SELECT idempotency.next_key('ms_a') AS after_rollback;
-- What stream_positions() reports: the last key handed out.
SELECT * FROM idempotency.stream_positions();
-- set_stream_floor raises, never lowers.
SELECT idempotency.set_stream_floor('ms_b', 500) AS raised;
SELECT idempotency.next_key('ms_b') AS above_floor;
SELECT idempotency.set_stream_floor('ms_b', 10) AS not_lowered;
SELECT idempotency.next_key('ms_b') AS still_above;
-- Errors: the extension's messages and SQLSTATEs.
SELECT pg_temp.try($$SELECT idempotency.create_stream('ms_a')$$);
SELECT pg_temp.try($$SELECT idempotency.create_stream('ms_c', 0)$$);
SELECT pg_temp.try($$SELECT idempotency.create_stream('')$$);
SELECT pg_temp.try($$SELECT idempotency.create_stream(NULL)$$);
SELECT pg_temp.try($$SELECT idempotency.next_key('ms_missing')$$);
SELECT pg_temp.try($$SELECT idempotency.next_key(repeat('x', 256))$$);
SELECT pg_temp.try($$SELECT idempotency.set_stream_floor('ms_a', -1)$$);
SELECT pg_temp.try($$SELECT idempotency.set_stream_floor('ms_missing', 1)$$);
SELECT pg_temp.try($$UPDATE idempotency.streams SET block = 7 WHERE stream = 'ms_a'$$);
BEGIN READ ONLY;
SELECT pg_temp.try($$SELECT idempotency.next_key('ms_a')$$) AS read_only;
ROLLBACK;
-- The last key of a stream: the sequence's maximum.
SELECT idempotency.create_stream('ms_max');
SELECT idempotency.set_stream_floor('ms_max', 9223372036854775806);
SELECT idempotency.next_key('ms_max') AS largest;
SELECT pg_temp.try($$SELECT idempotency.next_key('ms_max')$$) AS exhausted;
-- drop_stream removes the stream and its sequence.
SELECT idempotency.drop_stream('ms_max');
SELECT pg_temp.try($$SELECT idempotency.drop_stream('ms_max')$$);
SELECT count(*) AS sequences FROM pg_class
 WHERE relnamespace = 'idempotency'::regnamespace AND relname LIKE 'next\_key\_%';
-- A role granted next_key only may call it, and not read the table.
CREATE ROLE regress_ms_app;
GRANT USAGE ON SCHEMA idempotency TO regress_ms_app;
GRANT EXECUTE ON FUNCTION idempotency.next_key(text) TO regress_ms_app;
SET ROLE regress_ms_app;
SELECT idempotency.next_key('ms_b') > 501 AS as_app;
SELECT pg_temp.try($$SELECT count(*) FROM idempotency.streams$$);
SELECT pg_temp.try($$SELECT idempotency.create_stream('ms_app')$$);
RESET ROLE;
DROP OWNED BY regress_ms_app;
DROP ROLE regress_ms_app;
