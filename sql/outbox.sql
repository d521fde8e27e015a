-- Outbox: idempotency.emit and the output plugin idempotency (needs wal_level = logical and
-- idempotency in output_plugin_libraries). LSNs differ from run to run: only relations
-- between them are printed.
SELECT NOT EXISTS (SELECT FROM pg_extension WHERE extname = 'dblink') AS outbox_own_dblink \gset
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS dblink;
RESET client_min_messages;

SELECT 'created' FROM pg_create_logical_replication_slot('outbox_regress', 'idempotency');

CREATE TABLE outbox_rows (id int PRIMARY KEY, note text);
-- What emit returned, by payload n (a plain table: its row changes are in the WAL too).
CREATE TABLE outbox_emitted (n int PRIMARY KEY, lsn pg_lsn NOT NULL);

-- 1. Several transactions, mixed with row changes, other prefixes, a non-transactional
-- message with our prefix, a rollback and subtransactions.
INSERT INTO outbox_emitted SELECT 1, idempotency.emit('t.orders', '{"n": 1}');

BEGIN;
INSERT INTO outbox_emitted SELECT 2, idempotency.emit('t.orders', '{"n": 2}');
INSERT INTO outbox_rows VALUES (1, 'row change');
INSERT INTO outbox_emitted SELECT 3, idempotency.emit('t.payments', '{"n": 3, "amount": 10}');
SELECT 'other prefix' FROM pg_logical_emit_message(true, 'other', '{"topic":"t.orders","payload":{"n":90}}');
SELECT 'not transactional' FROM pg_logical_emit_message(false, 'idempotency', '{"topic":"t.orders","payload":{"n":91}}');
UPDATE outbox_rows SET note = 'updated';
INSERT INTO outbox_emitted SELECT 4, idempotency.emit('t.orders', '{"n": 4}');
COMMIT;

BEGIN;
SELECT 'rolled back' FROM idempotency.emit('t.orders', '{"n": 5}');
ROLLBACK;

BEGIN;
INSERT INTO outbox_emitted SELECT 6, idempotency.emit('t.orders', '{"n": 6}');
SAVEPOINT a;
SELECT 'rolled back to savepoint' FROM idempotency.emit('t.orders', '{"n": 7}');
ROLLBACK TO SAVEPOINT a;
SAVEPOINT b;
INSERT INTO outbox_emitted SELECT 8, idempotency.emit('t.orders', '{"n": 8}');
RELEASE SAVEPOINT b;
COMMIT;

-- 2. Interleaved transactions on two connections: commit order, not start order, decides.
SELECT dblink_connect('outbox_other',
    format('dbname=%s user=%s port=%s host=%s', current_database(), current_user,
           current_setting('port'), split_part(current_setting('unix_socket_directories'), ',', 1)));

BEGIN;                                      -- local starts first ...
INSERT INTO outbox_emitted SELECT 10, idempotency.emit('t.orders', '{"n": 10}');
SELECT dblink_exec('outbox_other', 'BEGIN');
SELECT dblink_exec('outbox_other',
    $$INSERT INTO outbox_emitted SELECT 11, idempotency.emit('t.orders', '{"n": 11}')$$);
SELECT dblink_exec('outbox_other', 'COMMIT');  -- ... the other commits first
INSERT INTO outbox_emitted SELECT 12, idempotency.emit('t.orders', '{"n": 12}');
COMMIT;

SELECT dblink_exec('outbox_other', 'BEGIN');  -- the other starts first ...
SELECT dblink_exec('outbox_other',
    $$INSERT INTO outbox_emitted SELECT 13, idempotency.emit('t.orders', '{"n": 13}')$$);
BEGIN;
INSERT INTO outbox_emitted SELECT 14, idempotency.emit('t.orders', '{"n": 14}');
COMMIT;                                     -- ... local commits first
SELECT dblink_exec('outbox_other',
    $$INSERT INTO outbox_emitted SELECT 15, idempotency.emit('t.orders', '{"n": 15}')$$);
