-- idempotency 0.1.0 -> 0.2.0. A fresh CREATE EXTENSION runs idempotency--0.1.0.sql and then
-- this script, so a new install and an upgraded one end with the same objects.

\echo Use "ALTER EXTENSION idempotency UPDATE TO '0.2.0'" to load this file. \quit

-- === logical replication ===
-- next_key's bounds are overwritten in place, which logical decoding does not carry: after a
-- move to a logical subscriber, read them on the old server and raise them on the new one.

-- Every stream's durable bound: no value above reserved_up_to was ever handed out.
CREATE FUNCTION idempotency.stream_positions()
RETURNS TABLE (stream text, block integer, reserved_up_to bigint)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT s.stream::pg_catalog.text, s.block, s.reserved_up_to
    FROM idempotency.streams s ORDER BY 1
$$;

-- Raises the stream's bound to at least floor (never lowers it): next_key then returns values
-- above floor. Returns the bound in force afterwards.
CREATE FUNCTION idempotency.set_stream_floor(stream text, floor bigint)
RETURNS bigint
AS 'MODULE_PATHNAME', 'idem_set_stream_floor' LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION
    idempotency.stream_positions(),
    idempotency.set_stream_floor(text, bigint)
FROM PUBLIC;

-- A publication that would lose keys on its subscribers (partitions of idempotency.keys
-- published on their own instead of through the root; the extension's tables without every
-- operation or column) fails at CREATE / ALTER PUBLICATION. maintain() runs the same check
-- before it creates partitions.
CREATE FUNCTION idempotency.publication_guard()
RETURNS event_trigger
AS 'MODULE_PATHNAME', 'idem_publication_guard' LANGUAGE C;

CREATE EVENT TRIGGER idempotency_publication_guard ON ddl_command_end
    WHEN TAG IN ('CREATE PUBLICATION', 'ALTER PUBLICATION')
    EXECUTE FUNCTION idempotency.publication_guard();

-- === operations: logical backups (ops) ===
-- pg_dump writes an extension's tables as CREATE EXTENSION only, and every partition of
-- idempotency.keys made later (by maintain() or pg_partman) as a table of its own: CREATE
-- TABLE, ATTACH PARTITION, then its primary key as ALTER TABLE ONLY ... ADD CONSTRAINT. With
-- a primary key on the parent, which CREATE EXTENSION re-creates before the partitions are
-- attached, the ATTACH already gives each partition a primary key and the dump's own fails
-- ("multiple primary keys"). So the parent has none from 0.2.0 on: each partition carries its
-- own primary key (key, scope, expires_at), which is what pg_dump writes and what reserve and
-- complete use. (scope, key) never was unique across partitions through the parent's key:
-- the advisory lock makes it so.
ALTER TABLE idempotency.keys DROP CONSTRAINT keys_pkey;
-- Without a primary key the parent would have no replica identity, and a publication through
-- the root (publish_via_partition_root, see "Logical replication" in README) would send no
-- key with updates and deletes. FULL on the parent: changes through it carry the key columns;
-- the partitions keep their primary keys as replica identity, so WAL volume is unchanged.
ALTER TABLE idempotency.keys REPLICA IDENTITY FULL;

DO $$
DECLARE
    part regclass;
    template text;
    partman_schema name;
