-- Operator control of consumers: set_watermark (any direction), drop_consumer, and the
-- watermarks view's moved_at, commit_lsn and lsn columns.
SET client_min_messages = warning;

-- accept records when the watermark moved (the transaction's time), a duplicate does not.
BEGIN;
SELECT idempotency.accept('ops', 'p0', 100), idempotency.accept('ops', 'p1', 5);
SELECT moved_at = now() AS moved_now FROM idempotency.watermarks WHERE consumer = 'ops' AND partition = 'p0';
COMMIT;
UPDATE idempotency.consumer_positions SET moved_at = '2000-01-01' WHERE consumer = 'ops';
SELECT idempotency.accept('ops', 'p0', 100) AS duplicate;
SELECT moved_at FROM idempotency.watermarks WHERE consumer = 'ops' AND partition = 'p0';
BEGIN;
SELECT idempotency.accept('ops', 'p0', 101) AS advanced;
SELECT moved_at = now() AS moved_now FROM idempotency.watermarks WHERE consumer = 'ops' AND partition = 'p0';
COMMIT;

-- Backwards: a replay from 50 on; the next accept of 51 is true again.
UPDATE idempotency.consumer_positions SET moved_at = '2000-01-01' WHERE consumer = 'ops';
BEGIN;
SELECT idempotency.set_watermark('ops', 'p0', 50);
SELECT watermark, moved_at = now() AS moved_now FROM idempotency.watermarks
WHERE consumer = 'ops' AND partition = 'p0';
COMMIT;
SELECT idempotency.accept('ops', 'p0', 51) AS replayed, idempotency.accept('ops', 'p0', 51) AS dup;
-- Forwards, and a new partition of a known consumer; a uuid position.
SELECT idempotency.set_watermark('ops', 'p0', 1000);
SELECT idempotency.accept('ops', 'p0', 999) AS below;
SELECT idempotency.set_watermark('ops', 'p2', 'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid);
SELECT idempotency.watermark('ops', 'p2');
-- 0 is allowed (everything above it is new).
SELECT idempotency.set_watermark('ops', 'p1', 0);
SELECT idempotency.accept('ops', 'p1', 1) AS after_zero;

-- Outbox positions read as (commit LSN, LSN); bigint positions have none.
SELECT idempotency.accept('outbox', 'slot', idempotency.lsn_key('16/B374D848', '16/B374D800'));
SELECT consumer, partition, commit_lsn, lsn FROM idempotency.watermarks ORDER BY 1, 2;

-- Bad input.
\set VERBOSITY default
SELECT idempotency.set_watermark('ops', 'p0', NULL::bigint);
SELECT idempotency.set_watermark('ops', 'p0', NULL::uuid);
SELECT idempotency.set_watermark('ops', 'p0', -1);
SELECT idempotency.set_watermark('nobody', 'p0', 1);
SELECT idempotency.set_watermark(NULL, 'p0', 1);
SELECT idempotency.set_watermark('ops', '', 1);
SELECT idempotency.drop_consumer('nobody');
SELECT idempotency.drop_consumer(NULL);
\set VERBOSITY terse

-- drop_consumer removes every partition's watermark: everything is new again.
SELECT idempotency.drop_consumer('ops') AS partitions_dropped;
SELECT count(*) FROM idempotency.watermarks WHERE consumer = 'ops';
SELECT idempotency.accept('ops', 'p0', 1) AS new_again;
SELECT idempotency.drop_consumer('ops'), idempotency.drop_consumer('outbox');

-- In a read-only transaction both are refused.
SELECT idempotency.accept('ro', 'p', 1);
BEGIN READ ONLY;
SELECT idempotency.set_watermark('ro', 'p', 0);
ROLLBACK;
BEGIN READ ONLY;
SELECT idempotency.drop_consumer('ro');
ROLLBACK;
SELECT idempotency.drop_consumer('ro');