SELECT dblink_exec('outbox_other', 'COMMIT');
SELECT dblink_disconnect('outbox_other');

-- A few single-message transactions: the message usually ends where the commit starts.
INSERT INTO outbox_emitted SELECT 20, idempotency.emit('t.single', '{"n": 20}');
SELECT 'emitted' FROM idempotency.emit('t.single', '{"n": 21}');
SELECT 'emitted' FROM idempotency.emit('t.single', '{"n": 22}');
SELECT 'emitted' FROM idempotency.emit('t.single', '{"n": 23}');

-- 3. The stream.
CREATE TEMP TABLE outbox_got AS
SELECT ord, data, data::jsonb AS m, lsn AS row_lsn
FROM pg_logical_slot_peek_changes('outbox_regress', NULL, NULL) WITH ORDINALITY AS c(lsn, xid, data, ord);

-- Stream order: 1-4 (7, 5 gone), 6, 8, then 11 before 10 and 12, then 14 before 13 and 15.
SELECT ord, m->>'topic' AS topic, m->'payload' AS payload FROM outbox_got ORDER BY ord;

-- Every line has exactly these fields.
SELECT DISTINCT array(SELECT jsonb_object_keys(m) ORDER BY 1) AS fields FROM outbox_got;

-- Keys: unique, strictly increasing in stream order (as text and as uuid), equal to
-- lsn_key(commit_lsn, lsn), lsn <= commit_lsn, and the last message sharing its LSN with the
-- commit happens.
WITH k AS (
    SELECT ord, m->>'key' AS key, (m->>'commit_lsn')::pg_lsn AS commit_lsn, (m->>'lsn')::pg_lsn AS lsn,
           lag(m->>'key') OVER (ORDER BY ord) AS prev
    FROM outbox_got)
SELECT count(*) AS messages,
       count(DISTINCT key) AS distinct_keys,
       bool_and(prev IS NULL OR key COLLATE "C" > prev COLLATE "C") AS text_increasing,
       bool_and(prev IS NULL OR key::uuid > prev::uuid) AS uuid_increasing,
       bool_and(key ~ '^[0-9a-f]{32}$') AS hex32,
       bool_and(key::uuid = idempotency.lsn_key(commit_lsn, lsn)) AS key_is_lsn_key,
       bool_and((idempotency.lsn_key_parts(key::uuid)).commit_lsn = commit_lsn
                AND (idempotency.lsn_key_parts(key::uuid)).lsn = lsn) AS parts_round_trip,
       bool_and(lsn <= commit_lsn) AS lsn_not_after_commit,
       bool_or(lsn = commit_lsn) AS some_lsn_equals_commit_lsn
FROM k;

-- The decoded lsn is what emit returned; the row's lsn column is the message's too.
SELECT count(*) AS matched, bool_and((g.m->>'lsn')::pg_lsn = e.lsn AND g.row_lsn = e.lsn) AS same_lsn
FROM outbox_got g JOIN outbox_emitted e ON e.n = (g.m->'payload'->>'n')::int;

-- Messages of one transaction share commit_lsn, xid and commit_time; transactions differ.
SELECT count(*) AS transactions,
       bool_and(xids = 1 AND times = 1) AS one_xid_and_time_each
FROM (SELECT m->>'commit_lsn', count(DISTINCT m->>'xid') AS xids,
             count(DISTINCT m->>'commit_time') AS times
      FROM outbox_got GROUP BY 1) t;
SELECT count(DISTINCT m->>'xid') AS xids FROM outbox_got;
SELECT bool_and((m->>'commit_time')::timestamptz BETWEEN now() - interval '1 hour' AND clock_timestamp())
       AS commit_time_is_timestamptz FROM outbox_got;

