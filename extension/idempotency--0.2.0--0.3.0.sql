-- idempotency 0.2.0 -> 0.3.0. A new install runs 0.1.0's script and every upgrade after it,
-- so a new database and an updated one end with the same objects
-- (test/scripted/upgrade_chain.sh compares them).
\echo Use "ALTER EXTENSION idempotency UPDATE TO '0.3.0'" to load this file. \quit

-- === logical replication: each server's own maintenance history ===
-- A publication FOR ALL TABLES (or FOR TABLES IN SCHEMA idempotency) carries
-- idempotency.maintenance_log too, and both servers number their runs from 1: the publisher's
-- runs collided with the subscriber's own and stopped the whole subscription. The history is
-- each server's own (docs/replication.md): this row trigger fires only where
-- session_replication_role = replica (the apply and table-sync workers) and there skips every
-- row but those the server's own maintain() writes.
CREATE FUNCTION idempotency.keep_local_rows()
RETURNS trigger
AS 'MODULE_PATHNAME', 'idem_keep_local_rows' LANGUAGE C;

CREATE TRIGGER keep_local_rows BEFORE INSERT OR UPDATE OR DELETE ON idempotency.maintenance_log
    FOR EACH ROW EXECUTE FUNCTION idempotency.keep_local_rows();
ALTER TABLE idempotency.maintenance_log ENABLE REPLICA TRIGGER keep_local_rows;

-- === in-flight claims inside open transactions, counters per hour and day, row estimates
-- before ANALYZE ===

-- The 64-bit hash (scope, key)'s advisory lock is taken on, as pg_locks shows it: classid is
-- its high 32 bits, objid its low 32 bits, objsubid 478 (0x1DE, the extension's lock class).
CREATE FUNCTION idempotency.key_lock_id(scope text, key text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'idem_key_lock_id' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- Key locks held now in this database: one per transaction working on a key (a claim not yet
-- committed, a complete or fail in progress, a reserve answered inside a transaction still
-- open). pid is NULL for a prepared transaction.
CREATE VIEW idempotency.key_locks AS
    SELECT l.pid,
           (l.classid::pg_catalog.int8 OPERATOR(pg_catalog.<<) 32)
               OPERATOR(pg_catalog.|) l.objid::pg_catalog.int8 AS lock_id,
           a.xact_start AS transaction_started_at
    FROM pg_catalog.pg_locks l
    LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid OPERATOR(pg_catalog.=) l.pid
    WHERE l.locktype OPERATOR(pg_catalog.=) 'advisory'
      AND l.objsubid OPERATOR(pg_catalog.=) 478
      AND l.granted
      AND l.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d
                                             WHERE d.datname OPERATOR(pg_catalog.=)
                                                   pg_catalog.current_database());

-- Live claims: committed ones (a lease not lapsed), and claims held inside a transaction that
-- has not committed yet (the common path: reserve, work, complete, COMMIT), seen through the
-- key's lock; their scope and key are not visible outside that transaction (NULL here).
-- pid: the backend whose open transaction holds the key's lock, NULL if none.
CREATE OR REPLACE VIEW idempotency.in_flight AS
    WITH locks AS MATERIALIZED (SELECT * FROM idempotency.key_locks),
    committed AS (
        SELECT k.scope, k.key, k.attempt, k.locked_until, k.recovery_point, k.first_seen_at,
               k.expires_at, idempotency.key_lock_id(k.scope, k.key) AS lock_id
        FROM idempotency.keys k
        WHERE k.state OPERATOR(pg_catalog.=) 'processing'
          AND k.locked_until OPERATOR(pg_catalog.>) pg_catalog.now()
          AND k.expires_at OPERATOR(pg_catalog.>) pg_catalog.now())
    SELECT c.scope, c.key, c.attempt, c.locked_until, c.recovery_point, c.first_seen_at,
           c.expires_at, l.pid, false AS uncommitted, l.transaction_started_at
    FROM committed c LEFT JOIN locks l ON l.lock_id OPERATOR(pg_catalog.=) c.lock_id
    UNION ALL
    SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, l.pid, true, l.transaction_started_at
    FROM locks l
    WHERE NOT EXISTS (SELECT FROM committed c WHERE c.lock_id OPERATOR(pg_catalog.=) l.lock_id);

REVOKE ALL ON idempotency.key_locks FROM PUBLIC;

-- Row estimates: reltuples is -1 until the first VACUUM or ANALYZE of a partition; the
-- statistics collector's live-row count stands in for it until then.
CREATE FUNCTION idempotency.rows_estimate(rel regclass)
RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN c.reltuples OPERATOR(pg_catalog.>=) 0 THEN c.reltuples::pg_catalog.int8
                ELSE pg_catalog.pg_stat_get_live_tuples(c.oid) END
    FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) rel
