-- Time partitions of idempotency.keys: maintain() creates, moves, purges and drops.
-- Output shows no times: what a partition holds is checked against now() instead.
SET idempotency.partition_width = '1d';
SET idempotency.premake = 2;
SET TimeZone = 'UTC';

-- Before any maintenance only the default partition exists; keys still land.
SELECT partition, is_default, due_to_drop FROM idempotency.partitions;
SELECT outcome FROM idempotency.reserve('partitions_t', 'early', NULL, '5 min', '1 hour');
SELECT tableoid::regclass FROM idempotency.keys WHERE scope = 'partitions_t';

-- A partition holding a live key is never dropped, even with expired rows beside it.
DO $$
BEGIN
    EXECUTE format('CREATE TABLE idempotency.keys_live PARTITION OF idempotency.keys'
                   ' FOR VALUES FROM (%L) TO (%L)', now() - interval '2 days',
                   now() + interval '20 minutes');
END $$;
INSERT INTO idempotency.keys (scope, key, state, attempt, first_seen_at, expires_at) VALUES
    ('partitions_t', 'live', 'completed', 1, now(), now() + interval '10 minutes'),
    ('partitions_t', 'expired', 'completed', 1, now(), now() - interval '1 day');

-- The first run: current and premade partitions (around keys_live), the early key moved out
-- of the default partition, nothing dropped.
-- (Other tests' keys may sit in the default partition too: at least ours moves. Two or three
-- are created: keys_live ends 20 minutes from now, in this slot or, late in the day, the next.)
SELECT action, count(*) >= 2 AS created_ahead, sum(rows) >= 1 AS moved_rows
FROM idempotency.maintain() GROUP BY action ORDER BY action;
SELECT tableoid::regclass = 'idempotency.keys_default'::regclass AS in_default
FROM idempotency.keys WHERE scope = 'partitions_t' AND key = 'early';
SELECT partition, due_to_drop FROM idempotency.partitions WHERE partition = 'keys_live';
SELECT state FROM idempotency.lookup('partitions_t', 'live');
SELECT count(*) AS expired_found FROM idempotency.lookup('partitions_t', 'expired');

-- Partitions cover now and the next two days, without gaps; names encode their start.
SELECT count(*) FILTER (WHERE range_start <= now() AND range_end > now()) AS current,
       bool_and(partition ~ '^keys_p\d{4}_\d{2}_\d{2}(_\d{4,6}(_\d{6})?)?$' OR partition = 'keys_live')
           AS named_by_range,
       max(range_end) >= date_bin('1 day', now(), '2000-01-01 00:00+00') + interval '3 days'
           AS premade
FROM idempotency.partitions WHERE NOT is_default;
SELECT count(*) AS overlaps FROM idempotency.partitions a JOIN idempotency.partitions b
    ON a.partition < b.partition AND a.range_start < b.range_end AND b.range_start < a.range_end;

-- A second run has nothing to do.
SELECT count(*) FROM idempotency.maintain();

-- Keys written across partition boundaries (and beyond the premade ones) are all found.
SELECT r.outcome FROM (VALUES ('1 hour'), ('1 day'), ('2 days'), ('20 days')) AS v(retention),
    LATERAL idempotency.reserve('partitions_t', 'k-' || v.retention, NULL, '5 min',
                                v.retention::interval) AS r;
SELECT key, tableoid::regclass = 'idempotency.keys_default'::regclass AS in_default
FROM idempotency.keys WHERE scope = 'partitions_t' AND key LIKE 'k-%' ORDER BY key;
-- The 20-day key sits in the default partition until maintain() gives it a partition.
SELECT action, partition ~ '^keys_p\d{4}_\d{2}_\d{2}$' AS named_by_day, rows, detail
FROM idempotency.maintain();
SELECT key, tableoid::regclass = 'idempotency.keys_default'::regclass AS in_default
FROM idempotency.keys WHERE scope = 'partitions_t' AND key LIKE 'k-%' ORDER BY key;
SELECT l.state, l.attempt FROM (VALUES ('1 hour'), ('1 day'), ('2 days'), ('20 days')) AS v(r),
    LATERAL idempotency.lookup('partitions_t', 'k-' || v.r) AS l;

-- An expired partition (made by hand, in the past) and expired rows in the default partition.
CREATE TABLE idempotency.keys_p2020_01_01 PARTITION OF idempotency.keys
    FOR VALUES FROM ('2020-01-01 00:00+00') TO ('2020-01-02 00:00+00');
INSERT INTO idempotency.keys (scope, key, state, attempt, first_seen_at, expires_at) VALUES
    ('partitions_t', 'old-1', 'completed', 1, '2019-12-31 12:00+00', '2020-01-01 12:00+00'),
    ('partitions_t', 'old-2', 'completed', 1, '2019-12-31 12:00+00', '2020-01-01 13:00+00'),
    ('partitions_t', 'old-3', 'completed', 1, '2019-12-31 12:00+00', '2020-02-01 00:00+00');