-- Commit order decides: 10 was written before 11 but committed after it.
SELECT (SELECT lsn FROM outbox_emitted WHERE n = 10) < (SELECT lsn FROM outbox_emitted WHERE n = 11)
         AS wrote_10_first,
       (SELECT m->>'key' FROM outbox_got WHERE m->'payload'->>'n' = '11') COLLATE "C" <
       (SELECT m->>'key' FROM outbox_got WHERE m->'payload'->>'n' = '10') AS key_11_first,
       (SELECT lsn FROM outbox_emitted WHERE n = 13) < (SELECT lsn FROM outbox_emitted WHERE n = 14)
         AS wrote_13_first,
       (SELECT m->>'key' FROM outbox_got WHERE m->'payload'->>'n' = '14') COLLATE "C" <
       (SELECT m->>'key' FROM outbox_got WHERE m->'payload'->>'n' = '13') AS key_14_first;

-- 4. Redelivery: peeking again gives the same lines; get returns them once more, then
-- nothing is left.
SELECT array_agg(data ORDER BY ord) = (SELECT array_agg(data ORDER BY ord) FROM outbox_got)
       AS peek_again_identical
FROM pg_logical_slot_peek_changes('outbox_regress', NULL, NULL) WITH ORDINALITY AS c(lsn, xid, data, ord);

-- 5. Options: topics and framing (still peeking).
SELECT m->>'topic' AS topic, m->'payload' AS payload
FROM pg_logical_slot_peek_changes('outbox_regress', NULL, NULL, 'topics', 't.payments') WITH ORDINALITY AS c(lsn, xid, data, ord),
     LATERAL (SELECT data::jsonb) AS j(m)
ORDER BY ord;
SELECT count(*) AS orders_and_singles
FROM pg_logical_slot_peek_changes('outbox_regress', NULL, NULL, 'topics', ' t.single ,t.orders');
SELECT count(*) AS no_such_topic
FROM pg_logical_slot_peek_changes('outbox_regress', NULL, NULL, 'topics', 't.nothing');

-- Framing: BEGIN and COMMIT around transactions with output only (with topics = t.payments,
-- just the second transaction).
SELECT coalesce(m->>'action', 'message') AS line, m->'payload' AS payload, m->>'messages' AS messages,
       m ? 'end_lsn' AS has_end_lsn,
       (m->>'commit_lsn') = first_value(m->>'commit_lsn') OVER () AS same_commit_lsn
FROM pg_logical_slot_peek_changes('outbox_regress', NULL, NULL, 'topics', 't.payments', 'framing', 'on')
     WITH ORDINALITY AS c(lsn, xid, data, ord),
     LATERAL (SELECT data::jsonb) AS j(m)
ORDER BY ord;
WITH f AS (
    SELECT ord, data::jsonb AS m, lsn
    FROM pg_logical_slot_peek_changes('outbox_regress', NULL, NULL, 'framing', 'true')
         WITH ORDINALITY AS c(lsn, xid, data, ord))
SELECT count(*) FILTER (WHERE m->>'action' = 'begin') AS begins,
       count(*) FILTER (WHERE m->>'action' = 'commit') AS commits,
       count(*) FILTER (WHERE m ? 'key') AS messages,
       sum((m->>'messages')::int) AS counted_in_commits,
       -- a COMMIT line's row LSN is end_lsn: confirming it skips the whole transaction
       bool_and(coalesce(m->>'action', '') <> 'commit' OR (lsn = (m->>'end_lsn')::pg_lsn
                                               AND lsn > (m->>'commit_lsn')::pg_lsn)) AS commit_row_at_end_lsn
FROM f;
SELECT count(*) AS framing_off
FROM pg_logical_slot_peek_changes('outbox_regress', NULL, NULL, 'framing', 'off');

-- Consume: get returns the same lines, then the slot is empty.
SELECT array_agg(data ORDER BY ord) = (SELECT array_agg(data ORDER BY ord) FROM outbox_got)
       AS get_identical
FROM pg_logical_slot_get_changes('outbox_regress', NULL, NULL) WITH ORDINALITY AS c(lsn, xid, data, ord);
SELECT count(*) AS left_after_get FROM pg_logical_slot_peek_changes('outbox_regress', NULL, NULL);

