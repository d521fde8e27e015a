-- idempotency @VERSION@, managed edition: the key API of the extension in SQL and PL/pgSQL only,
-- for a managed PostgreSQL that loads no custom library. Installed either by pg_tle
-- (pgtle.install_extension, then CREATE EXTENSION idempotency) or as a plain script
-- (psql -1 -f), both by a role that is not a superuser. Same schema, names, arguments,
-- outcomes and SQLSTATEs as the extension for everything it offers; what it cannot offer is
-- listed in docs/managed.md.
--
-- Every function that touches a table is SECURITY DEFINER (it runs as the role that
-- installed the edition, which owns the tables) with search_path pinned to pg_catalog,
-- pg_temp, and names every object of the edition with its schema: callers need EXECUTE only,
-- and a look-alike planted in their search_path changes nothing.

CREATE SCHEMA idempotency;
-- The edition and its version, which the clients' one detection statement reads (the
-- "edition" statement of test/vectors/statements.json): a database where this script was run
-- with psql -f has no pg_extension row to tell it. Each later version's script sets its own.
COMMENT ON SCHEMA idempotency IS 'idempotency managed edition @VERSION@';

CREATE TYPE idempotency.outcome AS ENUM ('new', 'replay', 'in_progress', 'mismatch', 'too_old');

CREATE TYPE idempotency.reservation AS (
    outcome idempotency.outcome,
    status_code integer,
    response jsonb,
    attempt integer,
    recovery_point text,
    first_seen_at timestamptz,
    locked_until timestamptz,
    expires_at timestamptz
);

-- === internal helpers (argument checks shared by the calls) ===
-- The checks are SQL functions of one expression, which the planner inlines into the calling
-- statement: a check that passes costs no function call (a PL/pgSQL call costs tens of
-- microseconds the first time in each transaction). They raise through _raise. They run
-- inside the edition's functions, whose search_path is pinned, and pin none of their own (a
-- SET clause would keep them from being inlined).

