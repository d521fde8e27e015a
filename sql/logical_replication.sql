-- Logical replication of the extension's state: publications that would lose keys are refused,
-- next_key's bounds move with stream_positions / set_stream_floor, and accept refuses
-- read-only transactions with its own message.
\i sql/include/try.sql

-- accept writes: refused in a read-only transaction (on a standby too), naming the function,
-- as the other writing calls do; watermark reads.
SELECT idempotency.accept('lr_c', 'p0', 10) AS accepted_before;
BEGIN READ ONLY;
SELECT pg_temp.try($$SELECT idempotency.accept('lr_c', 'p0', 11)$$) AS accept_bigint;
SELECT pg_temp.try($$SELECT idempotency.accept('lr_c', 'p0', '00000000-0000-0000-0000-00000000000c'::uuid)$$) AS accept_uuid;
SELECT pg_temp.try($$SELECT idempotency.create_stream('lr_ro')$$) AS create_stream;
SELECT pg_temp.try($$SELECT idempotency.drop_stream('lr_ro')$$) AS drop_stream;
SELECT pg_temp.try($$SELECT idempotency.set_stream_floor('lr_ro', 5)$$) AS set_stream_floor;
SELECT idempotency.watermark('lr_c', 'p0') AS watermark_read;
COMMIT;
SET default_transaction_read_only = on;
SELECT pg_temp.try($$SELECT idempotency.accept('lr_c', 'p0', 11)$$) AS accept_read_only_default;
RESET default_transaction_read_only;
SELECT idempotency.accept('lr_c', 'p0', 11) AS accepted_after;

-- stream_positions: every stream's durable bound (no value above it was handed out).
SELECT idempotency.create_stream('lr_s', 10);
SELECT idempotency.create_stream('lr_t', 10);
SELECT idempotency.next_key('lr_s') AS s1, idempotency.next_key('lr_s') AS s2;
SELECT * FROM idempotency.stream_positions() WHERE stream LIKE 'lr\_%';

-- set_stream_floor raises the bound; next_key continues above the floor, in every session.
SELECT idempotency.set_stream_floor('lr_s', 5000) AS raised;
SELECT reserved_up_to FROM idempotency.stream_positions() WHERE stream = 'lr_s';
SELECT idempotency.next_key('lr_s') AS after_floor, idempotency.next_key('lr_s') AS next;
SELECT idempotency.set_stream_floor('lr_t', 7) AS raised_unused;
SELECT idempotency.next_key('lr_t') AS t_after_floor;
-- Never backwards: a floor at or below the bound changes nothing and returns the bound in
-- force; the values of the current block are given up (a gap), never repeated.
SELECT idempotency.set_stream_floor('lr_s', 100) AS not_lowered;
SELECT idempotency.set_stream_floor('lr_s', 5010) AS same;
SELECT idempotency.next_key('lr_s') AS after_no_op;
-- A rollback does not take a raised bound back (it is not part of the transaction).
BEGIN;
SELECT idempotency.set_stream_floor('lr_t', 900) AS raised_in_rollback;
ROLLBACK;
SELECT idempotency.next_key('lr_t') AS t_after_rollback;
-- Bad input.
SELECT pg_temp.try($$SELECT idempotency.set_stream_floor('lr_s', -1)$$) AS negative;
SELECT pg_temp.try($$SELECT idempotency.set_stream_floor('lr_s', NULL)$$) AS null_floor;
SELECT pg_temp.try($$SELECT idempotency.set_stream_floor(NULL, 1)$$) AS null_stream;
SELECT pg_temp.try($$SELECT idempotency.set_stream_floor('', 1)$$) AS empty_stream;
SELECT pg_temp.try($$SELECT idempotency.set_stream_floor('lr_none', 1)$$) AS unknown_stream;
SELECT pg_temp.try($$SELECT idempotency.set_stream_floor(repeat('x', 256), 1)$$) AS too_long;
-- The maximum: next_key then reports the stream exhausted.
SELECT idempotency.set_stream_floor('lr_t', 9223372036854775807) AS at_max;
SELECT pg_temp.try($$SELECT idempotency.next_key('lr_t')$$) AS exhausted;
SELECT idempotency.drop_stream('lr_s');
SELECT idempotency.drop_stream('lr_t');
-- Operators only: PUBLIC may not call them.
SELECT has_function_privilege('public', 'idempotency.stream_positions()', 'EXECUTE') AS public_positions,
       has_function_privilege('public', 'idempotency.set_stream_floor(text, bigint)', 'EXECUTE') AS public_floor;

-- Publications. Through the root, the extension's tables replicate whatever partitions
-- either side has: accepted.
CREATE PUBLICATION lr_ok FOR TABLE idempotency.keys, idempotency.streams,
    idempotency.consumer_positions WITH (publish_via_partition_root = true);
CREATE PUBLICATION lr_all FOR ALL TABLES WITH (publish_via_partition_root = true);
-- Leaf by leaf (the default), or only some operations or columns: refused, with the reason.
CREATE PUBLICATION lr_leaf FOR TABLE idempotency.keys;
CREATE PUBLICATION lr_all_leaf FOR ALL TABLES;
CREATE PUBLICATION lr_schema FOR TABLES IN SCHEMA idempotency;
CREATE PUBLICATION lr_default FOR TABLE idempotency.keys_default WITH (publish_via_partition_root = true);
ALTER PUBLICATION lr_ok SET (publish_via_partition_root = false);
ALTER PUBLICATION lr_ok SET (publish = 'insert, update');
CREATE PUBLICATION lr_cols FOR TABLE idempotency.consumer_positions (consumer, partition);
CREATE PUBLICATION lr_other FOR TABLE idempotency.streams WITH (publish = 'insert');
SELECT pubname, pubviaroot, pubinsert AND pubupdate AND pubdelete AS every_change
FROM pg_publication WHERE pubname LIKE 'lr\_%' ORDER BY 1;
SELECT tablename FROM pg_publication_tables WHERE pubname = 'lr_ok' ORDER BY 1;
-- The guard is the extension's own event trigger.
SELECT evtname, evtevent, evttags, evtenabled FROM pg_event_trigger
WHERE evtname = 'idempotency_publication_guard';
SELECT count(*) AS guard_is_a_member FROM pg_depend
WHERE classid = 'pg_event_trigger'::regclass AND refclassid = 'pg_extension'::regclass
  AND objid = (SELECT oid FROM pg_event_trigger WHERE evtname = 'idempotency_publication_guard')
  AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'idempotency');
SELECT pg_temp.try($$SELECT idempotency.publication_guard()$$) AS called_directly;

-- A leaf-by-leaf publication made past the guard (made before the extension, or with the
-- trigger disabled): maintain() creates no partition (reported 'failed'), so the subscriber's
-- tables stay the publisher's; it still purges and drops.
BEGIN;
ALTER EVENT TRIGGER idempotency_publication_guard DISABLE;
CREATE PUBLICATION lr_bypass FOR TABLE idempotency.keys;
ALTER EVENT TRIGGER idempotency_publication_guard ENABLE;
SET LOCAL idempotency.partition_width = '13s';
SELECT action, partition IS NULL AS no_partition, detail
FROM idempotency.maintain() WHERE action IN ('created', 'failed');
SELECT count(*) AS partitions_of_13s
FROM idempotency.partitions WHERE range_end - range_start = interval '13 seconds';
ROLLBACK;
DROP PUBLICATION lr_ok, lr_all;
DELETE FROM idempotency.consumer_positions WHERE consumer = 'lr_c';
