-- === storage, maintenance and operator views ===

CREATE FUNCTION idempotency.partition_bounds(part oid,
    OUT is_default boolean, OUT range_start timestamptz, OUT range_end timestamptz)
RETURNS record
LANGUAGE sql STABLE PARALLEL SAFE
SET TimeZone = 'UTC' SET DateStyle = 'ISO, YMD' SET search_path = pg_catalog, pg_temp
AS $$
    SELECT e.expr OPERATOR(pg_catalog.=) 'DEFAULT',
           pg_catalog.substring(e.expr, E'FROM \\(''([^'']*)''\\)')::pg_catalog.timestamptz,
           pg_catalog.substring(e.expr, E'TO \\(''([^'']*)''\\)')::pg_catalog.timestamptz
    FROM pg_catalog.pg_class c,
         LATERAL pg_catalog.pg_get_expr(c.relpartbound, c.oid) AS e(expr)
    WHERE c.oid OPERATOR(pg_catalog.=) part
$$;

CREATE FUNCTION idempotency.rows_estimate(rel regclass)
RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN c.reltuples OPERATOR(pg_catalog.>=) 0 THEN c.reltuples::pg_catalog.int8
                ELSE pg_catalog.pg_stat_get_live_tuples(c.oid) END
    FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) rel
$$;

CREATE VIEW idempotency.partitions AS
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

-- Key locks held now in this database. The managed edition takes them with
-- pg_advisory_xact_lock(key_lock_id(scope, key)), so pg_locks shows them with objsubid 1,
-- beside the application's own pg_advisory_lock(bigint) locks, which this view cannot tell
-- apart (the extension's have a lock class of their own).
CREATE VIEW idempotency.key_locks AS
    SELECT l.pid,
           (l.classid::pg_catalog.int8 OPERATOR(pg_catalog.<<) 32)
               OPERATOR(pg_catalog.|) l.objid::pg_catalog.int8 AS lock_id,
           a.xact_start AS transaction_started_at
    FROM pg_catalog.pg_locks l
    LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid OPERATOR(pg_catalog.=) l.pid
    WHERE l.locktype OPERATOR(pg_catalog.=) 'advisory'
      AND l.objsubid OPERATOR(pg_catalog.=) 1
      AND l.granted
      AND l.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d
                                             WHERE d.datname OPERATOR(pg_catalog.=)
                                                   pg_catalog.current_database());

CREATE VIEW idempotency.in_flight AS
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

CREATE VIEW idempotency.abandoned AS
    SELECT scope, key, attempt, locked_until, recovery_point, first_seen_at, expires_at
    FROM idempotency.keys
    WHERE state = 'processing' AND locked_until <= now() AND expires_at > now();

-- Keys whose last attempt failed and that have not expired; `dead` when the consumer helpers
-- stored the failure as final (a message that used up its attempts and was dead-lettered).
CREATE VIEW idempotency.failed_keys AS
    SELECT k.scope, k.key, k.attempt,
           COALESCE(k.last_error OPERATOR(pg_catalog.->) 'dead'::pg_catalog.text
                        OPERATOR(pg_catalog.=) 'true'::pg_catalog.jsonb, false) AS dead,
           k.last_error AS error, k.first_seen_at, k.expires_at
    FROM idempotency.keys k
    WHERE k.state OPERATOR(pg_catalog.=) 'failed'
      AND k.expires_at OPERATOR(pg_catalog.>) pg_catalog.now();

REVOKE ALL ON idempotency.partitions, idempotency.in_flight, idempotency.abandoned,
    idempotency.failed_keys, idempotency.key_locks FROM PUBLIC;