-- 6. Texts that need escaping, and a transaction spilled to disk (not streamed).
SELECT 'emitted' FROM idempotency.emit(E'we\u00efrd "topic"\\n', '{"s": "quote \" backslash \\ tab \t é", "a": [null, true, 1.5e3]}');
SET logical_decoding_work_mem = '64kB';
BEGIN;
SELECT count(idempotency.emit('t.bulk', jsonb_build_object('i', i, 'pad', repeat('x', 200))))
FROM generate_series(1, 2000) i;
COMMIT;
SELECT m->>'topic' AS topic, m->'payload' AS payload
FROM pg_logical_slot_peek_changes('outbox_regress', NULL, NULL, 'topics', E'we\u00efrd "topic"\\n') c,
     LATERAL (SELECT data::jsonb) AS j(m);
WITH b AS (
    SELECT ord, data::jsonb AS m, lag(data::jsonb->>'key') OVER (ORDER BY ord) AS prev
    FROM pg_logical_slot_get_changes('outbox_regress', NULL, NULL, 'topics', 't.bulk')
         WITH ORDINALITY AS c(lsn, xid, data, ord))
SELECT count(*) AS bulk_messages,
       bool_and(prev IS NULL OR m->>'key' COLLATE "C" > prev COLLATE "C") AS increasing,
       bool_and((m->'payload'->>'i')::int = ord) AS in_order,
       count(DISTINCT m->>'commit_lsn') AS transactions
FROM b;
SELECT s.spill_txns > 0 AS spilled, s.stream_txns AS streamed
FROM pg_stat_replication_slots s WHERE slot_name = 'outbox_regress';
RESET logical_decoding_work_mem;

-- 7. Key codec.
SELECT idempotency.lsn_key('16/B374D848', '16/B374D800') AS key,
       idempotency.lsn_key('0/0', '0/0') AS zero,
       idempotency.lsn_key('FFFFFFFF/FFFFFFFF', 'FFFFFFFF/FFFFFFFF') AS max,
       idempotency.lsn_key('1/0', '1/0') AS shared;
SELECT * FROM idempotency.lsn_key_parts('00000016-b374-d848-0000-0016b374d800');
SELECT (idempotency.lsn_key_parts(idempotency.lsn_key('0/16B3748', '0/16B3710'))).*;
-- uuid order is (commit_lsn, lsn) order
SELECT idempotency.lsn_key('1/0', '0/FFFFFFFF') < idempotency.lsn_key('1/1', '0/0') AS commit_first,
       idempotency.lsn_key('1/0', '0/1') < idempotency.lsn_key('1/0', '0/2') AS then_lsn;
SELECT idempotency.lsn_key(NULL, '0/1') IS NULL AS strict;

-- 8. Bad input.
\set VERBOSITY default
SELECT idempotency.lsn_key('0/10', '0/20');
SELECT * FROM idempotency.lsn_key_parts('00000000-0000-0010-0000-000000000020');
SELECT idempotency.emit(NULL, '{}');
SELECT idempotency.emit('', '{}');
SELECT idempotency.emit(repeat('t', 256), '{}');
SELECT idempotency.emit('t.orders', NULL);
BEGIN READ ONLY;
SELECT idempotency.emit('t.orders', '{}');
ROLLBACK;
SELECT count(*) FROM pg_logical_slot_peek_changes('outbox_regress', NULL, NULL, 'colour', 'blue');
SELECT count(*) FROM pg_logical_slot_peek_changes('outbox_regress', NULL, NULL, 'topics', 'a,,b');
SELECT count(*) FROM pg_logical_slot_peek_changes('outbox_regress', NULL, NULL, 'framing', 'maybe');
-- Content that emit did not write, with our prefix: skipped with a warning (its detail
-- names the LSN).
\set VERBOSITY terse
SELECT 'forged' FROM pg_logical_emit_message(true, 'idempotency', '{"topic":"t","payload":1,"key":"x"}');
SELECT 'forged' FROM pg_logical_emit_message(true, 'idempotency', 'not json');
SELECT count(*) AS forged_output FROM pg_logical_slot_get_changes('outbox_regress', NULL, NULL);
-- Forged content nested 70000 levels deep, deeper than PostgreSQL's recursive JSON parser
-- can go: checked without recursion, so it is decoded (well-formed) or skipped (malformed),
-- never an error that would stop the slot at it for good; the next message comes through.
SELECT 'forged deep' FROM pg_logical_emit_message(true, 'idempotency',
    '{"topic":"t.deep","payload":' || repeat('[', 70000) || repeat(']', 70000) || '}');