BEGIN
    -- Dropping the parent's key dropped the partitions' keys attached to it: each gets its own.
    FOR part IN
        SELECT i.inhrelid::regclass FROM pg_catalog.pg_inherits i
        WHERE i.inhparent OPERATOR(pg_catalog.=) 'idempotency.keys'::regclass
          AND NOT EXISTS (SELECT FROM pg_catalog.pg_index x
                          WHERE x.indrelid OPERATOR(pg_catalog.=) i.inhrelid AND x.indisprimary)
    LOOP
        EXECUTE pg_catalog.format('ALTER TABLE ONLY %s ADD PRIMARY KEY (key, scope, expires_at)',
                                  part);
    END LOOP;

    -- pg_partman (after use_partman()) makes partitions from its template table: the primary
    -- key goes there now.
    SELECT n.nspname INTO partman_schema
    FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
    WHERE e.extname OPERATOR(pg_catalog.=) 'pg_partman';
    IF partman_schema IS NOT NULL THEN
        EXECUTE pg_catalog.format('SELECT template_table FROM %I.part_config '
                                  'WHERE parent_table OPERATOR(pg_catalog.=) $1', partman_schema)
            INTO template USING 'idempotency.keys';
        IF template IS NOT NULL AND pg_catalog.to_regclass(template) IS NOT NULL
           AND NOT EXISTS (SELECT FROM pg_catalog.pg_index x
                           WHERE x.indrelid OPERATOR(pg_catalog.=) pg_catalog.to_regclass(template)
                             AND x.indisprimary) THEN
            EXECUTE pg_catalog.format('ALTER TABLE %s ADD PRIMARY KEY (key, scope, expires_at)',
                                      pg_catalog.to_regclass(template));
        END IF;
    END IF;

    -- The default partition belongs to the extension (so CREATE EXTENSION re-creates it on
    -- restore) and its rows are dumped. 0.1.0's use_partman() replaced it with pg_partman's,
    -- which belonged to no extension (the dump's CREATE TABLE then failed: "already exists").
    part := (SELECT p.partdefid::regclass FROM pg_catalog.pg_partitioned_table p
             WHERE p.partrelid OPERATOR(pg_catalog.=) 'idempotency.keys'::regclass
               AND p.partdefid OPERATOR(pg_catalog.<>) 0);
    IF part IS NOT NULL THEN
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_depend d
                       WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::regclass
                         AND d.objid OPERATOR(pg_catalog.=) part
                         AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::regclass
                         AND d.deptype OPERATOR(pg_catalog.=) 'e') THEN
            EXECUTE pg_catalog.format('ALTER EXTENSION idempotency ADD TABLE %s', part);
            EXECUTE pg_catalog.format('REVOKE ALL ON %s FROM PUBLIC', part);
        END IF;
        PERFORM pg_catalog.pg_extension_config_dump(part, '');
    END IF;
END
$$;

-- === operations: clean uninstall (ops) ===
-- pg_partman keeps its configuration (part_config row, template table) by name, not by
-- dependency: DROP EXTENSION idempotency alone would leave them behind, and every
-- partman.run_maintenance() failing on the missing table. Run this first.
CREATE FUNCTION idempotency.stop_partman()
RETURNS boolean
AS 'MODULE_PATHNAME', 'idem_stop_partman' LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION idempotency.stop_partman() FROM PUBLIC;

-- === operator control of consumers ===
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

-- === maintenance runs ===
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

-- === metrics ===
-- One row per (name, labels): what an exporter scrapes. Names follow Prometheus' conventions
-- (a _total counter, _seconds and _bytes units); labels is a jsonb object (empty: {}). Values
-- are this database's; counters are those of idempotency.stats (they survive a clean restart,
-- see README). in_flight / abandoned read the key table (a scan of its live partitions).
CREATE VIEW idempotency.metrics AS
WITH s AS (SELECT * FROM idempotency.stats_counters()),
     claims AS (
        SELECT count(*) FILTER (WHERE locked_until OPERATOR(pg_catalog.>) now()) AS in_flight,
               count(*) FILTER (WHERE locked_until OPERATOR(pg_catalog.<=) now()) AS abandoned,
               min(locked_until) FILTER (WHERE locked_until OPERATOR(pg_catalog.<=) now())
                   AS oldest_lapse
        FROM idempotency.keys
        WHERE state OPERATOR(pg_catalog.=) 'processing' AND expires_at OPERATOR(pg_catalog.>) now()),
     last_run AS (
        SELECT result, caller, ended_at FROM idempotency.maintenance_log
        ORDER BY run DESC LIMIT 1)