ANALYZE idempotency.keys_p2020_01_01;
SELECT partition, range_start, range_end, rows_estimate, due_to_drop
FROM idempotency.partitions WHERE partition = 'keys_p2020_01_01';
SELECT action, partition, range_start, range_end, rows, detail FROM idempotency.maintain()
ORDER BY action;
SELECT count(*) FROM idempotency.partitions WHERE partition = 'keys_p2020_01_01';
SELECT count(*) FROM pg_class WHERE relname = 'keys_p2020_01_01';
SELECT count(*) FROM idempotency.keys WHERE scope = 'partitions_t' AND key LIKE 'old-%';
SELECT count(*) FROM idempotency.partitions WHERE due_to_drop;

-- The longest retention a reserve may ask for.
SET idempotency.max_retention = '7d';
SELECT outcome FROM idempotency.reserve('partitions_t', 'week', NULL, '5 min', '7 days');
SELECT outcome FROM idempotency.reserve('partitions_t', 'long', NULL, '5 min', '8 days');
\set VERBOSITY sqlstate
SELECT outcome FROM idempotency.reserve('partitions_t', 'long', NULL, '5 min', '8 days');
\set VERBOSITY default
SET idempotency.max_retention = '30d';

-- Only roles granted EXECUTE may maintain.
CREATE ROLE partitions_t_app;
GRANT USAGE ON SCHEMA idempotency TO partitions_t_app;
SET ROLE partitions_t_app;
SELECT * FROM idempotency.maintain();
SELECT * FROM idempotency.partitions;
RESET ROLE;
REVOKE USAGE ON SCHEMA idempotency FROM partitions_t_app;
DROP ROLE partitions_t_app;

DELETE FROM idempotency.keys WHERE scope = 'partitions_t';
DROP TABLE idempotency.keys_live;

-- With keys_live gone, part of the current slot has no partition: an expired row there lands
-- in the default partition. maintain() purges it before it creates the partition (it used to
-- attach the partition over it and fail with 23514).
INSERT INTO idempotency.keys (scope, key, state, attempt, first_seen_at, expires_at) VALUES
    ('partitions_t', 'expired-now', 'completed', 1, now() - interval '1 day',
     date_bin('1 day', now(), '2000-01-01 00:00+00'));
SELECT tableoid::regclass AS lands_in FROM idempotency.keys
WHERE scope = 'partitions_t' AND key = 'expired-now';
-- (Run in the last 20 minutes of a UTC day, keys_live also covered part of the next slot,
-- which is then created too: hence the aggregates.)
SELECT action,
       bool_or(range_start IS NOT DISTINCT FROM date_bin('1 day', now(), '2000-01-01 00:00+00'))
           AS current_slot,
       bool_or(rows >= 1) AS some_rows
FROM idempotency.maintain() GROUP BY action ORDER BY action;
SELECT count(*) FROM idempotency.keys WHERE scope = 'partitions_t' AND key = 'expired-now';
SELECT count(*) AS current_partitions FROM idempotency.partitions
WHERE range_start = date_bin('1 day', now(), '2000-01-01 00:00+00');

-- A step that fails (here: a table already holds the name of a partition to create) is
-- reported as 'failed' with the error, and the other steps still run.
SELECT 'keys_p' || to_char(date_bin('1 day', now(), '2000-01-01 00:00+00') + interval '3 days',
                           'YYYY_MM_DD') AS blocked \gset
SET partitions_t.blocked = :'blocked';
DO $$ BEGIN EXECUTE format('CREATE TABLE idempotency.%I (x int)',
                           current_setting('partitions_t.blocked')); END $$;
CREATE TABLE idempotency.keys_p2020_01_04 PARTITION OF idempotency.keys
    FOR VALUES FROM ('2020-01-04 00:00+00') TO ('2020-01-05 00:00+00');
SET idempotency.premake = 3;
SELECT action, partition = :'blocked' AS blocked, detail ~ 'already exists' AS collision
FROM idempotency.maintain() ORDER BY action;
DO $$ BEGIN EXECUTE format('DROP TABLE idempotency.%I',
                           current_setting('partitions_t.blocked')); END $$;
SELECT action, partition = :'blocked' AS blocked FROM idempotency.maintain();
SET idempotency.premake = 2;

-- Partitions are dropped by OID, in whatever schema they live.
CREATE SCHEMA partitions_t_elsewhere;
CREATE TABLE partitions_t_elsewhere."Keys 2020" PARTITION OF idempotency.keys
    FOR VALUES FROM ('2020-01-05 00:00+00') TO ('2020-01-06 00:00+00');
SELECT action, partition, rows FROM idempotency.maintain();
SELECT count(*) FROM pg_class WHERE relname = 'Keys 2020';
DROP SCHEMA partitions_t_elsewhere;

-- maintain() needs READ COMMITTED: a transaction snapshot would miss rows committed after it.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT * FROM idempotency.maintain();
ROLLBACK;
