-- idempotency 0.1.0 -> 0.2.0. A fresh CREATE EXTENSION runs idempotency--0.1.0.sql and then
-- this script, so a new install and an upgraded one end with the same objects.

\echo Use "ALTER EXTENSION idempotency UPDATE TO '0.2.0'" to load this file. \quit

-- === operator control of consumers (issue 13) ===
-- When each watermark last moved: set by accept (same HOT update: the column is not indexed)
-- and set_watermark. NULL for a watermark last moved before 0.2.0.
ALTER TABLE idempotency.consumer_positions ADD COLUMN moved_at timestamptz;

-- An operator moves a watermark anywhere, backwards included (a replay), or removes a
-- consumer. Both refuse a consumer that has no watermark at all.
CREATE FUNCTION idempotency.set_watermark(consumer text, partition text, "position" bigint)
RETURNS void
AS 'MODULE_PATHNAME', 'idem_set_watermark_bigint' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION idempotency.set_watermark(consumer text, partition text, "position" uuid)
RETURNS void
AS 'MODULE_PATHNAME', 'idem_set_watermark_uuid' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION idempotency.drop_consumer(consumer text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'idem_drop_consumer' LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION
    idempotency.set_watermark(text, text, bigint),
    idempotency.set_watermark(text, text, uuid),
    idempotency.drop_consumer(text)
FROM PUBLIC;

-- New columns at the end (CREATE OR REPLACE keeps the old ones): when the watermark last moved,
-- and a position that reads as an outbox key (commit LSN not 0, LSN not above it) as its
-- (commit LSN, LSN) pair; NULL for other positions (any bigint position among them).
CREATE OR REPLACE VIEW idempotency.watermarks AS
    SELECT w.consumer, w.partition, idempotency.position_numeric(w.position) AS watermark,
           w.position, w.moved_at,
           CASE WHEN k.commit_lsn OPERATOR(pg_catalog.<>) '0/0'::pg_catalog.pg_lsn
                 AND k.lsn OPERATOR(pg_catalog.<=) k.commit_lsn THEN k.commit_lsn END
               AS commit_lsn,
           CASE WHEN k.commit_lsn OPERATOR(pg_catalog.<>) '0/0'::pg_catalog.pg_lsn
                 AND k.lsn OPERATOR(pg_catalog.<=) k.commit_lsn THEN k.lsn END AS lsn
    FROM idempotency.consumer_positions w
    CROSS JOIN LATERAL pg_catalog.replace(w.position::pg_catalog.text, '-', '') AS h(hex)
    CROSS JOIN LATERAL (SELECT
        (pg_catalog.substr(h.hex, 1, 8) OPERATOR(pg_catalog.||) '/'
            OPERATOR(pg_catalog.||) pg_catalog.substr(h.hex, 9, 8))::pg_catalog.pg_lsn,
        (pg_catalog.substr(h.hex, 17, 8) OPERATOR(pg_catalog.||) '/'
            OPERATOR(pg_catalog.||) pg_catalog.substr(h.hex, 25, 8))::pg_catalog.pg_lsn
        ) AS k(commit_lsn, lsn);

-- === maintenance runs (issue 13) ===
-- One row per run of maintain(), whoever called it (the worker, pg_cron, a person); the last
-- 100 are kept (maintain() deletes older ones). A run that failed with an error is written
-- by the next maintain() of the database (or at once by the worker), see README. Not dumped:
-- a restored database starts with an empty history.
CREATE TABLE idempotency.maintenance_log (
    run bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    started_at timestamptz NOT NULL,
    ended_at timestamptz NOT NULL,
    caller text NOT NULL CHECK (caller IN ('worker', 'pg_cron', 'sql')),
    role name NOT NULL,
    result text NOT NULL CHECK (result IN ('ok', 'incomplete', 'failed')),
    steps jsonb NOT NULL DEFAULT '[]',
    error text
);

REVOKE ALL ON idempotency.maintenance_log FROM PUBLIC;

-- Newest first. result: ok (every step done), incomplete (a step skipped or failed: see
-- steps), failed (the run ended with an error: see error).
CREATE VIEW idempotency.maintenance_runs AS
    SELECT run, started_at, ended_at, ended_at OPERATOR(pg_catalog.-) started_at AS duration,
           caller, role, result, steps, error
    FROM idempotency.maintenance_log
    ORDER BY run DESC;

REVOKE ALL ON idempotency.maintenance_runs FROM PUBLIC;
