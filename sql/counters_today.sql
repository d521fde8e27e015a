-- Counters that answer "today": maintain() snapshots idempotency.stats into one row per hour
-- (UTC) of idempotency.stats_snapshots; stats_hourly gives what each hour counted (the
-- current hour from the live counters), stats_daily sums the hours per day. And row
-- estimates that do not read 0 before the first ANALYZE.
SET TimeZone = 'UTC';
SELECT idempotency.stats_reset();
DELETE FROM idempotency.stats_snapshots;

-- Two days ago, four hourly snapshots: the first one's counters began before it (unknown
-- count: NULL), then +5, a restart (since moved: the whole value counts), then +5.
CREATE TEMP TABLE base AS
    SELECT date_trunc('day', now()) - interval '2 days' + interval '10 hours' AS h0;
INSERT INTO idempotency.stats_snapshots
SELECT h0 + n * interval '1 hour', h0 + n * interval '1 hour' + interval '30 minutes',
       CASE WHEN n < 2 THEN h0 - interval '1 day' ELSE h0 + interval '1 hour 40 minutes' END,
       v, 2 * v, 0, 0, 0, 3 * v, 0, 0
FROM base, (VALUES (0, 10), (1, 15), (2, 4), (3, 9)) AS s(n, v);

SELECT hour - (SELECT h0 FROM base) AS after_h0, reserves_new, reserves_replay, completes
FROM idempotency.stats_hourly
WHERE hour < date_trunc('day', now()) - interval '1 day';

-- Today: three new keys, one replay, three completes since the reset.
SELECT r.outcome FROM generate_series(1, 3) g, LATERAL idempotency.reserve('today', 'k' || g) r;
SELECT idempotency.complete('today', 'k' || g, 200, '{}') FROM generate_series(1, 3) g;
SELECT outcome FROM idempotency.reserve('today', 'k1');
SELECT day = current_date - 2 AS two_days_ago, day = current_date AS today, reserves_new,
       reserves_replay, completes, hours
FROM idempotency.stats_daily
ORDER BY day;

-- stats_snapshot() keeps one row per hour (an upsert), and drops rows older than `keep`.
SELECT idempotency.stats_snapshot();
SELECT idempotency.stats_snapshot();
SELECT count(*) AS rows_this_hour, max(reserves_new) AS reserves_new
FROM idempotency.stats_snapshots
WHERE hour = date_trunc('hour', now());
SELECT idempotency.stats_snapshot(interval '1 day');
SELECT count(*) AS rows_left FROM idempotency.stats_snapshots;

-- maintain() takes the snapshot (the background worker's runs too); a failed step would show.
DELETE FROM idempotency.stats_snapshots;
SELECT count(*) FILTER (WHERE action = 'failed') AS failed FROM idempotency.maintain();
SELECT count(*) AS snapshots, bool_and(hour = date_trunc('hour', now())) AS this_hour
FROM idempotency.stats_snapshots;
SELECT reserves_new FROM idempotency.stats_daily WHERE day = current_date;

-- Row estimates before the first ANALYZE: reltuples is -1, the live-row count stands in.
CREATE TABLE idempotency.keys_never_analyzed PARTITION OF idempotency.keys
    FOR VALUES FROM (now() + interval '28 days') TO (now() + interval '30 days')
    WITH (autovacuum_enabled = off);
SELECT count(*) FROM generate_series(1, 5) g,
    LATERAL idempotency.reserve('estimate', 'e' || g, retention => interval '29 days') r
WHERE r.outcome = 'new';
SELECT pg_stat_force_next_flush();
SELECT reltuples FROM pg_class WHERE oid = 'idempotency.keys_never_analyzed'::regclass;
SELECT rows_estimate FROM idempotency.partitions WHERE partition = 'keys_never_analyzed';
SELECT idempotency.rows_estimate('idempotency.keys_never_analyzed');
SELECT (SELECT value FROM idempotency.metrics WHERE name = 'idempotency_keys_rows_estimate')
       >= 5 AS metric_counts_them;
ANALYZE idempotency.keys_never_analyzed;
SELECT rows_estimate FROM idempotency.partitions WHERE partition = 'keys_never_analyzed';
DROP TABLE idempotency.keys_never_analyzed;
SELECT count(*) FILTER (WHERE idempotency.forget('today', 'k' || g)) AS forgotten
FROM generate_series(1, 3) g;
RESET TimeZone;
