-- Consumer watermarks: accept, watermark, the watermarks view.
\set VERBOSITY terse
\i sql/include/try.sql

-- No watermark yet.
SELECT idempotency.watermark('wm_c', 'p0') IS NULL AS no_watermark;

-- true above the watermark (it moves), false at or below it.
SELECT idempotency.accept('wm_c', 'p0', 5) AS first;
SELECT idempotency.accept('wm_c', 'p0', 5) AS same;
SELECT idempotency.accept('wm_c', 'p0', 4) AS below;
SELECT idempotency.accept('wm_c', 'p0', 0) AS zero_below;
SELECT idempotency.accept('wm_c', 'p0', 6) AS above;
SELECT idempotency.accept('wm_c', 'p0', 100) AS gap;
SELECT idempotency.watermark('wm_c', 'p0');

-- Position 0 is a valid first position.
SELECT idempotency.accept('wm_c', 'p_zero', 0) AS zero_first;
SELECT idempotency.watermark('wm_c', 'p_zero') AS zero;

-- Partitions and consumers are independent.
SELECT idempotency.accept('wm_c', 'p1', 3) AS other_partition;
SELECT idempotency.accept('wm_other', 'p0', 3) AS other_consumer;
SELECT idempotency.watermark('wm_c', 'p0') AS p0, idempotency.watermark('wm_c', 'p1') AS p1;

-- A rollback undoes the move: the message will be processed again.
BEGIN;
SELECT idempotency.accept('wm_c', 'p0', 101) AS in_rolled_back;
SELECT idempotency.accept('wm_c', 'p0', 101) AS again_same_tx;
ROLLBACK;
SELECT idempotency.watermark('wm_c', 'p0') AS after_rollback;
SELECT idempotency.accept('wm_c', 'p0', 101) AS redelivered;
-- Rollback of the first message of a partition removes it.
BEGIN;
SELECT idempotency.accept('wm_c', 'p_new', 1) AS first_in_rolled_back;
ROLLBACK;
SELECT idempotency.watermark('wm_c', 'p_new') IS NULL AS no_watermark;
-- A rolled-back savepoint too.
BEGIN;
SAVEPOINT s;
SELECT idempotency.accept('wm_c', 'p0', 102) AS in_savepoint;
ROLLBACK TO SAVEPOINT s;
SELECT idempotency.accept('wm_c', 'p0', 102) AS after_savepoint;
COMMIT;

-- One row per partition, whatever the number of messages.
SELECT count(*) FILTER (WHERE idempotency.accept('wm_many', 'p', g)) AS accepted
FROM generate_series(1, 1000) AS g;
SELECT count(*) FILTER (WHERE idempotency.accept('wm_many', 'p', g)) AS accepted_again
FROM generate_series(1, 1000) AS g;
SELECT count(*) AS rows FROM idempotency.consumer_positions WHERE consumer = 'wm_many';

-- 128-bit positions compare as unsigned big-endian numbers.
SELECT idempotency.accept('wm_c', 'u', '7fffffff-ffff-ffff-ffff-ffffffffffff'::uuid) AS u1;
SELECT idempotency.accept('wm_c', 'u', '80000000-0000-0000-0000-000000000000'::uuid) AS high_bit_above;
SELECT idempotency.accept('wm_c', 'u', '7fffffff-ffff-ffff-ffff-ffffffffffff'::uuid) AS below;
SELECT idempotency.accept('wm_c', 'u', '80000000-0000-0000-0000-000000000001'::uuid) AS last_byte;
SELECT idempotency.accept('wm_c', 'u', '80000001-0000-0000-0000-000000000000'::uuid) AS first_byte;
SELECT idempotency.watermark('wm_c', 'u');
SELECT idempotency.accept('wm_c', 'u', 'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid) AS max;
SELECT idempotency.watermark('wm_c', 'u') AS max_watermark;
-- A bigint position is the same number as a uuid position: both kinds compare.
SELECT idempotency.accept('wm_c', 'mix', '00000000-0000-0000-0000-0000000000ff'::uuid) AS uuid_255;
SELECT idempotency.accept('wm_c', 'mix', 255) AS bigint_255;
SELECT idempotency.accept('wm_c', 'mix', 256) AS bigint_256;
SELECT idempotency.accept('wm_c', 'mix', '00000000-0000-0000-0000-000000000100'::uuid) AS uuid_256;
SELECT idempotency.accept('wm_c', 'big', 9223372036854775807) AS bigint_max;
SELECT idempotency.watermark('wm_c', 'big');
-- WAL-position keys (commit LSN, message LSN) order by commit LSN first.
SELECT idempotency.accept('wm_c', 'lsn', '00000000-0100-0000-0000-000000ffffff'::uuid) AS k1;
SELECT idempotency.accept('wm_c', 'lsn', '00000000-0200-0000-0000-000000000001'::uuid) AS k2;
SELECT idempotency.accept('wm_c', 'lsn', '00000000-0100-0000-0000-00000fffffff'::uuid) AS older_commit;

SELECT idempotency.position_numeric('00000000-0000-0001-0000-000000000000') AS two_to_64,
       idempotency.position_numeric('00000000-0000-0000-0000-000000000000') AS zero;

-- The view.
SELECT consumer, partition, watermark, position FROM idempotency.watermarks
WHERE consumer LIKE 'wm\_%' ORDER BY consumer, partition;

-- Errors.
SELECT statement, pg_temp.try(statement) AS result FROM (VALUES
    ($$SELECT idempotency.accept(NULL, 'p', 1)$$),
    ($$SELECT idempotency.accept('wm_e', NULL, 1)$$),
    ($$SELECT idempotency.accept('', 'p', 1)$$),
    ($$SELECT idempotency.accept('wm_e', '', 1)$$),
    ($$SELECT idempotency.accept(repeat('c', 256), 'p', 1)$$),
    ($$SELECT idempotency.accept('wm_e', 'p', NULL::bigint)$$),
    ($$SELECT idempotency.accept('wm_e', 'p', NULL::uuid)$$),
    ($$SELECT idempotency.accept('wm_e', 'p', -1)$$),
    ($$SELECT idempotency.watermark(NULL, 'p')$$),
    ($$SELECT idempotency.watermark('wm_e', '')$$)
) AS t(statement);
SELECT count(*) AS error_rows FROM idempotency.consumer_positions WHERE consumer = 'wm_e';

-- A hostile search_path changes nothing.
CREATE SCHEMA wm_evil;
CREATE TABLE wm_evil.consumer_positions (consumer text, partition text, position uuid);
SET search_path = wm_evil, public;
SELECT idempotency.accept('wm_c', 'p0', 200) AS hostile_path;
SELECT idempotency.watermark('wm_c', 'p0') AS hostile_path;
RESET search_path;
SELECT count(*) AS evil_rows FROM wm_evil.consumer_positions;
DROP SCHEMA wm_evil CASCADE;

DELETE FROM idempotency.consumer_positions WHERE consumer LIKE 'wm\_%';