SELECT 'forged deep' FROM pg_logical_emit_message(true, 'idempotency',
    '{"topic":"t.deep","payload":' || repeat('{"a":', 70000) || '1' || repeat('}', 70000) || '}');
SELECT 'forged deep' FROM pg_logical_emit_message(true, 'idempotency',
    '{"topic":"t.deep","payload":' || repeat('[', 70000) || repeat(']', 69999) || '}');
SELECT 'emitted' FROM idempotency.emit('t.after_deep', '{"n": 1}');
SELECT ord, substring(data from '"topic":"([^"]*)"') AS topic,
       CASE WHEN length(data) < 1000 THEN data::jsonb->'payload' END AS payload,
       position(repeat('[', 70000) || repeat(']', 70000) || ',"commit_lsn"' IN data) > 0 AS deep_array,
       position(repeat('{"a":', 70000) || '1' || repeat('}', 70000) || ',"commit_lsn"' IN data) > 0 AS deep_object
FROM pg_logical_slot_peek_changes('outbox_regress', NULL, NULL) WITH ORDINALITY AS c(lsn, xid, data, ord);
SELECT count(*) AS consumed FROM pg_logical_slot_get_changes('outbox_regress', NULL, NULL);
-- The deepest payload emit can write (the deepest jsonb the server accepts; its input parser
-- recurses) comes through whole.
CREATE TEMP TABLE outbox_depth (n int);
DO $$
DECLARE
    lo int := 1;
    hi int := 1000000;
    mid int;
BEGIN
    WHILE lo < hi LOOP
        mid := (lo + hi + 1) / 2;
        BEGIN
            PERFORM (repeat('[', mid) || repeat(']', mid))::jsonb;
            lo := mid;
        EXCEPTION WHEN statement_too_complex THEN
            hi := mid - 1;
        END;
    END LOOP;
    INSERT INTO outbox_depth VALUES (lo);
END $$;
SELECT 'emitted' FROM outbox_depth, idempotency.emit('t.deepest', (repeat('[', n) || repeat(']', n))::jsonb);
SELECT d.n > 5000 AS deep,
       c.data LIKE '{"key":"%","topic":"t.deepest","payload":' || repeat('[', d.n) || repeat(']', d.n)
                   || ',"commit_lsn":"%' AS decoded_whole
FROM pg_logical_slot_get_changes('outbox_regress', NULL, NULL) c, outbox_depth d;
-- emit needs EXECUTE, which PUBLIC does not have; the codec is public.
CREATE ROLE outbox_regress_role;
GRANT USAGE ON SCHEMA idempotency TO outbox_regress_role;
SET ROLE outbox_regress_role;
SELECT idempotency.emit('t.orders', '{}');
SELECT idempotency.lsn_key('0/2', '0/1') IS NOT NULL AS codec_is_public;
RESET ROLE;
REVOKE USAGE ON SCHEMA idempotency FROM outbox_regress_role;
DROP ROLE outbox_regress_role;

SELECT 'dropped' FROM pg_drop_replication_slot('outbox_regress');
DROP TABLE outbox_rows, outbox_emitted;
\if :outbox_own_dblink
DROP EXTENSION dblink;
\endif
