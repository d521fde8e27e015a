-- One row per run of maintain(), the last 100 kept; each server's own (keep_local_rows).
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

-- Where session_replication_role = replica (logical replication's workers) another server's
-- rows are skipped: the history is each server's own.
CREATE FUNCTION idempotency.keep_local_rows()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF current_setting('idempotency.maintaining', true) = 'on' THEN
        RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER keep_local_rows BEFORE INSERT OR UPDATE OR DELETE ON idempotency.maintenance_log
    FOR EACH ROW EXECUTE FUNCTION idempotency.keep_local_rows();
ALTER TABLE idempotency.maintenance_log ENABLE REPLICA TRIGGER keep_local_rows;

CREATE VIEW idempotency.maintenance_runs AS
    SELECT run, started_at, ended_at, ended_at OPERATOR(pg_catalog.-) started_at AS duration,
           caller, role, result, steps, error
    FROM idempotency.maintenance_log
    ORDER BY run DESC;

REVOKE ALL ON idempotency.maintenance_runs FROM PUBLIC;

-- A partition's name: keys_p + the start of its range in pg_partman 4's format.
CREATE FUNCTION idempotency._partition_name(lo timestamptz, width_us bigint)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT 'keys_p' OPERATOR(pg_catalog.||) CASE
        WHEN width_us OPERATOR(pg_catalog.>=) 86400000000
             AND pg_catalog.date_trunc('day', lo AT TIME ZONE 'UTC') OPERATOR(pg_catalog.=) (lo AT TIME ZONE 'UTC')
            THEN pg_catalog.to_char(lo AT TIME ZONE 'UTC', 'YYYY_MM_DD')
        WHEN width_us OPERATOR(pg_catalog.>=) 60000000
             AND pg_catalog.date_trunc('minute', lo AT TIME ZONE 'UTC') OPERATOR(pg_catalog.=) (lo AT TIME ZONE 'UTC')
            THEN pg_catalog.to_char(lo AT TIME ZONE 'UTC', 'YYYY_MM_DD_HH24MI')
        WHEN pg_catalog.date_trunc('second', lo AT TIME ZONE 'UTC') OPERATOR(pg_catalog.=) (lo AT TIME ZONE 'UTC')
            THEN pg_catalog.to_char(lo AT TIME ZONE 'UTC', 'YYYY_MM_DD_HH24MISS')
        ELSE pg_catalog.to_char(lo AT TIME ZONE 'UTC', 'YYYY_MM_DD_HH24MISS_US') END
$$;

-- ACCESS EXCLUSIVE on idempotency.keys (the parent first: the order every reader locks them),
-- held to the end of the transaction. A lock request waiting in the table's queue makes every
-- key call that comes after it wait too, however short the DDL it is for: so the lock is taken
-- at once when it is free, else in attempts of at most 10 ms (lock_timeout), 10 ms apart, in
-- which the calls queued meanwhile go through, until timeout_ms has passed; then the last
-- attempt's lock_not_available (55P03) reaches the caller, which skips its step.
CREATE FUNCTION idempotency._lock_keys_exclusively(timeout_ms bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    deadline timestamptz;
    left_ms bigint;
    caller_lock_timeout text := current_setting('lock_timeout');
BEGIN
    LOOP
        BEGIN
            LOCK TABLE ONLY idempotency.keys IN ACCESS EXCLUSIVE MODE NOWAIT;
            RETURN;
        EXCEPTION WHEN lock_not_available THEN
            NULL;
        END;
        deadline := coalesce(deadline, clock_timestamp() + make_interval(secs => timeout_ms / 1000.0));
        left_ms := ceil(extract(epoch FROM deadline - clock_timestamp()) * 1000)::bigint;
        BEGIN
            PERFORM set_config('lock_timeout', greatest(1, least(10, left_ms))::text, true);
            LOCK TABLE ONLY idempotency.keys IN ACCESS EXCLUSIVE MODE;
            PERFORM set_config('lock_timeout', caller_lock_timeout, true);
            RETURN;
        EXCEPTION WHEN lock_not_available THEN
            IF clock_timestamp() >= deadline THEN
                RAISE;
            END IF;
        END;
        PERFORM pg_sleep(greatest(1, least(10, left_ms)) / 1000.0);
    END LOOP;
END
$$;

-- maintain(): purges expired rows from the default partition, creates the current and the
-- next idempotency.premake partitions of idempotency.partition_width (moving rows of their
-- range out of the default partition), and drops partitions whose upper bound has passed.
-- Each step takes its locks within idempotency.maintenance_lock_timeout (the exclusive lock of
-- idempotency.keys in short attempts: _lock_keys_exclusively) and is skipped (reported,
-- retried on the next run) when it cannot. Call it from pg_cron or the
-- application; it must run in a READ COMMITTED transaction.
CREATE FUNCTION idempotency.maintain()
RETURNS TABLE (
    action text,
    partition text,
    range_start timestamptz,
    range_end timestamptz,
    rows bigint,
    detail text)
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    started timestamptz := clock_timestamp();
    width_us bigint := idempotency._setting_usecs('idempotency.partition_width', '1d');
    premake integer := coalesce(nullif(current_setting('idempotency.premake', true), '')::integer, 3);
    lock_ms bigint := idempotency._setting_usecs('idempotency.maintenance_lock_timeout', '100ms') / 1000;
    width interval := make_interval(secs => width_us / 1000000.0);
    now timestamptz := clock_timestamp();
    steps jsonb := '[]';
    incomplete boolean := false;
    b timestamptz;
    lo timestamptz;
    hi timestamptz;
    cursor timestamptz;
    gaps_lo timestamptz[];
    gaps_hi timestamptz[];
    r record;
    p record;
    n bigint;
    name text;
    caller_lock_timeout text := current_setting('lock_timeout');
    skipped constant text := 'could not lock idempotency.keys within '
        'idempotency.maintenance_lock_timeout; retried on the next run';
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'idempotency.maintain() must run in a READ COMMITTED transaction'
            USING ERRCODE = '25001', HINT = 'Call it in a transaction of its own (autocommit).';
    END IF;
    IF width_us <= 0 OR premake < 0 THEN
        RAISE EXCEPTION 'idempotency.partition_width and idempotency.premake must be positive'
            USING ERRCODE = '22023';
    END IF;
    PERFORM set_config('lock_timeout', greatest(lock_ms, 1)::text, true);

    -- 1. Expired rows of the default partition.
    BEGIN
        DELETE FROM ONLY idempotency.keys_default d WHERE d.expires_at <= now;
        GET DIAGNOSTICS n = ROW_COUNT;
        IF n > 0 THEN
            action := 'purged'; partition := 'keys_default'; range_start := NULL;
            range_end := NULL; rows := n;
            detail := 'deleted expired rows from the default partition';
            RETURN NEXT;
            steps := steps || jsonb_build_object('action', action, 'partition', partition, 'rows', n);
        END IF;
    EXCEPTION WHEN lock_not_available THEN
        action := 'skipped'; partition := 'keys_default'; range_start := NULL; range_end := NULL;
        rows := NULL; detail := skipped; incomplete := true;
        RETURN NEXT;
        steps := steps || jsonb_build_object('action', action, 'partition', partition, 'detail', detail);
    END;

    -- 2. The current partition and the next premake ones, and those of live rows waiting in
    -- the default partition, where no partition covers them.
    FOR b IN
        SELECT x.b FROM (
            SELECT date_bin(width, now, '2000-01-01 00:00+00') + g * width AS b
            FROM generate_series(0, premake) AS g
            UNION
            SELECT date_bin(width, d.expires_at, '2000-01-01 00:00+00')
            FROM ONLY idempotency.keys_default d WHERE d.expires_at > now) x
        ORDER BY 1
    LOOP
      -- The parts of [b, b + width) no attached partition covers (a partition made by hand
      -- may cover some of it).
      gaps_lo := '{}'; gaps_hi := '{}'; cursor := b;
      FOR r IN SELECT x.range_start AS lo, x.range_end AS hi FROM idempotency.partitions x
               WHERE NOT x.is_default AND x.range_start < b + width AND x.range_end > b
               ORDER BY x.range_start
      LOOP
          IF r.lo > cursor THEN
              gaps_lo := gaps_lo || cursor; gaps_hi := gaps_hi || r.lo;
          END IF;
          cursor := greatest(cursor, r.hi);
      END LOOP;
      IF cursor < b + width THEN
          gaps_lo := gaps_lo || cursor; gaps_hi := gaps_hi || (b + width);
      END IF;
      FOR g IN 1 .. coalesce(cardinality(gaps_lo), 0) LOOP
        lo := gaps_lo[g]; hi := gaps_hi[g];
        name := idempotency._partition_name(lo, width_us);
        BEGIN
            PERFORM idempotency._lock_keys_exclusively(lock_ms);
            EXECUTE format('CREATE TABLE idempotency.%I (LIKE idempotency.keys INCLUDING DEFAULTS '
                           'INCLUDING CONSTRAINTS, PRIMARY KEY (key, scope, expires_at))', name);
            EXECUTE format('REVOKE ALL ON idempotency.%I FROM PUBLIC', name);
            -- The rows of its range move from the default partition into the new table before
            -- it is attached (no temporary table: one made while pg_tle creates the extension
            -- would become the extension's).
            EXECUTE format('WITH moved AS (DELETE FROM ONLY idempotency.keys_default d '
                           'WHERE d.expires_at >= $1 AND d.expires_at < $2 RETURNING d.*) '
                           'INSERT INTO idempotency.%I SELECT * FROM moved', name)
                USING lo, hi;
            GET DIAGNOSTICS n = ROW_COUNT;
            EXECUTE format('ALTER TABLE idempotency.keys ATTACH PARTITION idempotency.%I '
                           'FOR VALUES FROM (%L) TO (%L)', name, lo, hi);
            action := 'created'; partition := name; range_start := lo; range_end := hi;
            rows := n; detail := CASE WHEN n > 0 THEN format('moved %s rows from the default partition', n) END;
            RETURN NEXT;
            steps := steps || jsonb_build_object('action', action, 'partition', partition,
                                                 'range_start', lo, 'range_end', hi);
        EXCEPTION
            WHEN lock_not_available THEN
                action := 'skipped'; partition := name; range_start := lo; range_end := hi;
                rows := NULL; detail := skipped; incomplete := true;
                RETURN NEXT;
                steps := steps || jsonb_build_object('action', action, 'partition', partition, 'detail', detail);
            WHEN OTHERS THEN
                -- reported; the other steps still run
                action := 'failed'; partition := name; range_start := lo; range_end := hi;
                rows := NULL; detail := SQLERRM; incomplete := true;
                RETURN NEXT;
                steps := steps || jsonb_build_object('action', action, 'partition', partition, 'detail', detail);
        END;
      END LOOP;
    END LOOP;

    -- 3. Partitions whose upper bound has passed hold only expired rows: dropped whole.
    -- By OID: a partition may live in another schema.
    FOR p IN SELECT c.oid::regclass AS rel, c.relname::text AS partition, x.range_start,
                    x.range_end, idempotency.rows_estimate(c.oid) AS rows_estimate
             FROM pg_catalog.pg_inherits i
             JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) i.inhrelid
             CROSS JOIN LATERAL idempotency.partition_bounds(c.oid) x
             WHERE i.inhparent OPERATOR(pg_catalog.=) 'idempotency.keys'::regclass
               AND NOT x.is_default AND x.range_end <= now
             ORDER BY x.range_start
    LOOP
        BEGIN
            PERFORM idempotency._lock_keys_exclusively(lock_ms);
            EXECUTE format('DROP TABLE %s', p.rel);
            action := 'dropped'; partition := p.partition; range_start := p.range_start;
            range_end := p.range_end; rows := p.rows_estimate; detail := NULL;
            RETURN NEXT;
            steps := steps || jsonb_build_object('action', action, 'partition', partition);
        EXCEPTION
            WHEN lock_not_available THEN
                action := 'skipped'; partition := p.partition; range_start := p.range_start;
                range_end := p.range_end; rows := NULL; detail := skipped; incomplete := true;
                RETURN NEXT;
                steps := steps || jsonb_build_object('action', action, 'partition', partition, 'detail', detail);
            WHEN OTHERS THEN
                action := 'failed'; partition := p.partition; range_start := p.range_start;
                range_end := p.range_end; rows := NULL; detail := SQLERRM; incomplete := true;
                RETURN NEXT;
                steps := steps || jsonb_build_object('action', action, 'partition', partition, 'detail', detail);
        END;
    END LOOP;
    PERFORM set_config('lock_timeout', caller_lock_timeout, true);

    PERFORM set_config('idempotency.maintaining', 'on', true);
    INSERT INTO idempotency.maintenance_log (started_at, ended_at, caller, role, result, steps)
    VALUES (started, clock_timestamp(),
            CASE WHEN current_setting('application_name') = 'pg_cron' THEN 'pg_cron' ELSE 'sql' END,
            session_user, CASE WHEN incomplete THEN 'incomplete' ELSE 'ok' END, steps);
    DELETE FROM idempotency.maintenance_log l
     WHERE l.run <= (SELECT max(x.run) - 100 FROM idempotency.maintenance_log x);
    PERFORM set_config('idempotency.maintaining', 'off', true);
END
$$;

REVOKE ALL ON FUNCTION
    idempotency.maintain(),
    idempotency._lock_keys_exclusively(bigint),
    idempotency._partition_name(timestamptz, bigint)
FROM PUBLIC;

-- The partitions maintain() makes (the current one and the next idempotency.premake ones),
-- from the install on: the first keys land in a dated partition, not in keys_default. Where
-- pg_tle creates (or updates) the extension they are not made its members, as maintain()'s
-- later ones are not: maintain() drops each when it expires. Outside READ COMMITTED (which
-- maintain() needs) the install leaves them to the first maintain().
DO $$
DECLARE
    part regclass;
BEGIN
    IF pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed' THEN
        RAISE NOTICE 'idempotency: no partition made at the install (not READ COMMITTED); run SELECT idempotency.maintain()';
        RETURN;
    END IF;
    PERFORM FROM idempotency.maintain();
    FOR part IN
        SELECT d.objid::regclass FROM pg_catalog.pg_depend d
          JOIN pg_catalog.pg_inherits i ON i.inhrelid OPERATOR(pg_catalog.=) d.objid
          JOIN pg_catalog.pg_extension e ON e.oid OPERATOR(pg_catalog.=) d.refobjid
         WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::regclass
           AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::regclass
           AND d.deptype OPERATOR(pg_catalog.=) 'e'
           AND e.extname OPERATOR(pg_catalog.=) 'idempotency'
           AND i.inhparent OPERATOR(pg_catalog.=) 'idempotency.keys'::regclass
           AND d.objid OPERATOR(pg_catalog.<>) 'idempotency.keys_default'::regclass
    LOOP
        EXECUTE pg_catalog.format('ALTER EXTENSION idempotency DROP TABLE %s', part);
    END LOOP;
END
$$;