$$;

CREATE OR REPLACE VIEW idempotency.partitions AS
    SELECT c.relname::text AS partition,
           b.range_start,
           b.range_end,
           idempotency.rows_estimate(c.oid) AS rows_estimate,
           b.is_default,
           coalesce(NOT b.is_default AND b.range_end <= now(), false) AS due_to_drop
    FROM pg_catalog.pg_inherits i
    JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
    CROSS JOIN LATERAL idempotency.partition_bounds(c.oid) b
    WHERE i.inhparent = 'idempotency.keys'::regclass
    ORDER BY b.is_default, b.range_start NULLS FIRST;

-- The counters per hour: maintain() (the background worker's runs included) snapshots
-- idempotency.stats into the row of the current hour (UTC), and drops rows older than 35
-- days. A snapshot of a counter that restarted (stats_reset, or lost with a crash) is told
-- by its `since`.
CREATE TABLE idempotency.stats_snapshots (
    hour timestamptz PRIMARY KEY,
    taken_at timestamptz NOT NULL,
    since timestamptz NOT NULL,
    reserves_new bigint NOT NULL,
    reserves_replay bigint NOT NULL,
    reserves_in_progress bigint NOT NULL,
    reserves_mismatch bigint NOT NULL,
    reserves_too_old bigint NOT NULL,
    completes bigint NOT NULL,
    fails bigint NOT NULL,
    takeovers bigint NOT NULL
);

REVOKE ALL ON idempotency.stats_snapshots FROM PUBLIC;
-- Each server's own counters (as maintenance_log): logical replication never applies another
-- server's hours, which would collide with the subscriber's own rows and stop the subscription.
CREATE TRIGGER keep_local_rows BEFORE INSERT OR UPDATE OR DELETE ON idempotency.stats_snapshots
    FOR EACH ROW EXECUTE FUNCTION idempotency.keep_local_rows();
ALTER TABLE idempotency.stats_snapshots ENABLE REPLICA TRIGGER keep_local_rows;

CREATE FUNCTION idempotency.stats_snapshot(keep interval DEFAULT '35 days')
RETURNS void
LANGUAGE sql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
    INSERT INTO idempotency.stats_snapshots
    SELECT date_trunc('hour', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', now(), s.since,
           s.reserves_new, s.reserves_replay, s.reserves_in_progress, s.reserves_mismatch,
           s.reserves_too_old, s.completes, s.fails, s.takeovers
    FROM idempotency.stats_counters() s
    ON CONFLICT (hour) DO UPDATE SET
        taken_at = excluded.taken_at, since = excluded.since,
        reserves_new = excluded.reserves_new, reserves_replay = excluded.reserves_replay,
        reserves_in_progress = excluded.reserves_in_progress,
        reserves_mismatch = excluded.reserves_mismatch,
        reserves_too_old = excluded.reserves_too_old, completes = excluded.completes,
        fails = excluded.fails, takeovers = excluded.takeovers;
    DELETE FROM idempotency.stats_snapshots
    WHERE hour OPERATOR(pg_catalog.<) (now() OPERATOR(pg_catalog.-) keep);
$$;

REVOKE ALL ON FUNCTION idempotency.stats_snapshot(interval) FROM PUBLIC;

-- What each hour counted: the stored snapshots and, for the current hour, the live counters.
-- An hour's count is its last snapshot minus the one before (the whole value when the counters
-- restarted in between); the first hour ever snapshotted counts only when its counters began
-- in it (NULL otherwise: what came before is not known).
CREATE VIEW idempotency.stats_hourly AS
WITH points AS (
    SELECT hour, since, reserves_new, reserves_replay, reserves_in_progress, reserves_mismatch,
           reserves_too_old, completes, fails, takeovers
    FROM idempotency.stats_snapshots
    WHERE hour OPERATOR(pg_catalog.<)
          pg_catalog.date_trunc('hour', pg_catalog.now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
    UNION ALL
    SELECT pg_catalog.date_trunc('hour', pg_catalog.now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC',
           s.since, s.reserves_new, s.reserves_replay, s.reserves_in_progress,
           s.reserves_mismatch, s.reserves_too_old, s.completes, s.fails, s.takeovers
    FROM idempotency.stats_counters() s),
steps AS (
    SELECT p.*,
           pg_catalog.lag(p.hour) OVER w IS NULL AS first,
           pg_catalog.lag(p.since) OVER w IS DISTINCT FROM p.since AS restarted,
           pg_catalog.lag(ARRAY[p.reserves_new, p.reserves_replay, p.reserves_in_progress,
                                p.reserves_mismatch, p.reserves_too_old, p.completes, p.fails,
                                p.takeovers]) OVER w AS before
    FROM points p
    WINDOW w AS (ORDER BY p.hour)),
deltas AS (
    SELECT s.hour, ARRAY(
        SELECT CASE WHEN s.first AND s.since OPERATOR(pg_catalog.<) s.hour THEN NULL
                    WHEN s.first OR s.restarted OR v.cur OPERATOR(pg_catalog.<) v.before
                        THEN v.cur
                    ELSE v.cur OPERATOR(pg_catalog.-) v.before END
        FROM ROWS FROM (pg_catalog.unnest(ARRAY[s.reserves_new, s.reserves_replay,
                                                s.reserves_in_progress, s.reserves_mismatch,
                                                s.reserves_too_old, s.completes, s.fails,
                                                s.takeovers]),
                        pg_catalog.unnest(s.before)) WITH ORDINALITY AS v(cur, before, n)
        ORDER BY v.n) AS d
    FROM steps s)
SELECT hour, d[1] AS reserves_new, d[2] AS reserves_replay, d[3] AS reserves_in_progress,
       d[4] AS reserves_mismatch, d[5] AS reserves_too_old, d[6] AS completes, d[7] AS fails,
       d[8] AS takeovers
FROM deltas
ORDER BY hour;

-- Per day (of the session's TimeZone, by the hour's start): "how many duplicates did we
-- answer today" is SELECT reserves_replay FROM idempotency.stats_daily WHERE day =
-- current_date. hours: how many hours of the day have counts.
CREATE VIEW idempotency.stats_daily AS
    SELECT (h.hour)::date AS day,
           sum(h.reserves_new)::bigint AS reserves_new,
           sum(h.reserves_replay)::bigint AS reserves_replay,
           sum(h.reserves_in_progress)::bigint AS reserves_in_progress,
           sum(h.reserves_mismatch)::bigint AS reserves_mismatch,
           sum(h.reserves_too_old)::bigint AS reserves_too_old,
           sum(h.completes)::bigint AS completes,
           sum(h.fails)::bigint AS fails,
           sum(h.takeovers)::bigint AS takeovers,
           count(h.reserves_new) AS hours
    FROM idempotency.stats_hourly h
    GROUP BY 1
    ORDER BY 1;

REVOKE ALL ON idempotency.stats_hourly, idempotency.stats_daily FROM PUBLIC;

-- idempotency_in_flight counts the claims of idempotency.in_flight (open transactions too);
-- idempotency_keys_rows_estimate reads idempotency.rows_estimate.
CREATE OR REPLACE VIEW idempotency.metrics AS
WITH s AS (SELECT * FROM idempotency.stats_counters()),
     claims AS (
        SELECT count(*) FILTER (WHERE locked_until OPERATOR(pg_catalog.<=) now()) AS abandoned,
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
    UNION ALL SELECT 'idempotency_in_flight', '{}',
        (SELECT count(*) FROM idempotency.in_flight)::float8, 6, 0
    UNION ALL SELECT 'idempotency_abandoned', '{}', claims.abandoned, 7, 0 FROM claims
    UNION ALL SELECT 'idempotency_abandoned_oldest_seconds', '{}',
        coalesce(extract(epoch FROM now() OPERATOR(pg_catalog.-) claims.oldest_lapse)::float8, 0), 8, 0
        FROM claims
    UNION ALL SELECT 'idempotency_keys_bytes', '{}',
        (SELECT coalesce(sum(pg_catalog.pg_total_relation_size(t.relid)), 0)
         FROM pg_catalog.pg_partition_tree('idempotency.keys'::pg_catalog.regclass) t)::float8, 9, 0
    UNION ALL SELECT 'idempotency_keys_rows_estimate', '{}',
        (SELECT coalesce(sum(idempotency.rows_estimate(t.relid)), 0)
         FROM pg_catalog.pg_partition_tree('idempotency.keys'::pg_catalog.regclass) t
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


-- === claim_once: a key per message for queue consumers in one statement ===
-- claim_once is reserve and complete in one call, inside the caller's transaction: true the
-- first time (apply the message's effect in this transaction; a rollback frees the key again),
-- false once the key is completed (a redelivery: acknowledge it). A key another holder has
-- (an open transaction past `wait`, or a lease not lapsed) raises IK003, a UUIDv7 / ULID key
-- older than the retention IK004 (reserve's outcomes in_progress and too_old).
CREATE FUNCTION idempotency.claim_once(
    scope text,
    key text,
    retention interval DEFAULT '24 hours',
    wait interval DEFAULT '0')
RETURNS boolean
AS 'MODULE_PATHNAME', 'idem_claim_once' LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Like reserve: only roles granted EXECUTE (docs/operations.md, "Roles and privileges").
REVOKE ALL ON FUNCTION idempotency.claim_once(text, text, interval, interval) FROM PUBLIC;

-- Not distributed here for a database whose keys distribute() gave to Citus before 0.3.0
-- (Citus functions are not made distributed inside ALTER EXTENSION): docs/citus.md says the
-- one call to run after the update; until then claim_once through the coordinator is refused
-- (the scope's shard is not local), never run on the wrong node.


-- === reserve_begin: a replay in one round trip ===
-- reserve_begin is reserve that, outside a transaction block, opens one when the key is new
-- (as BEGIN would), so the work and complete + COMMIT follow in it; any other outcome leaves
-- no transaction open, so a replay needs no ROLLBACK. Inside a transaction block it is
-- reserve. Outside one it must be a SELECT of its own (not called from a procedure or a DO
-- block: 25000).
CREATE FUNCTION idempotency.reserve_begin(
    scope text,
    key text,
    request_hash bytea DEFAULT NULL,
    lock_ttl interval DEFAULT '5 minutes',
    retention interval DEFAULT '24 hours',
    wait interval DEFAULT '0')
RETURNS idempotency.reservation
AS 'MODULE_PATHNAME', 'idem_reserve_begin' LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Like reserve: only roles granted EXECUTE (docs/operations.md, "Roles and privileges").
REVOKE ALL ON FUNCTION
    idempotency.reserve_begin(text, text, bytea, interval, interval, interval)
FROM PUBLIC;


-- === failed keys: poison messages ===
-- Keys whose last attempt failed (fail() released the claim) and that nobody has taken over
-- since, not expired: a retry still to come, or a message a consumer gave up on. `dead` is
-- true when the stored error says so ({"dead": true, ...}, as the clients' consumer helpers
-- write it once a message has used up its attempts and is dead-lettered); `error` is what
-- fail() stored, `attempt` the attempt that failed.
CREATE VIEW idempotency.failed_keys AS
    SELECT k.scope, k.key, k.attempt,
           COALESCE(k.last_error OPERATOR(pg_catalog.->) 'dead'::pg_catalog.text
                        OPERATOR(pg_catalog.=) 'true'::pg_catalog.jsonb, false) AS dead,
           k.last_error AS error, k.first_seen_at, k.expires_at
    FROM idempotency.keys k
    WHERE k.state OPERATOR(pg_catalog.=) 'failed'
      AND k.expires_at OPERATOR(pg_catalog.>) pg_catalog.now();

-- Like in_flight and abandoned: for operators, by grant (docs/operations.md).
REVOKE ALL ON idempotency.failed_keys FROM PUBLIC;


-- === the work inside the claim: one statement ===
-- execute_once claims the key; on the outcome 'new' it runs `statement` (one SELECT, INSERT,
-- UPDATE, DELETE or MERGE) with `params` bound to $1, $2, ... (each text converted by the
-- input function of the type the statement gives its parameter; a NULL element is NULL), in
-- the caller's transaction, as the caller, with the caller's search_path, then completes the
-- key with `status_code` and the statement's result as the response: no row (or no RETURNING)
-- NULL, one row of one json / jsonb column that value, one row otherwise the row as a JSON
-- object; more than one row is an error (21000). It returns reserve's reservation, with
-- status_code and response for 'new' too. Any other outcome runs nothing (replay,
-- in_progress, mismatch, too_old as reserve). Not SECURITY DEFINER: the statement runs with
-- the caller's privileges.
CREATE FUNCTION idempotency.execute_once(
    scope text,
    key text,
    request_hash bytea,
    statement text,
    params text[] DEFAULT '{}',
    status_code integer DEFAULT 201,
    lock_ttl interval DEFAULT '5 minutes',
    retention interval DEFAULT '24 hours',
    wait interval DEFAULT '0')
RETURNS idempotency.reservation
AS 'MODULE_PATHNAME', 'idem_execute_once' LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Like reserve: only roles granted EXECUTE (docs/operations.md, "Roles and privileges").
REVOKE ALL ON FUNCTION
    idempotency.execute_once(text, text, bytea, text, text[], integer, interval, interval,
                             interval)
FROM PUBLIC;
