-- idempotency.metrics: (name, labels, value) rows an exporter reads as they are.
-- In a database of its own: maintain() here must not make partitions other tests expect not
-- to exist yet.
\set own_db idem_metrics
\i sql/include/own_database.sql

SELECT column_name, data_type FROM information_schema.columns
WHERE table_schema = 'idempotency' AND table_name = 'metrics' ORDER BY ordinal_position;

-- Every metric is there (slot lag only with an idempotency slot, the last maintenance run only
-- once maintain() has run), each (name, labels) once, no NULL value.
SELECT count(*) FROM idempotency.maintain() \gset
SELECT name, string_agg(labels::text, ' ' ORDER BY labels::text) AS labels
FROM idempotency.metrics GROUP BY name ORDER BY min(name);
SELECT count(*) = count(DISTINCT (name, labels::text)) AS unique_rows,
       count(*) FILTER (WHERE value IS NULL) AS null_values
FROM idempotency.metrics;

-- Counters by outcome follow the calls.
CREATE TEMP TABLE before AS SELECT name, labels, value FROM idempotency.metrics;
SELECT outcome FROM idempotency.reserve('metrics_t', 'a', '\x01');
SELECT idempotency.complete('metrics_t', 'a', 200, '{}');
SELECT outcome FROM idempotency.reserve('metrics_t', 'a', '\x01');
SELECT outcome FROM idempotency.reserve('metrics_t', 'a', '\x02');
SELECT outcome FROM idempotency.reserve('metrics_t', 'b');
SELECT idempotency.fail('metrics_t', 'b');
SELECT m.name, m.labels, m.value - b.value AS delta
FROM idempotency.metrics m JOIN before b USING (name, labels)
WHERE m.name LIKE '%\_total' AND m.value <> b.value ORDER BY 1, 2;

-- A claim whose lease lapsed: abandoned, with its age; a live one: in flight.
SELECT outcome FROM idempotency.reserve('metrics_t', 'lapsed', NULL, '1 ms');
SELECT outcome FROM idempotency.reserve('metrics_t', 'live', NULL, '1 hour');
SELECT pg_sleep(0.05);
SELECT m.name, m.value - b.value AS delta
FROM idempotency.metrics m JOIN before b USING (name, labels)
WHERE m.name IN ('idempotency_in_flight', 'idempotency_abandoned') ORDER BY 1;
SELECT value > 0 AND value < 3600 AS oldest_abandoned_age_ok
FROM idempotency.metrics WHERE name = 'idempotency_abandoned_oldest_seconds';

-- Key table size, partitions, maintenance, consumers.
SELECT value >= 8192 AS has_bytes FROM idempotency.metrics WHERE name = 'idempotency_keys_bytes';
SELECT value = (SELECT count(*) FROM idempotency.partitions) AS partitions_match
FROM idempotency.metrics WHERE name = 'idempotency_partitions';
SELECT labels ->> 'caller' AS caller, labels ? 'result' AS has_result, value >= 0 AND value < 600 AS age_ok
FROM idempotency.metrics WHERE name = 'idempotency_maintenance_last_run_age_seconds';
SELECT idempotency.accept('metrics_c1', 'p0', 1), idempotency.accept('metrics_c1', 'p1', 1),
       idempotency.accept('metrics_c2', 'p0', 1);
SELECT m.name, m.value - b.value AS delta
FROM idempotency.metrics m JOIN before b USING (name, labels)
WHERE m.name LIKE 'idempotency_consumer%' ORDER BY 1;

-- Outbox slot lag: one row per slot of the idempotency plugin in this database.
SELECT 'slot' FROM pg_create_logical_replication_slot('metrics_slot', 'idempotency');
SELECT idempotency.emit('metrics', '{"n": 1}') IS NOT NULL AS emitted;
SELECT labels, value > 0 AS lagging FROM idempotency.metrics
WHERE name = 'idempotency_outbox_slot_lag_bytes';
-- Consumed: the lag is at most the WAL written since (the server writes some on its own, a
-- running-transactions record every 15 s, more on a busy machine).
SELECT pg_current_wal_lsn() AS before_consuming \gset
SELECT count(*) > 0 AS consumed FROM pg_logical_slot_get_changes('metrics_slot', NULL, NULL);
SELECT value >= 0 AND value <= pg_wal_lsn_diff(pg_current_wal_lsn(), :'before_consuming')
       AS caught_up
FROM idempotency.metrics WHERE name = 'idempotency_outbox_slot_lag_bytes';
SELECT pg_drop_replication_slot('metrics_slot');

-- Not readable by PUBLIC.
CREATE ROLE idem_metrics_nobody;
GRANT USAGE ON SCHEMA idempotency TO idem_metrics_nobody;
SET ROLE idem_metrics_nobody;
\set VERBOSITY terse
SELECT count(*) FROM idempotency.metrics;
\set VERBOSITY default
RESET ROLE;
-- The exporter's grants (docs/operations.md, "Metrics") are enough.
GRANT SELECT ON idempotency.metrics TO idem_metrics_nobody;
GRANT EXECUTE ON FUNCTION idempotency.stats_counters() TO idem_metrics_nobody;
SET ROLE idem_metrics_nobody;
SELECT count(*) > 10 AS exporter_reads FROM idempotency.metrics;
RESET ROLE;
REVOKE ALL ON idempotency.metrics FROM idem_metrics_nobody;
REVOKE ALL ON FUNCTION idempotency.stats_counters() FROM idem_metrics_nobody;
REVOKE USAGE ON SCHEMA idempotency FROM idem_metrics_nobody;
DROP ROLE idem_metrics_nobody;

\c :regress_db
SET client_min_messages = warning;
DROP DATABASE idem_metrics;