-- The one place the checks raise from: never returns.
CREATE FUNCTION idempotency._raise(sqlstate text, message text, detail text DEFAULT NULL,
                                   hint text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF detail IS NULL AND hint IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = sqlstate, MESSAGE = message;
    ELSIF hint IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = sqlstate, MESSAGE = message, DETAIL = detail;
    ELSIF detail IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = sqlstate, MESSAGE = message, HINT = hint;
    END IF;
    RAISE EXCEPTION USING ERRCODE = sqlstate, MESSAGE = message, DETAIL = detail, HINT = hint;
END
$$;

-- A scope, key, stream, consumer or partition: not NULL, 1 to 255 bytes.
CREATE FUNCTION idempotency._check_name(what text, value text)
RETURNS boolean
LANGUAGE sql VOLATILE
AS $$
    SELECT CASE
        WHEN value IS NULL
            THEN idempotency._raise('22004', what OPERATOR(pg_catalog.||) ' must not be null')::boolean
        WHEN pg_catalog.octet_length(value) OPERATOR(pg_catalog.=) 0
            THEN idempotency._raise('22023', what OPERATOR(pg_catalog.||) ' must not be empty')::boolean
        WHEN pg_catalog.octet_length(value) OPERATOR(pg_catalog.>) 255
            THEN idempotency._raise('54000', what OPERATOR(pg_catalog.||)
                                    ' is too long (at most 255 bytes)')::boolean
        ELSE true END
$$;

-- An interval argument in microseconds, a month counting 30 days (as the extension does):
-- the epoch counts a year as 365.25 days, 5.25 days more than twelve 30-day months.
CREATE FUNCTION idempotency._interval_usecs(what text, value interval, zero_allowed boolean)
RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
    SELECT CASE
        WHEN value IS NULL THEN idempotency._raise('22004', what || ' must not be null')::bigint
        WHEN extract(epoch FROM value) * 1000000 - extract(year FROM value) * 453600000000
                 NOT BETWEEN -9223372036854775808 AND 9223372036854775807
            THEN idempotency._raise('22023', what || ' is out of range')::bigint
        WHEN extract(epoch FROM value) * 1000000 - extract(year FROM value) * 453600000000 < 0
             OR (extract(epoch FROM value) * 1000000 - extract(year FROM value) * 453600000000 = 0
                 AND NOT zero_allowed)
            THEN idempotency._raise('22023', what || ' must be '
                || CASE WHEN zero_allowed THEN 'zero or positive' ELSE 'positive' END)::bigint
        ELSE (extract(epoch FROM value) * 1000000
              - extract(year FROM value) * 453600000000)::bigint END
$$;

-- An interval in microseconds as _interval_usecs counts it (a month of 30 days), unchecked:
-- for a value known to be in range (reserve's usual call).
CREATE FUNCTION idempotency._usecs(value interval)
RETURNS bigint
LANGUAGE sql IMMUTABLE
AS $$
    SELECT (extract(epoch FROM value) * 1000000 - extract(year FROM value) * 453600000000)::bigint
$$;

CREATE FUNCTION idempotency._setting_parse(name text, raw text)
RETURNS bigint
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
DECLARE
    -- E'' strings wherever a backslash is meant: a function body is parsed under the caller's
    -- standard_conforming_strings, and an E'' string means the same under both settings.
    m text[] := regexp_match(raw, E'^\\s*([0-9]+)\\s*(us|ms|s|min|h|d)?\\s*$');
BEGIN
    IF m IS NULL THEN
        RAISE EXCEPTION 'invalid value for parameter "%": "%"', name, raw USING ERRCODE = '22023';
    END IF;
    RETURN m[1]::bigint * CASE coalesce(m[2], 's')
        WHEN 'us' THEN 1 WHEN 'ms' THEN 1000 WHEN 's' THEN 1000000 WHEN 'min' THEN 60000000
        WHEN 'h' THEN 3600000000 ELSE 86400000000 END;
END
$$;

-- A duration written as PostgreSQL shows a setting's value: digits and a unit ('30d',
-- '100ms', '5min'; none: seconds), in microseconds; NULL for any other text (which
-- _setting_parse reads, or refuses).
CREATE FUNCTION idempotency._duration_usecs(value text)
RETURNS bigint
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE
        WHEN value LIKE '%min' AND left(value, -3) <> ''
             AND translate(left(value, -3), '0123456789', '') = '' AND length(value) <= 21
            THEN left(value, -3)::bigint * 60000000
        WHEN value LIKE '%us' AND left(value, -2) <> ''
             AND translate(left(value, -2), '0123456789', '') = '' AND length(value) <= 20
            THEN left(value, -2)::bigint
        WHEN value LIKE '%ms' AND left(value, -2) <> ''
             AND translate(left(value, -2), '0123456789', '') = '' AND length(value) <= 20
            THEN left(value, -2)::bigint * 1000
        WHEN right(value, 1) IN ('s', 'h', 'd') AND left(value, -1) <> ''
             AND translate(left(value, -1), '0123456789', '') = '' AND length(value) <= 19
            THEN left(value, -1)::bigint * CASE right(value, 1)
                WHEN 's' THEN 1000000 WHEN 'h' THEN 3600000000 ELSE 86400000000 END
        WHEN value <> '' AND translate(value, '0123456789', '') = '' AND length(value) <= 18
            THEN value::bigint * 1000000
    END
$$;

-- A setting of the extension's (idempotency.max_retention, partition_width, ...) read as
-- seconds: the managed edition registers no setting, so these are placeholders set with SET,
-- ALTER DATABASE or ALTER ROLE; the value takes the units the extension's settings take.
-- Unset, the fallback (one of the edition's own values, such as '30d', which the planner
-- reads once). Set, as _duration_usecs reads it, or else as _setting_parse does.
CREATE FUNCTION idempotency._setting_usecs(name text, fallback text)
RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
    SELECT CASE
        WHEN nullif(current_setting(name, true), '') IS NULL
            THEN idempotency._duration_usecs(fallback)
        ELSE coalesce(idempotency._duration_usecs(current_setting(name, true)),
                      idempotency._setting_parse(name, current_setting(name, true))) END
$$;

-- The time arguments of reserve and claim_once: the retention within max_retention, leases
-- and expiry times (the retention counts from the lease's end) valid timestamps, compared in
-- microseconds (no subtransaction to catch an overflow in): the last valid timestamp is
-- 294276-12-31 23:59:59.999999 UTC.
CREATE FUNCTION idempotency._check_times(lock_ttl_us bigint, retention_us bigint)
RETURNS boolean
LANGUAGE sql VOLATILE
AS $$
    SELECT CASE
        WHEN retention_us > idempotency._setting_usecs('idempotency.max_retention', '30d')
            THEN idempotency._raise('22023', 'retention exceeds idempotency.max_retention',
                format('The reserve asked for %s seconds; the longest allowed is %s seconds.',
                       (retention_us + 999999) / 1000000,
                       idempotency._setting_usecs('idempotency.max_retention', '30d') / 1000000),
                'Ask for a shorter retention, or have a superuser raise idempotency.max_retention.'
            )::boolean
        WHEN lock_ttl_us > (extract(epoch FROM '294276-12-31 23:59:59.999999+00'::timestamptz)
                            - extract(epoch FROM clock_timestamp())) * 1000000
            THEN idempotency._raise('22023', 'lock_ttl is out of range')::boolean
        WHEN retention_us > (extract(epoch FROM '294276-12-31 23:59:59.999999+00'::timestamptz)
                             - extract(epoch FROM clock_timestamp())) * 1000000
            THEN idempotency._raise('22023', 'retention is out of range')::boolean
        WHEN lock_ttl_us::numeric + retention_us
                 > (extract(epoch FROM '294276-12-31 23:59:59.999999+00'::timestamptz)
                    - extract(epoch FROM clock_timestamp())) * 1000000
            THEN idempotency._raise('22023', 'expiry is out of range')::boolean
        ELSE true END
$$;

-- The managed edition cannot see past a REPEATABLE READ snapshot (the extension reads the key
-- with the latest snapshot and answers 40001): a key claimed and committed by another
-- transaction after this one's snapshot would look absent and be claimed twice. So the calls
-- that write keys refuse those isolation levels.
CREATE FUNCTION idempotency._check_writable(call text)
RETURNS boolean
LANGUAGE sql VOLATILE
AS $$
    SELECT CASE
        WHEN current_setting('transaction_read_only')::boolean
            THEN idempotency._raise('25006',
                'cannot execute ' || call || ' in a read-only transaction')::boolean
        WHEN current_setting('transaction_isolation') <> 'read committed'
            THEN idempotency._raise('0A000',
                call || ' of the managed edition needs a READ COMMITTED transaction',
                'It cannot read the key past this transaction''s snapshot.',
                'Call it in a READ COMMITTED transaction (the default), or use the extension.'
            )::boolean
        ELSE true END
$$;