SELECT m.name, m.labels, m.value FROM (
    SELECT 'idempotency_reserves_total' AS name, pg_catalog.jsonb_build_object('outcome', o.outcome) AS labels, o.value::float8 AS value, 1 AS ord, o.ord AS sub
    FROM s, LATERAL (VALUES ('new', s.reserves_new, 1), ('replay', s.reserves_replay, 2),
                            ('in_progress', s.reserves_in_progress, 3),
                            ('mismatch', s.reserves_mismatch, 4), ('too_old', s.reserves_too_old, 5))
        AS o(outcome, value, ord)
    UNION ALL SELECT 'idempotency_completes_total', '{}', s.completes, 2, 0 FROM s
    UNION ALL SELECT 'idempotency_fails_total', '{}', s.fails, 3, 0 FROM s
    UNION ALL SELECT 'idempotency_takeovers_total', '{}', s.takeovers, 4, 0 FROM s
    UNION ALL SELECT 'idempotency_counters_since_timestamp_seconds', '{}',
        extract(epoch FROM s.since)::float8, 5, 0 FROM s
    UNION ALL SELECT 'idempotency_in_flight', '{}', claims.in_flight, 6, 0 FROM claims
    UNION ALL SELECT 'idempotency_abandoned', '{}', claims.abandoned, 7, 0 FROM claims
    UNION ALL SELECT 'idempotency_abandoned_oldest_seconds', '{}',
        coalesce(extract(epoch FROM now() OPERATOR(pg_catalog.-) claims.oldest_lapse)::float8, 0), 8, 0
        FROM claims
    UNION ALL SELECT 'idempotency_keys_bytes', '{}',
        (SELECT coalesce(sum(pg_catalog.pg_total_relation_size(t.relid)), 0)
         FROM pg_catalog.pg_partition_tree('idempotency.keys'::pg_catalog.regclass) t)::float8, 9, 0
    UNION ALL SELECT 'idempotency_keys_rows_estimate', '{}',
        (SELECT coalesce(sum(GREATEST(c.reltuples, 0)), 0)
         FROM pg_catalog.pg_partition_tree('idempotency.keys'::pg_catalog.regclass) t
         JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) t.relid
         WHERE t.isleaf)::float8, 10, 0
    UNION ALL SELECT 'idempotency_partitions', '{}',
        (SELECT count(*) FROM pg_catalog.pg_inherits i
         WHERE i.inhparent OPERATOR(pg_catalog.=) 'idempotency.keys'::pg_catalog.regclass)::float8, 11, 0
    UNION ALL SELECT 'idempotency_maintenance_last_run_ok',
        pg_catalog.jsonb_build_object('result', last_run.result, 'caller', last_run.caller),
        (last_run.result OPERATOR(pg_catalog.=) 'ok')::integer::float8, 12, 0 FROM last_run
    UNION ALL SELECT 'idempotency_maintenance_last_run_age_seconds',
        pg_catalog.jsonb_build_object('result', last_run.result, 'caller', last_run.caller),
        extract(epoch FROM now() OPERATOR(pg_catalog.-) last_run.ended_at)::float8, 13, 0 FROM last_run
    UNION ALL SELECT 'idempotency_consumers', '{}',
        (SELECT count(DISTINCT consumer) FROM idempotency.consumer_positions)::float8, 14, 0
    UNION ALL SELECT 'idempotency_consumer_partitions', '{}',
        (SELECT count(*) FROM idempotency.consumer_positions)::float8, 15, 0
    UNION ALL SELECT 'idempotency_outbox_slot_lag_bytes',
        pg_catalog.jsonb_build_object('slot', r.slot_name::text, 'active', r.active),
        pg_catalog.pg_wal_lsn_diff(
            CASE WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_last_wal_replay_lsn()
                 ELSE pg_catalog.pg_current_wal_lsn() END,
            r.confirmed_flush_lsn)::float8, 16, 0
    FROM pg_catalog.pg_replication_slots r
    WHERE r.plugin OPERATOR(pg_catalog.=) 'idempotency'
      AND r.database OPERATOR(pg_catalog.=) pg_catalog.current_database()
) m
ORDER BY m.ord, m.sub, m.labels::text;

REVOKE ALL ON idempotency.metrics FROM PUBLIC;

-- === Citus scale-out ===
-- distribute(colocate_with) shards idempotency.keys by scope with Citus, co-located with a
-- table distributed by a text tenant column, and makes reserve, complete, fail, checkpoint,
-- lookup and forget distributed functions (distribution argument scope, force_delegation),
-- so each call runs on the worker that holds the scope's shard. streams and
-- consumer_positions stay local tables of each node (README, Scale-out).
CREATE FUNCTION idempotency.distribute(colocate_with regclass)
RETURNS void
AS 'MODULE_PATHNAME', 'idem_distribute' LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION idempotency.distribute(regclass) FROM PUBLIC;
