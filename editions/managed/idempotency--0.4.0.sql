-- Assembled by editions/managed/build.sh from editions/managed/src/*.sql: edit those.
-- ---- src/base.sql
-- idempotency 0.4.0, managed edition: the key API of the extension in SQL and PL/pgSQL only,
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
COMMENT ON SCHEMA idempotency IS 'idempotency managed edition 0.4.0';

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

-- ---- src/fingerprint.sql
-- === fingerprints and keys ===

-- The 64-bit hash (scope, key)'s advisory lock is taken on: FNV-1a 64 over the scope's
-- bytes, a 0 byte and the key's bytes, the extension's hash. Computed in 32-bit halves (no
-- unsigned arithmetic in SQL): h * prime = h * 0x1b3 + (h << 40), modulo 2^64.
CREATE FUNCTION idempotency.key_lock_id(scope text, key text)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    -- E'': the same byte under either standard_conforming_strings (see _setting_parse).
    bytes bytea := convert_to(scope, getdatabaseencoding()) || E'\\x00'::bytea
                   || convert_to(key, getdatabaseencoding());
    hi bigint := 3421674724;  -- 0xcbf29ce4
    lo bigint := 2216829733;  -- 0x84222325
    t bigint;
BEGIN
    FOR i IN 0 .. length(bytes) - 1 LOOP
        lo := lo # get_byte(bytes, i);
        t := lo * 435;
        hi := (hi * 435 + (t >> 32) + ((lo & 16777215) << 8)) & 4294967295;
        lo := t & 4294967295;
    END LOOP;
    RETURN (hi << 32) | lo;
END
$$;

-- A UUIDv7's or ULID's creation time; NULL for any other key.
CREATE FUNCTION idempotency.key_time(key text)
RETURNS timestamptz
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    ms bigint := 0;
    hex text;
BEGIN
    IF octet_length(key) = 26 THEN
        IF key !~* '^[0-7][0-9a-hjkmnp-tv-z]{25}$' THEN
            RETURN NULL;
        END IF;
        FOR i IN 1 .. 10 LOOP
            ms := ms * 32 + strpos('0123456789ABCDEFGHJKMNPQRSTVWXYZ', upper(substr(key, i, 1))) - 1;
        END LOOP;
    ELSE
        IF octet_length(key) = 36
           AND key ~ '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$' THEN
            hex := replace(key, '-', '');
        ELSIF octet_length(key) = 32 AND key ~ '^[0-9a-fA-F]{32}$' THEN
            hex := key;
        ELSE
            RETURN NULL;
        END IF;
        IF substr(hex, 13, 1) <> '7' OR lower(substr(hex, 17, 1)) NOT IN ('8', '9', 'a', 'b') THEN
            RETURN NULL;
        END IF;
        ms := ('x' || lpad(substr(hex, 1, 12), 16, '0'))::bit(64)::bigint;
    END IF;
    RETURN ('1970-01-01 00:00'::timestamp
            + make_interval(days => (ms / 86400000)::integer, secs => (ms % 86400000) / 1000.0))
           AT TIME ZONE 'UTC';
END
$$;

-- A new UUIDv7: 48 bits of Unix milliseconds, 12 bits of sub-millisecond fraction (bumped
-- past the session's last one, so one session's keys strictly increase), random bits.
CREATE FUNCTION idempotency.uuidv7()
RETURNS uuid
LANGUAGE plpgsql VOLATILE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    unix_us bigint := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
    ticks bigint := (unix_us / 1000) * 4096 + (unix_us % 1000) * 4096 / 1000;
    last bigint := coalesce(nullif(current_setting('idempotency.uuidv7_last_ticks', true), '')::bigint, 0);
    random text := replace(gen_random_uuid()::text, '-', '');
BEGIN
    IF ticks <= last THEN
        ticks := last + 1;
    END IF;
    PERFORM set_config('idempotency.uuidv7_last_ticks', ticks::text, false);
    RETURN (lpad(to_hex(ticks / 4096), 12, '0')
            || lpad(to_hex(28672 | (ticks % 4096)::integer), 4, '0')
            || lpad(to_hex(128 | (('x' || substr(random, 17, 2))::bit(8)::integer & 63)), 2, '0')
            || substr(random, 19, 14))::uuid;
END
$$;

-- The canonical form of docs/fingerprint.md, built from jsonb: members by the UTF-8 bytes of
-- their names, numbers as exact plain decimals (numeric keeps every digit), strings with
-- jsonb's own escaping (the canonical one). Iterative, with a stack of its own (values still
-- to write, and the literal text between them): nesting of 1000 levels would exhaust the
-- server's stack as PL/pgSQL recursion. A value's path is the dotted path of an object member
-- from the top-level object ('' at the top, NULL where nothing below can be excluded); an
-- excluded member is walked all the same (its numbers and nesting are checked) but not written.
CREATE FUNCTION idempotency._canonical(body jsonb, exclude text[])
RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    -- the stack: a value (lit NULL) or a literal (val NULL), its path, depth, and whether it
    -- is written
    vals jsonb[] := ARRAY[body];
    lits text[] := ARRAY[NULL::text];
    paths text[] := ARRAY[CASE WHEN cardinality(exclude) > 0 THEN '' END];
    depths integer[] := ARRAY[0];
    writes boolean[] := ARRAY[true];
    top integer := 1;
    parts text[] := '{}';
    np integer := 0;
    v jsonb;
    path text;
    depth integer;
    w boolean;
    kind text;
    names text[];
    name text;
    member_path text;
    excluded boolean;
    first_written integer;
    num text;
    n integer;
    flat boolean;
    flat_text text;
BEGIN
    -- An object with no object, array or number of over 1000 characters in it (the usual
    -- request body): written by one query, not by the walk below.
    IF jsonb_typeof(body) = 'object' THEN
        SELECT bool_and(jsonb_typeof(e.value) NOT IN ('object', 'array')
                        AND (jsonb_typeof(e.value) <> 'number' OR length(e.value::text) <= 1000)),
               '{' || coalesce(string_agg(
                   to_jsonb(e.key)::text || ':'
                   || CASE WHEN jsonb_typeof(e.value) = 'number'
                           THEN trim_scale(e.value::numeric)::text ELSE e.value::text END,
                   ',' ORDER BY convert_to(e.key, 'UTF8'))
                   FILTER (WHERE coalesce(cardinality(exclude), 0) = 0 OR strpos(e.key, '.') > 0
                                 OR NOT e.key = ANY (exclude)), '') || '}'
          INTO flat, flat_text
          FROM jsonb_each(body) AS e;
        IF flat IS NOT FALSE THEN
            RETURN flat_text;
        END IF;
    END IF;
    WHILE top > 0 LOOP
        v := vals[top];
        IF v IS NULL THEN
            IF writes[top] THEN
                np := np + 1;
                parts[np] := lits[top];
            END IF;
            top := top - 1;
            CONTINUE;
        END IF;
        path := paths[top];
        depth := depths[top];
        w := writes[top];
        top := top - 1;
        kind := jsonb_typeof(v);
        IF kind = 'object' OR kind = 'array' THEN
            IF depth >= 1000 THEN
                RAISE EXCEPTION 'JSON nesting exceeds 1000 levels' USING ERRCODE = '54000';
            END IF;
            -- Pushed in reverse: the closing bracket first, then the members from the last.
            top := top + 1;
            vals[top] := NULL; lits[top] := CASE WHEN kind = 'object' THEN '}' ELSE ']' END;
            writes[top] := w;
            IF kind = 'object' THEN
                SELECT array_agg(k ORDER BY convert_to(k, 'UTF8')) INTO names
                  FROM jsonb_object_keys(v) AS k;
                n := coalesce(cardinality(names), 0);
                -- the first member written: commas go between written members only
                first_written := n + 1;
                FOR i IN 1 .. n LOOP
                    IF path IS NULL OR strpos(names[i], '.') > 0
                       OR NOT (path || names[i]) = ANY (exclude) THEN
                        first_written := i;
                        EXIT;
                    END IF;
                END LOOP;
                FOR i IN REVERSE n .. 1 LOOP
                    name := names[i];
                    IF path IS NULL OR strpos(name, '.') > 0 THEN
                        member_path := NULL;
                        excluded := false;
                    ELSE
                        excluded := (path || name) = ANY (exclude);
                        member_path := path || name || '.';
                    END IF;
                    top := top + 1;
                    vals[top] := v -> name; lits[top] := NULL; paths[top] := member_path;
                    depths[top] := depth + 1; writes[top] := w AND NOT excluded;
                    top := top + 1;
                    vals[top] := NULL;
                    lits[top] := CASE WHEN i > first_written THEN ',' ELSE '' END
                                 || to_jsonb(name)::text || ':';
                    writes[top] := w AND NOT excluded;
                END LOOP;
            ELSE
                n := jsonb_array_length(v);
                FOR i IN REVERSE n - 1 .. 0 LOOP
                    top := top + 1;
                    vals[top] := v -> i; lits[top] := NULL; paths[top] := NULL;
                    depths[top] := depth + 1; writes[top] := w;
                    IF i > 0 THEN
                        top := top + 1;
                        vals[top] := NULL; lits[top] := ','; writes[top] := w;
                    END IF;
                END LOOP;
            END IF;
            IF w THEN
                np := np + 1;
                parts[np] := CASE WHEN kind = 'object' THEN '{' ELSE '[' END;
            END IF;
        ELSIF kind = 'number' THEN
            num := trim_scale(v::numeric)::text;
            IF length(ltrim(replace(num, '.', ''), '-')) > 1000 THEN
                RAISE EXCEPTION 'JSON number has more than 1000 digits' USING ERRCODE = '54000';
            END IF;
            IF w THEN
                np := np + 1;
                parts[np] := num;
            END IF;
        ELSIF w THEN
            np := np + 1;
            parts[np] := v::text;
        END IF;
    END LOOP;
    RETURN array_to_string(parts, '');
END
$$;

CREATE FUNCTION idempotency.fingerprint(body jsonb, exclude text[] DEFAULT '{}')
RETURNS bytea
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p text;
BEGIN
    IF array_ndims(exclude) > 1 THEN
        RAISE EXCEPTION 'exclude must be a one-dimensional array' USING ERRCODE = '2202E';
    END IF;
    IF array_position(exclude, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'exclude must not contain nulls' USING ERRCODE = '22004';
    END IF;
    FOREACH p IN ARRAY exclude LOOP
        IF p = '' OR left(p, 1) = '.' OR right(p, 1) = '.' OR strpos(p, '..') > 0 THEN
            RAISE EXCEPTION 'invalid exclude path "%"', p USING ERRCODE = '22023';
        END IF;
    END LOOP;
    RETURN sha256(convert_to(
        idempotency._canonical(body, exclude), 'UTF8'));
END
$$;

CREATE FUNCTION idempotency.fingerprint(body bytea)
RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT pg_catalog.sha256(body) $$;

-- ---- src/keys.sql
-- The key table has the extension's shape exactly (a dump moves between the editions): one
-- row per live (scope, key), partitioned by expires_at; (scope, key) is unique among live
-- rows because every write happens under the key's advisory lock.
CREATE TABLE idempotency.keys (
    scope text NOT NULL,
    key text NOT NULL,
    state text NOT NULL CHECK (state IN ('processing', 'completed', 'failed')),
    attempt integer NOT NULL CHECK (attempt > 0),
    request_hash bytea,
    status_code integer CHECK (status_code BETWEEN 100 AND 599),
    response jsonb,
    recovery_point text,
    last_error jsonb,
    first_seen_at timestamptz NOT NULL,
    completed_at timestamptz,
    locked_until timestamptz,
    expires_at timestamptz NOT NULL
) PARTITION BY RANGE (expires_at);
ALTER TABLE idempotency.keys REPLICA IDENTITY FULL;

CREATE TABLE idempotency.keys_default PARTITION OF idempotency.keys
    (PRIMARY KEY (key, scope, expires_at)) DEFAULT;

REVOKE ALL ON idempotency.keys, idempotency.keys_default FROM PUBLIC;
-- === key lifecycle ===

-- The live record of (scope, key) at `now`, as this transaction sees it (all NULL: none).
-- PL/pgSQL, not SQL: a SQL function that is not inlined plans its query over every partition
-- of the keys on each call (about 0.4 ms), PL/pgSQL keeps the plan for the session.
CREATE FUNCTION idempotency._live(p_scope text, p_key text, now timestamptz)
RETURNS idempotency.keys
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    r idempotency.keys;
BEGIN
    SELECT k.* INTO r FROM idempotency.keys k
    WHERE k.key OPERATOR(pg_catalog.=) p_key AND k.scope OPERATOR(pg_catalog.=) p_scope
      AND k.expires_at OPERATOR(pg_catalog.>) now
    LIMIT 1;
    RETURN r;
END
$$;

-- reserve's answer from a record (NULL: none); status_code and response only for a replay,
-- locked_until not for a completed key, nothing but the outcome for too_old.
CREATE FUNCTION idempotency._reservation(outcome idempotency.outcome, r idempotency.keys)
RETURNS idempotency.reservation
LANGUAGE sql IMMUTABLE
AS $$
    SELECT ROW(outcome,
               CASE WHEN outcome OPERATOR(pg_catalog.=) 'replay' THEN r.status_code END,
               CASE WHEN outcome OPERATOR(pg_catalog.=) 'replay' THEN r.response END,
               r.attempt, r.recovery_point, r.first_seen_at,
               CASE WHEN r.state OPERATOR(pg_catalog.<>) 'completed' THEN r.locked_until END,
               r.expires_at)::idempotency.reservation
$$;

-- The claim of reserve and claim_once (complete_now: claim_once's record, completed by the
-- call that claims it). Every claim (new, takeover, retry after fail) sets expires_at to
-- locked_until + retention unless it is later already: a record never expires under a live
-- claim. A later expires_at moves the row to the partition of its new expiry. The key's advisory lock (a transaction lock on key_lock_id) serialises
-- every call on the key. With a wait, a live claim another transaction committed is waited
-- for without holding the lock (the holder's complete needs it): the lock is taken inside a
-- block whose subtransaction is rolled back to let it go again, and the block writes nothing.
CREATE FUNCTION idempotency._reserve(p_scope text, p_key text, p_request_hash bytea,
                                     lock_ttl_us bigint, retention_us bigint, wait_us bigint,
                                     complete_now boolean)
RETURNS idempotency.reservation
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    lock_id bigint := idempotency.key_lock_id(p_scope, p_key);
    deadline timestamptz := clock_timestamp() + make_interval(secs => wait_us / 1000000.0);
    pause_ms integer := 1;
    now timestamptz;
    r idempotency.keys;
    got boolean;
    held_before boolean;
    caller_lock_timeout text;
    left_ms bigint;
BEGIN
    IF wait_us = 0 THEN
        -- No wait: the lock tried once, with no block (and so no subtransaction) around it.
        got := pg_try_advisory_xact_lock(lock_id);
        now := clock_timestamp();
        r := idempotency._live(p_scope, p_key, now);
        IF NOT got THEN
            -- Another transaction works on the key right now; a completed record never
            -- changes, and is answered without the lock.
            IF r.key IS NOT NULL AND p_request_hash IS NOT NULL AND r.request_hash IS NOT NULL
               AND r.request_hash <> p_request_hash THEN
                RETURN idempotency._reservation('mismatch', r);
            ELSIF r.state = 'completed' THEN
                RETURN idempotency._reservation('replay', r);
            END IF;
            RETURN idempotency._reservation('in_progress', r);
        END IF;
    END IF;
    WHILE wait_us > 0 LOOP
        held_before := EXISTS (
            SELECT FROM pg_catalog.pg_locks l
            WHERE l.locktype OPERATOR(pg_catalog.=) 'advisory'
              AND l.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid()
              AND l.objsubid OPERATOR(pg_catalog.=) 1 AND l.granted
              AND l.classid::bigint OPERATOR(pg_catalog.=) ((lock_id >> 32) & 4294967295)
              AND l.objid::bigint OPERATOR(pg_catalog.=) (lock_id & 4294967295));
        BEGIN
            got := pg_try_advisory_xact_lock(lock_id);
            now := clock_timestamp();
            IF NOT got THEN
                -- Another transaction works on the key right now. A completed record never
                -- changes: it is answered without the lock.
                r := idempotency._live(p_scope, p_key, now);
                IF r.state = 'completed' THEN
                    RETURN idempotency._reservation(
                        CASE WHEN p_request_hash IS NOT NULL AND r.request_hash IS NOT NULL
                                  AND r.request_hash <> p_request_hash
                             THEN 'mismatch' ELSE 'replay' END::idempotency.outcome, r);
                END IF;
                IF deadline > now THEN
                    -- Wait for the lock as a lock wait (pg_locks shows it), up to the deadline
                    -- or the caller's own lock_timeout, whichever is shorter.
                    caller_lock_timeout := current_setting('lock_timeout');
                    left_ms := ceil(extract(epoch FROM deadline - now) * 1000)::bigint;
                    IF (SELECT setting::bigint FROM pg_catalog.pg_settings
                        WHERE name OPERATOR(pg_catalog.=) 'lock_timeout') BETWEEN 1 AND left_ms THEN
                        left_ms := NULL;
                    END IF;
                    BEGIN
                        IF left_ms IS NOT NULL THEN
                            PERFORM set_config('lock_timeout', least(left_ms, 2147483647)::text, true);
                        END IF;
                        PERFORM pg_advisory_xact_lock(lock_id);
                        PERFORM set_config('lock_timeout', caller_lock_timeout, true);
                        got := true;
                    EXCEPTION WHEN lock_not_available THEN
                        got := false;
                    END;
                END IF;
                IF NOT got THEN
                    IF r.key IS NOT NULL AND p_request_hash IS NOT NULL
                       AND r.request_hash IS NOT NULL AND r.request_hash <> p_request_hash THEN
                        RETURN idempotency._reservation('mismatch', r);
                    END IF;
                    RETURN idempotency._reservation('in_progress', r);
                END IF;
                now := clock_timestamp();
                held_before := false;
            END IF;
            r := idempotency._live(p_scope, p_key, now);
            IF r.key IS NOT NULL AND r.state = 'processing'
               AND NOT (p_request_hash IS NOT NULL AND r.request_hash IS NOT NULL
                        AND r.request_hash <> p_request_hash)
               AND r.locked_until > now AND wait_us > 0 AND NOT held_before
               AND deadline > clock_timestamp() THEN
                -- A live claim another transaction committed: let the lock go (with this
                -- block's subtransaction) and look again after a pause.
                RAISE EXCEPTION USING ERRCODE = 'IKW01';
            END IF;
        EXCEPTION WHEN SQLSTATE 'IKW01' THEN
            left_ms := ceil(extract(epoch FROM deadline - clock_timestamp()) * 1000)::bigint;
            PERFORM pg_sleep(greatest(least(pause_ms, left_ms), 0) / 1000.0);
            pause_ms := least(pause_ms * 2, 20);
            CONTINUE;
        END;
        EXIT;
    END LOOP;

    IF r.key IS NULL THEN
        IF idempotency.key_time(p_key) < now - make_interval(secs => retention_us / 1000000.0) THEN
            RETURN ROW('too_old', NULL, NULL, NULL, NULL, NULL, NULL, NULL)::idempotency.reservation;
        END IF;
        r := ROW(p_scope, p_key, 'processing', 1, p_request_hash, NULL, NULL, NULL, NULL, now,
                 NULL, now + make_interval(secs => lock_ttl_us / 1000000.0), NULL);
        r.expires_at := r.locked_until + make_interval(secs => retention_us / 1000000.0);
        IF complete_now THEN
            r.state := 'completed';
            r.completed_at := now;
            r.locked_until := NULL;
        END IF;
        INSERT INTO idempotency.keys SELECT r.*;
        RETURN idempotency._reservation('new', r);
    END IF;
    IF (p_request_hash IS NOT NULL AND r.request_hash IS NOT NULL AND r.request_hash <> p_request_hash)
       OR r.state = 'completed' THEN
        RETURN idempotency._reservation(
            CASE WHEN p_request_hash IS NOT NULL AND r.request_hash IS NOT NULL
                      AND r.request_hash <> p_request_hash
                 THEN 'mismatch' ELSE 'replay' END::idempotency.outcome, r);
    END IF;
    IF r.state = 'processing' AND r.locked_until > now THEN
        RETURN idempotency._reservation('in_progress', r);
    END IF;
    -- A failed claim or one whose lease lapsed: the next attempt takes it over, and its
    -- expires_at moves past the new lease (never earlier than it was).
    UPDATE idempotency.keys k
       SET state = CASE WHEN complete_now THEN 'completed' ELSE 'processing' END,
           attempt = k.attempt + 1,
           request_hash = coalesce(p_request_hash, k.request_hash),
           locked_until = CASE WHEN complete_now THEN NULL
                               ELSE now + make_interval(secs => lock_ttl_us / 1000000.0) END,
           completed_at = CASE WHEN complete_now THEN now ELSE k.completed_at END,
           expires_at = greatest(k.expires_at,
                                 now + make_interval(secs => lock_ttl_us / 1000000.0)
                                     + make_interval(secs => retention_us / 1000000.0))
     WHERE k.key = p_key AND k.scope = p_scope AND k.expires_at = r.expires_at
    RETURNING k.* INTO r;
    RETURN idempotency._reservation('new', r);
END
$$;

CREATE FUNCTION idempotency.reserve(
    scope text,
    key text,
    request_hash bytea DEFAULT NULL,
    lock_ttl interval DEFAULT '5 minutes',
    retention interval DEFAULT '24 hours',
    wait interval DEFAULT '0')
RETURNS idempotency.reservation
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
AS $$
DECLARE
    ttl_us bigint;
    retention_us bigint;
    wait_us bigint;
    now timestamptz;
    r idempotency.keys;
BEGIN
    -- The usual call (no wait, names of 1 to 255 bytes, a lease and a retention of up to 30
    -- days within max_retention unset or '30d', as a server that loads the extension shows
    -- it; READ COMMITTED, read-write) is told by one small
    -- expression, and answered here when the lock is got at once and the key is new or a
    -- replay without mismatch (as _reserve answers them, with no nested call). The full
    -- checks are large expressions, set up again in every transaction: they run only when
    -- that test fails, and raise what the extension raises. Anything else goes to _reserve,
    -- which takes the lock again (held already, or tried once more) and reads again.
    IF current_setting('transaction_isolation') = 'read committed'
       AND current_setting('transaction_read_only') = 'off'
       AND octet_length(scope) BETWEEN 1 AND 255 AND octet_length(key) BETWEEN 1 AND 255
       AND lock_ttl BETWEEN '1 microsecond' AND '30 days'
       AND retention BETWEEN '1 microsecond' AND '30 days' AND wait = '0'
       AND coalesce(nullif(current_setting('idempotency.max_retention', true), ''), '30d') = '30d' THEN
        IF pg_try_advisory_xact_lock(idempotency.key_lock_id(scope, key)) THEN
            now := clock_timestamp();
            SELECT k.* INTO r FROM idempotency.keys k
             WHERE k.key OPERATOR(pg_catalog.=) reserve.key
               AND k.scope OPERATOR(pg_catalog.=) reserve.scope AND k.expires_at > now
             LIMIT 1;
            IF r.state = 'completed' AND NOT coalesce(r.request_hash <> request_hash, false) THEN
                RETURN idempotency._reservation('replay', r);
            ELSIF r.key IS NULL THEN
                ttl_us := idempotency._usecs(lock_ttl);
                retention_us := idempotency._usecs(retention);
                IF NOT coalesce(CASE WHEN octet_length(key) IN (26, 32, 36) THEN
                        idempotency.key_time(key) < now - make_interval(secs => retention_us / 1000000.0)
                        END, false) THEN
                    r := ROW(scope, key, 'processing', 1, request_hash, NULL, NULL, NULL, NULL, now,
                             NULL, now + make_interval(secs => ttl_us / 1000000.0), NULL);
                    r.expires_at := r.locked_until + make_interval(secs => retention_us / 1000000.0);
                    INSERT INTO idempotency.keys SELECT r.*;
                    RETURN idempotency._reservation('new', r);
                END IF;
            END IF;
        END IF;
    ELSE
        -- The argument checks, in the extension's order: each raises or is true.
        ttl_us := CASE WHEN idempotency._check_writable('idempotency.reserve()')
                            AND idempotency._check_name('scope', scope)
                            AND idempotency._check_name('key', key)
                       THEN idempotency._interval_usecs('lock_ttl', lock_ttl, false) END;
        retention_us := idempotency._interval_usecs('retention', retention, false);
        wait_us := least(idempotency._interval_usecs('wait', wait, true), 3155760000000000);
        PERFORM idempotency._check_times(ttl_us, retention_us);
    END IF;
    RETURN idempotency._reserve(scope, key, request_hash, coalesce(ttl_us, idempotency._usecs(lock_ttl)),
                                coalesce(retention_us, idempotency._usecs(retention)),
                                coalesce(wait_us, 0), false);
END
$$;

CREATE FUNCTION idempotency.claim_once(
    scope text,
    key text,
    retention interval DEFAULT '24 hours',
    wait interval DEFAULT '0')
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
AS $$
DECLARE
    retention_us bigint;
    wait_us bigint;
    r idempotency.reservation;
BEGIN
    PERFORM idempotency._check_writable('idempotency.claim_once()');
    PERFORM idempotency._check_name('scope', scope);
    PERFORM idempotency._check_name('key', key);
    retention_us := idempotency._interval_usecs('retention', retention, false);
    wait_us := idempotency._interval_usecs('wait', wait, true);
    PERFORM idempotency._check_times(0, retention_us);
    r := idempotency._reserve(scope, key, NULL, 0, retention_us,
                              least(wait_us, 3155760000000000), true);
    IF r.outcome = 'new' THEN
        RETURN true;
    ELSIF r.outcome IN ('replay', 'mismatch') THEN
        RETURN false;
    ELSIF r.outcome = 'in_progress' THEN
        RAISE EXCEPTION 'idempotency key is in progress' USING ERRCODE = 'IK003',
            DETAIL = 'Another transaction holds the key: a competing consumer whose transaction '
                     'is still open, or a claim whose lease has not lapsed.',
            HINT = 'Leave the message unacknowledged (or requeue it) and retry later, or pass a '
                   'wait to wait for the holder.';
    END IF;
    RAISE EXCEPTION 'idempotency key is older than the retention window' USING ERRCODE = 'IK004',
        DETAIL = 'The key is a UUIDv7 or ULID made before now - retention: a record of its '
                 'first delivery may have expired already.',
        HINT = 'Dead-letter the message, or claim it with a longer retention.';
END
$$;

-- The live claim a complete, fail or checkpoint acts on, read under the key's lock; refused
-- when there is none or when the call's attempt is stale.
CREATE FUNCTION idempotency._claim(call text, p_scope text, p_key text, p_attempt integer)
RETURNS idempotency.keys
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    r idempotency.keys;
BEGIN
    PERFORM pg_advisory_xact_lock(idempotency.key_lock_id(p_scope, p_key));
    r := idempotency._live(p_scope, p_key, clock_timestamp());
    IF r.key IS NULL THEN
        RAISE EXCEPTION '% requires a live claim on the key', call USING ERRCODE = '55000',
            DETAIL = 'The key has no live record: it was never reserved, was forgotten, or its '
                     'retention window has ended.',
            HINT = 'Call idempotency.reserve first and act only on the outcome ''new''.';
    END IF;
    IF p_attempt IS NOT NULL AND p_attempt <> r.attempt THEN
        RAISE EXCEPTION 'attempt is stale' USING ERRCODE = 'IK001',
            DETAIL = format('The call was made for attempt %s; the key is at attempt %s.',
                            p_attempt, r.attempt),
            HINT = 'Another holder took the key over after this holder''s lock_ttl lapsed.';
    END IF;
    RETURN r;
END
$$;

CREATE FUNCTION idempotency._check_size(what text, value jsonb)
RETURNS boolean
LANGUAGE sql VOLATILE
AS $$
    SELECT CASE
        WHEN pg_column_size(value) > 10485760
            THEN idempotency._raise('54000', what || ' is too large',
                format('It takes %s bytes as jsonb; the limit is 10485760 bytes.',
                       pg_column_size(value)),
                'Store a reference to the payload instead of the payload itself.')::boolean
        ELSE true END
$$;

CREATE FUNCTION idempotency.complete(
    scope text, key text, status_code integer, response jsonb, attempt integer DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
AS $$
DECLARE
    r idempotency.keys;
    now timestamptz;
    new_expires_at timestamptz;
    expiry_us numeric;
BEGIN
    -- The usual call told by one small expression, as reserve does; the full checks (large
    -- expressions, set up again in every transaction) only when it fails.
    IF (current_setting('transaction_isolation') = 'read committed'
        AND current_setting('transaction_read_only') = 'off'
        AND octet_length(scope) BETWEEN 1 AND 255 AND octet_length(key) BETWEEN 1 AND 255
        AND status_code BETWEEN 100 AND 599
        AND coalesce(pg_column_size(response) <= 10485760, true)) IS NOT TRUE THEN
        PERFORM idempotency._check_writable('idempotency.complete()');
        PERFORM idempotency._check_name('scope', scope);
        PERFORM idempotency._check_name('key', key);
        IF status_code IS NULL THEN
            RAISE EXCEPTION 'status_code must not be null' USING ERRCODE = '22004';
        ELSIF status_code NOT BETWEEN 100 AND 599 THEN
            RAISE EXCEPTION 'status code % is out of range (100 to 599)', status_code
                USING ERRCODE = '22023';
        END IF;
        PERFORM idempotency._check_size('response', response);
    END IF;
    -- The usual case, the holder within its lease: one UPDATE under the key's lock. Anything
    -- else (no live claim, a stale attempt, a completed or failed key, a lapsed lease) is read
    -- and answered below.
    PERFORM pg_advisory_xact_lock(idempotency.key_lock_id(scope, key));
    now := clock_timestamp();
    UPDATE idempotency.keys k
       SET state = 'completed', status_code = complete.status_code,
           response = complete.response, completed_at = now, locked_until = NULL
     WHERE k.key = complete.key AND k.scope = complete.scope AND k.expires_at > now
       AND k.state = 'processing' AND k.locked_until >= now
       AND (complete.attempt IS NULL OR k.attempt = complete.attempt);
    IF FOUND THEN
        RETURN;
    END IF;
    r := idempotency._claim('complete', scope, key, attempt);
    IF r.state = 'completed' THEN
        IF r.status_code IS DISTINCT FROM complete.status_code
           OR r.response IS DISTINCT FROM complete.response THEN
            RAISE EXCEPTION 'key is already completed with a different result'
                USING ERRCODE = 'IK002',
                DETAIL = format('The stored status_code is %s.', r.status_code);
        END IF;
        RETURN;
    ELSIF r.state = 'failed' THEN
        RAISE EXCEPTION 'complete requires a live claim on the key' USING ERRCODE = '55000',
            DETAIL = 'The last attempt failed and released its claim.',
            HINT = 'Call idempotency.reserve first and act only on the outcome ''new''.';
    END IF;
    -- A complete after the lease lapsed moves expires_at forward by as much as it came late
    -- (to the last valid timestamp at most): the answer stays replayable for the retention
    -- after it was stored. Counted in microseconds: an interval with days would shift by an
    -- hour across a daylight saving change.
    now := clock_timestamp();
    new_expires_at := r.expires_at;
    IF r.locked_until IS NOT NULL AND now > r.locked_until THEN
        expiry_us := (extract(epoch FROM r.expires_at) + extract(epoch FROM now)
                      - extract(epoch FROM r.locked_until)) * 1000000;
        new_expires_at := CASE
            WHEN expiry_us >= extract(epoch FROM '294276-12-31 23:59:59.999999+00'::timestamptz) * 1000000
                THEN '294276-12-31 23:59:59.999999+00'::timestamptz
            ELSE r.expires_at + make_interval(secs => extract(epoch FROM now - r.locked_until)) END;
    END IF;
    UPDATE idempotency.keys k
       SET state = 'completed', status_code = complete.status_code,
           response = complete.response, completed_at = now, locked_until = NULL,
           expires_at = new_expires_at
     WHERE k.key = complete.key AND k.scope = complete.scope AND k.expires_at = r.expires_at;
END
$$;

CREATE FUNCTION idempotency.fail(
    scope text, key text, error jsonb DEFAULT NULL, attempt integer DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
AS $$
DECLARE
    r idempotency.keys;
BEGIN
    PERFORM idempotency._check_writable('idempotency.fail()');
    PERFORM idempotency._check_name('scope', scope);
    PERFORM idempotency._check_name('key', key);
    PERFORM idempotency._check_size('error', error);
    r := idempotency._claim('fail', scope, key, attempt);
    IF r.state <> 'processing' THEN
        RAISE EXCEPTION 'fail requires a live claim on the key' USING ERRCODE = '55000',
            DETAIL = CASE WHEN r.state = 'completed' THEN 'The key is already completed.'
                          ELSE 'The claim was already released.' END,
            HINT = 'Call idempotency.reserve first and act only on the outcome ''new''.';
    END IF;
    UPDATE idempotency.keys k
       SET state = 'failed', last_error = fail.error, locked_until = NULL
     WHERE k.key = fail.key AND k.scope = fail.scope AND k.expires_at = r.expires_at;
END
$$;

CREATE FUNCTION idempotency.checkpoint(
    scope text, key text, recovery_point text, attempt integer DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
AS $$
DECLARE
    r idempotency.keys;
BEGIN
    PERFORM idempotency._check_writable('idempotency.checkpoint()');
    PERFORM idempotency._check_name('scope', scope);
    PERFORM idempotency._check_name('key', key);
    r := idempotency._claim('checkpoint', scope, key, attempt);
    IF r.state <> 'processing' THEN
        RAISE EXCEPTION 'checkpoint requires a live claim on the key' USING ERRCODE = '55000',
            DETAIL = 'The key is not being processed.',
            HINT = 'Call idempotency.reserve first and act only on the outcome ''new''.';
    END IF;
    UPDATE idempotency.keys k
       SET recovery_point = checkpoint.recovery_point
     WHERE k.key = checkpoint.key AND k.scope = checkpoint.scope AND k.expires_at = r.expires_at;
END
$$;

CREATE FUNCTION idempotency.lookup(scope text, key text)
RETURNS TABLE (
    state text,
    status_code integer,
    response jsonb,
    request_hash bytea,
    attempt integer,
    recovery_point text,
    last_error jsonb,
    first_seen_at timestamptz,
    completed_at timestamptz,
    locked_until timestamptz,
    expires_at timestamptz)
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER ROWS 1
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
AS $$
DECLARE
    r idempotency.keys;
BEGIN
    PERFORM idempotency._check_name('scope', scope);
    PERFORM idempotency._check_name('key', key);
    r := idempotency._live(scope, key, clock_timestamp());
    IF r.key IS NOT NULL THEN
        RETURN QUERY SELECT r.state, r.status_code, r.response, r.request_hash, r.attempt,
                            r.recovery_point, r.last_error, r.first_seen_at, r.completed_at,
                            r.locked_until, r.expires_at;
    END IF;
END
$$;

CREATE FUNCTION idempotency.forget(scope text, key text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
AS $$
DECLARE
    live boolean;
BEGIN
    IF current_setting('transaction_read_only')::boolean THEN
        RAISE EXCEPTION 'cannot execute idempotency.forget() in a read-only transaction'
            USING ERRCODE = '25006';
    END IF;
    PERFORM idempotency._check_name('scope', scope);
    PERFORM idempotency._check_name('key', key);
    PERFORM pg_advisory_xact_lock(idempotency.key_lock_id(scope, key));
    live := (idempotency._live(scope, key, clock_timestamp())).key IS NOT NULL;
    DELETE FROM idempotency.keys k WHERE k.key = forget.key AND k.scope = forget.scope;
    RETURN live;
END
$$;

-- Only roles granted EXECUTE (docs/operations.md, "Roles and privileges") may touch keys.
REVOKE ALL ON FUNCTION
    idempotency.reserve(text, text, bytea, interval, interval, interval),
    idempotency.complete(text, text, integer, jsonb, integer),
    idempotency.fail(text, text, jsonb, integer),
    idempotency.checkpoint(text, text, text, integer),
    idempotency.claim_once(text, text, interval, interval),
    idempotency.lookup(text, text),
    idempotency.forget(text, text)
FROM PUBLIC;
-- The helpers are internal: only the edition's own functions (running as its owner) call them.
REVOKE ALL ON FUNCTION
    idempotency._check_name(text, text),
    idempotency._interval_usecs(text, interval, boolean),
    idempotency._usecs(interval),
    idempotency._setting_usecs(text, text),
    idempotency._setting_parse(text, text),
    idempotency._duration_usecs(text),
    idempotency._check_times(bigint, bigint),
    idempotency._check_writable(text),
    idempotency._canonical(jsonb, text[]),
    idempotency._live(text, text, timestamptz),
    idempotency._reservation(idempotency.outcome, idempotency.keys),
    idempotency._reserve(text, text, bytea, bigint, bigint, bigint, boolean),
    idempotency._claim(text, text, text, integer),
    idempotency._check_size(text, jsonb)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION idempotency._canonical(jsonb, text[]),
    idempotency._check_name(text, text) TO PUBLIC;

-- ---- src/execute_once.sql
-- === the work inside the claim: one statement ===
-- execute_once claims the key through reserve; on the outcome 'new' it runs `statement` (one
-- SELECT, INSERT, UPDATE, DELETE or MERGE) with `params` bound to $1, $2, ... in the caller's
-- transaction, as the caller, with the caller's search_path, then completes the key through
-- _complete_claim (complete's usual call; lookup and complete when the claim is no longer
-- the call's) with `status_code` and the statement's result as the response: no row (or no
-- RETURNING) NULL, one row of one json / jsonb column that value, one row otherwise the row as
-- a JSON object; more than one row is an error (21000). Any other outcome is reserve's and
-- runs nothing. SECURITY INVOKER with no search_path of its own, so that the statement runs
-- as the caller: every object these functions name is qualified, and the caller needs EXECUTE
-- on reserve, lookup, complete and _complete_claim too (docs/managed.md).
--
-- A statement text is prepared once per session (PREPARE, named idempotency_eo_<md5 of the
-- text>, or idempotency_eo_<md5>_n for a statement that returns no rows) and kept, at most 64
-- of them, the oldest deallocated first. Its parameters are typed by the server from where
-- $1, $2, ... appear; one the server cannot type is text. A value never becomes SQL text: the
-- values are handed over in a transaction-local setting (idempotency_managed.params, the
-- array's text form) and read back by the EXECUTE, each cast to the catalog's type of its
-- parameter.

-- The number of statements `statement` holds, counted as the server's parser counts them
-- (semicolons outside string constants, quoted identifiers, dollar quotes and comments end a
-- statement, and one of white space and comments only is none), and where the first one's
-- semicolon is (first_end; NULL when none ends with one). Read as the server's lexer
-- reads SQL (nested /* */ comments, E'' and U&'' strings, a backslash in '' strings when
-- standard_conforming_strings is off, $tag$ quotes, identifiers holding $); the count holds
-- for text the server's parser accepts. No server message is read: its wording follows
-- lc_messages.
CREATE FUNCTION idempotency._statement_count(statement text, OUT count integer,
    OUT first_end integer)
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    pos integer := 1;
    len integer := length(statement);
    rest text;
    token text;
    tag text;
    depth integer;
    open boolean := false;
    plain_string constant text := CASE WHEN current_setting('standard_conforming_strings') = 'on'
        THEN E'^(?:[bBxXnN]|[uU]&)?''(?:''''|[^''])*'''
        ELSE E'^(?:[bBxXnN]|[uU]&)?''(?:''''|\\\\.|[^''\\\\])*''' END;
BEGIN
    count := 0;
    WHILE pos <= len LOOP
        rest := substr(statement, pos);
        -- White space and comments.
        token := substring(rest FROM E'^(?:\\s+|--[^\\n]*)');
        IF token IS NULL AND left(rest, 2) = '/*' THEN
            depth := 0;
            token := '';
            LOOP
                IF left(rest, 2) = '/*' THEN
                    depth := depth + 1; tag := '/*';
                ELSIF left(rest, 2) = '*/' THEN
                    depth := depth - 1; tag := '*/';
                ELSE
                    tag := substring(rest FROM E'^(?:[^/*]+|.)');
                END IF;
                EXIT WHEN tag IS NULL;
                token := token || tag;
                rest := substr(rest, length(tag) + 1);
                EXIT WHEN depth = 0;
            END LOOP;
        END IF;
        IF token IS NOT NULL THEN
            pos := pos + length(token);
            CONTINUE;
        END IF;
        IF left(rest, 1) = ';' THEN
            IF open AND count = 1 THEN
                first_end := pos;
            END IF;
            open := false;
            pos := pos + 1;
            CONTINUE;
        END IF;
        IF NOT open THEN
            open := true;
            count := count + 1;
        END IF;
        -- One token: a string constant, a quoted identifier, an identifier or key word, a
        -- parameter, a dollar-quoted string, or any other character.
        token := coalesce(
            substring(rest FROM E'^[eE]''(?:''''|\\\\.|[^''\\\\])*'''),
            substring(rest FROM plain_string),
            substring(rest FROM E'^(?:[uU]&)?"(?:""|[^"])*"'),
            substring(rest FROM E'^(?:[A-Za-z_]|[^\\x01-\\x7f])(?:[A-Za-z_0-9$]|[^\\x01-\\x7f])*'),
            substring(rest FROM E'^\\$[0-9]+'));
        IF token IS NULL THEN
            tag := substring(rest FROM E'^\\$(?:(?:[A-Za-z_]|[^\\x01-\\x7f])(?:[A-Za-z_0-9]|[^\\x01-\\x7f])*)?\\$');
            IF tag IS NOT NULL THEN
                depth := strpos(substr(rest, length(tag) + 1), tag);
                token := CASE WHEN depth = 0 THEN rest
                              ELSE substr(rest, 1, 2 * length(tag) + depth - 1) END;
            END IF;
        END IF;
        pos := pos + coalesce(length(token), 1);
    END LOOP;
    RETURN;
END
$$;

-- Whether the server's parser reads `statement` as one SELECT, INSERT, UPDATE, DELETE or
-- MERGE: inside COPY ( ... ) a semicolon that ends a statement does not parse. Nothing runs
-- and nothing is analysed: a cursor cannot be opened on a COPY (42P11).
CREATE FUNCTION idempotency._one_statement(statement text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE STRICT SECURITY INVOKER
AS $$
DECLARE
    c pg_catalog.refcursor;
BEGIN
    OPEN c FOR EXECUTE pg_catalog.concat('COPY (', statement, E'\n) TO STDOUT');
    CLOSE c;
    RETURN true;
EXCEPTION
    WHEN invalid_cursor_definition THEN
        RETURN true;
    WHEN OTHERS THEN
        RETURN false;
END
$$;

-- Prepares `statement` under idempotency_eo_<md5> (`base`), or <base>_n when it returns no
-- rows, refusing what execute_once does not run, and returns the name. Deallocates the
-- edition's oldest statements past 64, never one whose statement is running (`running`).
CREATE FUNCTION idempotency._statement_prepare(statement text, base text, running text[])
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
AS $$
DECLARE
    c pg_catalog.refcursor;
    n integer;
    counted record;
    types pg_catalog.text[] := '{}';
    highest integer;
    untyped boolean;
    nulls pg_catalog.text;
    first_word pg_catalog.text;
    rest pg_catalog.text;
    returns_rows boolean;
    final pg_catalog.text := base;
    old pg_catalog.text;
    plan pg_catalog.jsonb;
BEGIN
    -- Exactly one statement, as the extension's parser counts. Where a semicolon may end one,
    -- the server's parser decides (_one_statement; without running anything): one statement
    -- with only white space, semicolons and line comments after the first semicolon is that
    -- statement; text that parses as several (a cursor cannot be opened on a PREPARE of it,
    -- or a later statement's analysis fails) is refused; a syntax error is left to the
    -- PREPARE below, which says why. _statement_count counts for the error's detail.
    counted := idempotency._statement_count(statement);
    n := counted.count;
    IF pg_catalog.strpos(statement, ';') OPERATOR(pg_catalog.>) 0
       AND NOT idempotency._one_statement(statement) THEN
        IF counted.first_end IS NOT NULL
           AND pg_catalog.substr(statement, counted.first_end OPERATOR(pg_catalog.+) 1)
               OPERATOR(pg_catalog.~) E'^(\\s|;|--[^\\n]*)*$'
           AND idempotency._one_statement(
                   pg_catalog.left(statement, counted.first_end OPERATOR(pg_catalog.-) 1)) THEN
            statement := pg_catalog.left(statement, counted.first_end OPERATOR(pg_catalog.-) 1);
            n := 1;
        ELSE
            BEGIN
                OPEN c FOR EXECUTE pg_catalog.format('PREPARE %I AS %s', base, statement);
                CLOSE c;
            EXCEPTION
                WHEN syntax_error THEN
                    n := LEAST(n, 1);
                WHEN OTHERS THEN
                    n := GREATEST(n, 2);
            END;
        END IF;
    END IF;
    IF n OPERATOR(pg_catalog.<>) 1 THEN
        RAISE EXCEPTION 'idempotency.execute_once runs exactly one statement' USING ERRCODE = '42601',
            DETAIL = pg_catalog.format('The statement text holds %s statements.', n);
    END IF;
    -- The statement's first word (past white space, comments and parentheses) tells what
    -- PREPARE refuses with a syntax error: transaction control, or a utility command.
    rest := statement;
    LOOP
        old := rest;
        rest := pg_catalog.regexp_replace(rest, E'^(\\s+|--[^\\n]*|/\\*([^*]|\\*+[^*/])*\\*+/|\\()', '');
        EXIT WHEN rest OPERATOR(pg_catalog.=) old;
    END LOOP;
    first_word := pg_catalog.upper(pg_catalog.substring(rest, '^[A-Za-z_]+'));
    -- Typed by the server: a parameter it cannot type is text (declared pg_catalog.text; the
    -- others pg_catalog.unknown, which lets the server infer them), then prepared again.
    LOOP
        BEGIN
            EXECUTE pg_catalog.format('PREPARE %I%s AS %s', base,
                CASE WHEN pg_catalog.cardinality(types) OPERATOR(pg_catalog.=) 0 THEN ''
                     ELSE pg_catalog.format('(%s)', pg_catalog.array_to_string(types, ', ')) END,
                statement);
            EXIT;
        EXCEPTION
            WHEN syntax_error THEN
                IF first_word OPERATOR(pg_catalog.=) ANY ('{BEGIN,START,COMMIT,END,ROLLBACK,ABORT,SAVEPOINT,RELEASE}')
                   OR (first_word OPERATOR(pg_catalog.=) 'PREPARE'
                       AND rest OPERATOR(pg_catalog.~*) E'^prepare\\s+transaction\\M') THEN
                    RAISE EXCEPTION 'idempotency.execute_once cannot run transaction control statements'
                        USING ERRCODE = '2D000',
                        DETAIL = 'The statement runs inside the transaction that claims the key: '
                                 'claim, statement and answer commit or roll back together.',
                        HINT = 'Outside a transaction block the call commits by itself.';
                ELSIF first_word OPERATOR(pg_catalog.<>) ALL ('{SELECT,INSERT,UPDATE,DELETE,MERGE,WITH,VALUES,TABLE}')
                      AND EXISTS (SELECT FROM pg_catalog.pg_get_keywords() k
                                  WHERE k.word OPERATOR(pg_catalog.=) pg_catalog.lower(first_word)) THEN
                    RAISE EXCEPTION 'idempotency.execute_once runs SELECT, INSERT, UPDATE, DELETE and MERGE only'
                        USING ERRCODE = '0A000',
                        DETAIL = pg_catalog.format('The statement is %s.', first_word);
                END IF;
                RAISE;
            WHEN indeterminate_datatype THEN
                -- Some parameter past those settled (types) is one no context types: the
                -- next one is settled. Declared of a type no context takes unless any type
                -- will do (pg_snapshot), it is refused where a context types it (left to the
                -- server: unknown) and accepted otherwise (text). Never past the highest $N
                -- the text holds.
                IF highest IS NULL THEN
                    SELECT coalesce(pg_catalog.max(m[1]::pg_catalog.int4), 0) INTO highest
                      FROM pg_catalog.regexp_matches(statement, E'\\$([0-9]{1,5})', 'g') AS m;
                END IF;
                IF pg_catalog.cardinality(types) OPERATOR(pg_catalog.>=) highest THEN
                    RAISE;
                END IF;
                BEGIN
                    EXECUTE pg_catalog.format('PREPARE %I(%s) AS %s', pg_catalog.concat(base, '_t'),
                        pg_catalog.array_to_string(
                            pg_catalog.array_append(types, 'pg_catalog.pg_snapshot'), ', '),
                        statement);
                    EXECUTE pg_catalog.format('DEALLOCATE %I', pg_catalog.concat(base, '_t'));
                    untyped := true;
                EXCEPTION
                    WHEN indeterminate_datatype THEN
                        untyped := true;
                    WHEN OTHERS THEN
                        untyped := false;
                END;
                types := pg_catalog.array_append(types,
                    CASE WHEN untyped THEN 'pg_catalog.text' ELSE 'pg_catalog.unknown' END);
            WHEN SQLSTATE '42P14' THEN
                RAISE EXCEPTION 'idempotency.execute_once runs SELECT, INSERT, UPDATE, DELETE and MERGE only'
                    USING ERRCODE = '0A000',
                    DETAIL = 'The statement creates a table or runs a utility command.';
        END;
    END LOOP;
    -- Whether it returns rows: a cursor opens on an EXECUTE of a statement that does (and
    -- runs nothing until fetched), not on one that does not.
    SELECT pg_catalog.string_agg(pg_catalog.format('NULL::%s', pg_catalog.format_type(t.oid, NULL)),
                                 ', ' ORDER BY t.n)
      INTO nulls
      FROM pg_catalog.pg_prepared_statements ps,
           LATERAL pg_catalog.unnest(ps.parameter_types::pg_catalog.oid[]) WITH ORDINALITY AS t(oid, n)
     WHERE ps.name OPERATOR(pg_catalog.=) base;
    BEGIN
        OPEN c FOR EXECUTE pg_catalog.format('EXECUTE %I%s', base,
            CASE WHEN nulls IS NULL THEN '' ELSE pg_catalog.format('(%s)', nulls) END);
        CLOSE c;
        returns_rows := true;
    EXCEPTION WHEN invalid_cursor_definition THEN
        returns_rows := false;
    END;
    IF NOT returns_rows THEN
        -- A SELECT that returns no rows is a SELECT INTO: it would create a table. After a
        -- WITH, the plan tells it from an INSERT, UPDATE, DELETE or MERGE (a ModifyTable
        -- node on top; EXPLAIN without ANALYZE runs nothing).
        IF first_word OPERATOR(pg_catalog.=) 'WITH' THEN
            EXECUTE pg_catalog.format('EXPLAIN (FORMAT JSON) EXECUTE %I%s', base,
                CASE WHEN nulls IS NULL THEN '' ELSE pg_catalog.format('(%s)', nulls) END)
               INTO plan;
            IF plan OPERATOR(pg_catalog.#>>) '{0,Plan,Node Type}' OPERATOR(pg_catalog.<>) 'ModifyTable' THEN
                first_word := 'SELECT';
            END IF;
        END IF;
        IF first_word OPERATOR(pg_catalog.=) ANY ('{SELECT,VALUES,TABLE}') OR first_word IS NULL THEN
            EXECUTE pg_catalog.format('DEALLOCATE %I', base);
            RAISE EXCEPTION 'idempotency.execute_once runs SELECT, INSERT, UPDATE, DELETE and MERGE only'
                USING ERRCODE = '0A000',
                DETAIL = 'The statement is SELECT INTO.';
        END IF;
        -- Kept under the name that says so, with the types the server gave it.
        final := pg_catalog.concat(base, '_n');
        SELECT pg_catalog.string_agg(pg_catalog.format_type(t.oid, NULL), ', ' ORDER BY t.n)
          INTO nulls
          FROM pg_catalog.pg_prepared_statements ps,
               LATERAL pg_catalog.unnest(ps.parameter_types::pg_catalog.oid[]) WITH ORDINALITY AS t(oid, n)
         WHERE ps.name OPERATOR(pg_catalog.=) base;
        EXECUTE pg_catalog.format('DEALLOCATE %I', base);
        EXECUTE pg_catalog.format('PREPARE %I%s AS %s', final,
            CASE WHEN nulls IS NULL THEN '' ELSE pg_catalog.format('(%s)', nulls) END, statement);
    END IF;
    -- At most 64 kept: the oldest go first, never one whose statement is running.
    FOR old IN
        SELECT ps.name FROM pg_catalog.pg_prepared_statements ps
         WHERE ps.name OPERATOR(pg_catalog.~) '^idempotency_eo_[0-9a-f]{32}(_n)?$'
           AND ps.name OPERATOR(pg_catalog.<>) final
           AND ps.name OPERATOR(pg_catalog.<>) ALL (coalesce(running, '{}'))
         ORDER BY ps.prepare_time DESC, ps.name
        OFFSET 63
    LOOP
        EXECUTE pg_catalog.format('DEALLOCATE %I', old);
        -- and execute_once's cached call of it (idempotency_managed.eo_<md5>) with it
        PERFORM pg_catalog.set_config(
            pg_catalog.concat('idempotency_managed.eo_', pg_catalog.substr(old, 16, 32)), '', false);
    END LOOP;
    RETURN final;
END
$$;

-- The claim execute_once made, completed with the statement's answer when it is still the
-- call's (processing, at `attempt`, within its lease): the record's recovery_point,
-- first_seen_at and expires_at, or all NULL when it is not (execute_once then reads the key
-- and says why). What complete's usual call does, answered in the same step, so that
-- execute_once needs no lookup around it. A role calling execute_once needs EXECUTE on it
-- (docs/managed.md); called by itself, it completes only what that usual call would.
CREATE FUNCTION idempotency._complete_claim(scope text, key text, attempt integer,
    status_code integer, response jsonb,
    OUT recovery_point text, OUT first_seen_at timestamptz, OUT expires_at timestamptz)
RETURNS record
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
AS $$
DECLARE
    now timestamptz;
BEGIN
    PERFORM pg_advisory_xact_lock(idempotency.key_lock_id(scope, key));
    now := clock_timestamp();
    UPDATE idempotency.keys k
       SET state = 'completed', status_code = _complete_claim.status_code,
           response = _complete_claim.response, completed_at = now, locked_until = NULL
     WHERE k.key = _complete_claim.key AND k.scope = _complete_claim.scope
       AND k.expires_at > now AND k.state = 'processing' AND k.locked_until >= now
       AND k.attempt = _complete_claim.attempt
       AND coalesce(pg_column_size(_complete_claim.response) <= 10485760, true)
    RETURNING k.recovery_point, k.first_seen_at, k.expires_at
      INTO recovery_point, first_seen_at, expires_at;
END
$$;

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
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY INVOKER
AS $$
DECLARE
    res idempotency.reservation;
    running pg_catalog.jsonb;
    running_before pg_catalog.text;
    base pg_catalog.text;
    cache_name pg_catalog.text;
    kept pg_catalog.text[];
    path pg_catalog.text;
    stmt_name pg_catalog.text;
    types pg_catalog.oid[];
    given integer;
    expected integer;
    result record;
    n bigint;
    stale boolean;
    tries integer := 0;
    j pg_catalog.jsonb;
    head pg_catalog.bytea;
    response pg_catalog.jsonb;
    claim record;
    done record;
    expires pg_catalog.timestamptz;
BEGIN
    -- The usual call (read-write, READ COMMITTED, names of 1 to 255 bytes, a statement, a
    -- status code in range) is told by one small expression; the full checks, in the
    -- extension's order, only when it fails.
    IF (pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'off'
        AND pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.=) 'read committed'
        AND pg_catalog.octet_length(scope) OPERATOR(pg_catalog.<=) 255
        AND pg_catalog.octet_length(scope) OPERATOR(pg_catalog.>) 0
        AND pg_catalog.octet_length(key) OPERATOR(pg_catalog.<=) 255
        AND pg_catalog.octet_length(key) OPERATOR(pg_catalog.>) 0
        AND statement IS NOT NULL
        AND status_code OPERATOR(pg_catalog.>=) 100 AND status_code OPERATOR(pg_catalog.<=) 599) IS NOT TRUE THEN
        IF pg_catalog.current_setting('transaction_read_only')::pg_catalog.bool THEN
            RAISE EXCEPTION 'cannot execute idempotency.execute_once() in a read-only transaction'
                USING ERRCODE = '25006';
        END IF;
        IF pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed' THEN
            RAISE EXCEPTION 'idempotency.execute_once() of the managed edition needs a READ COMMITTED transaction'
                USING ERRCODE = '0A000',
                DETAIL = 'It cannot read the key past this transaction''s snapshot.',
                HINT = 'Call it in a READ COMMITTED transaction (the default), or use the extension.';
        END IF;
        PERFORM idempotency._check_name('scope', scope);
        PERFORM idempotency._check_name('key', key);
        IF statement IS NULL THEN
            RAISE EXCEPTION 'statement must not be null' USING ERRCODE = '22004';
        END IF;
        IF status_code IS NULL THEN
            RAISE EXCEPTION 'status_code must not be null' USING ERRCODE = '22004';
        ELSIF status_code OPERATOR(pg_catalog.<) 100 OR status_code OPERATOR(pg_catalog.>) 599 THEN
            RAISE EXCEPTION 'status code % is out of range (100 to 599)', status_code
                USING ERRCODE = '22023';
        END IF;
    END IF;
    -- The keys whose statement runs in this session, with their statements' names: a
    -- statement that calls execute_once for its own key is refused (its answer is not known
    -- yet). Kept in a transaction-local setting, undone with a rolled-back subtransaction.
    running_before := pg_catalog.current_setting('idempotency_managed.running', true);
    IF running_before OPERATOR(pg_catalog.<>) '' THEN
        running := running_before::pg_catalog.jsonb;
        IF running OPERATOR(pg_catalog.@>) pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object('scope', scope, 'key', key)) THEN
            RAISE EXCEPTION 'idempotency.execute_once was called for a key by its own statement'
                USING ERRCODE = '55006',
                DETAIL = 'The key''s statement is running: its answer is not known yet.',
                HINT = 'Call execute_once for another key, or do the work in the statement.';
        END IF;
    ELSE
        running := '[]';
    END IF;

    res := idempotency.reserve(scope, key, request_hash, lock_ttl, retention, wait);
    IF res.outcome OPERATOR(pg_catalog.<>) 'new' THEN
        RETURN res;
    END IF;

    -- The statement's kept call, as this session prepared it: its name, its parameter count
    -- and the EXECUTE that runs it, cached in a session setting named after the text's md5
    -- (idempotency_managed.eo_<md5>), so that the usual call searches no catalog. Missing
    -- (a new text, a new session, a DISCARD ALL) or stale (the statement deallocated or its
    -- result columns changed: the EXECUTE fails, below), the statement is looked up in
    -- pg_prepared_statements, prepared when absent, and cached again.
    kept := NULLIF(pg_catalog.current_setting(
        pg_catalog.concat('idempotency_managed.eo_', pg_catalog.md5(statement)), true), '')::pg_catalog.text[];
    LOOP
        tries := tries OPERATOR(pg_catalog.+) 1;
        IF kept IS NULL THEN
            base := pg_catalog.md5(statement);
            cache_name := pg_catalog.concat('idempotency_managed.eo_', base);
            base := pg_catalog.concat('idempotency_eo_', base);
            stmt_name := NULL;
            SELECT ps.name, ps.parameter_types::pg_catalog.oid[] INTO stmt_name, types
              FROM pg_catalog.pg_prepared_statements ps
             WHERE (ps.name OPERATOR(pg_catalog.=) base
                    OR ps.name OPERATOR(pg_catalog.=) pg_catalog.concat(base, '_n'))
               AND pg_catalog.right(ps.statement, pg_catalog.length(execute_once.statement) OPERATOR(pg_catalog.+) 4)
                   OPERATOR(pg_catalog.=) pg_catalog.concat(' AS ', execute_once.statement);
            IF stmt_name IS NULL THEN
                FOR stmt_name IN
                    SELECT ps.name FROM pg_catalog.pg_prepared_statements ps
                     WHERE ps.name OPERATOR(pg_catalog.=) base
                        OR ps.name OPERATOR(pg_catalog.=) pg_catalog.concat(base, '_n')
                LOOP
                    EXECUTE pg_catalog.format('DEALLOCATE %I', stmt_name);
                END LOOP;
                stmt_name := idempotency._statement_prepare(statement, base,
                    ARRAY(SELECT e OPERATOR(pg_catalog.->>) 'name' FROM pg_catalog.jsonb_array_elements(running) e));
                SELECT ps.parameter_types::pg_catalog.oid[] INTO types
                  FROM pg_catalog.pg_prepared_statements ps WHERE ps.name OPERATOR(pg_catalog.=) stmt_name;
            END IF;
            -- Each parameter read back from the setting and cast to its parameter's type,
            -- named as under a search_path of pg_catalog alone (another schema's type with
            -- its schema), so that the cached call reads the same under any later path.
            path := pg_catalog.current_setting('search_path');
            PERFORM pg_catalog.set_config('search_path', 'pg_catalog', true);
            kept := ARRAY[coalesce(pg_catalog.cardinality(types), 0)::pg_catalog.text, stmt_name,
                pg_catalog.concat('EXECUTE ', pg_catalog.quote_ident(stmt_name),
                    (SELECT pg_catalog.concat('(', pg_catalog.string_agg(pg_catalog.format(
                                '(pg_catalog.current_setting(%L)::pg_catalog.text[])[%s]::%s',
                                'idempotency_managed.params', t.n, pg_catalog.format_type(t.oid, NULL)),
                                ', ' ORDER BY t.n), ')')
                       FROM pg_catalog.unnest(types) WITH ORDINALITY AS t(oid, n)
                      HAVING pg_catalog.count(*) OPERATOR(pg_catalog.>) 0))];
            PERFORM pg_catalog.set_config('search_path', path, true);
            PERFORM pg_catalog.set_config(cache_name, kept::pg_catalog.text, false);
        END IF;
        stmt_name := kept[2];
        expected := kept[1]::integer;
        -- The parameters: a one-dimensional array (NULL: none), as many values as the statement
        -- has parameters, each cast from text to its parameter's type; NULL is NULL. They reach
        -- the statement in one transaction-local setting, the array's text form, read back by
        -- the EXECUTE (the statement's kept call below).
        IF params IS NOT NULL AND (pg_catalog.array_ndims(params) OPERATOR(pg_catalog.>) 1
                                   OR pg_catalog.array_lower(params, 1) OPERATOR(pg_catalog.<>) 1) THEN
            IF pg_catalog.array_ndims(params) OPERATOR(pg_catalog.>) 1 THEN
                RAISE EXCEPTION 'params must be a one-dimensional array' USING ERRCODE = '2202E';
            END IF;
            params := ARRAY(SELECT p FROM pg_catalog.unnest(params) WITH ORDINALITY AS u(p, i) ORDER BY i);
        END IF;
        given := coalesce(pg_catalog.cardinality(params), 0);
        PERFORM pg_catalog.set_config('idempotency_managed.params', coalesce(params::pg_catalog.text, '{}'), true);
        IF given OPERATOR(pg_catalog.<>) expected THEN
            RAISE EXCEPTION 'the statement takes % parameter%, % given', expected,
                CASE WHEN expected OPERATOR(pg_catalog.=) 1 THEN '' ELSE 's' END, given
                USING ERRCODE = '22023';
        END IF;

        PERFORM pg_catalog.set_config('idempotency_managed.running',
            (running OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_array(
                pg_catalog.jsonb_build_object('scope', scope, 'key', key, 'name', stmt_name)))::pg_catalog.text,
            true);
        n := 0;
        stale := false;
        -- A kept statement whose result columns changed with DDL fails before it runs
        -- ("cached plan must not change result type", 0A000), and one the application
        -- deallocated (26000) too: prepared again, it runs once more, and a second failure is
        -- the statement's own.
        BEGIN
            IF pg_catalog.right(stmt_name, 2) OPERATOR(pg_catalog.=) '_n' THEN
                EXECUTE kept[3];
            ELSE
                EXECUTE kept[3] INTO result;
                GET DIAGNOSTICS n = ROW_COUNT;
            END IF;
        EXCEPTION WHEN feature_not_supported OR invalid_sql_statement_name THEN
            IF tries OPERATOR(pg_catalog.>) 1 THEN
                RAISE;
            END IF;
            stale := true;
        END;
        PERFORM pg_catalog.set_config('idempotency_managed.running', coalesce(running_before, ''), true);
        EXIT WHEN NOT stale;
        PERFORM pg_catalog.set_config(
            pg_catalog.concat('idempotency_managed.eo_', pg_catalog.md5(statement)), '', false);
        kept := NULL;
        IF EXISTS (SELECT FROM pg_catalog.pg_prepared_statements ps
                    WHERE ps.name OPERATOR(pg_catalog.=) stmt_name) THEN
            EXECUTE pg_catalog.format('DEALLOCATE %I', stmt_name);
        END IF;
    END LOOP;

    -- The response (the extension's rules): no row NULL; more than one refused; one row of
    -- one json or jsonb column that value (NULL stays NULL); one row otherwise the row as an
    -- object. A row of one key is read from its binary form (record_send: column count, then
    -- each column's type oid and length) for its column count and the column's type.
    IF n OPERATOR(pg_catalog.>) 1 THEN
        RAISE EXCEPTION 'the statement of idempotency.execute_once returned more than one row'
            USING ERRCODE = '21000',
            DETAIL = 'The response is one row, one json or jsonb value, or NULL.',
            HINT = 'Aggregate the rows into one value (jsonb_agg), or return one row.';
    ELSIF n OPERATOR(pg_catalog.=) 1 THEN
        j := pg_catalog.to_jsonb(result);
        IF j OPERATOR(pg_catalog.=) '{}'::pg_catalog.jsonb THEN
            response := NULL;
        ELSIF (j OPERATOR(pg_catalog.-) (pg_catalog.jsonb_path_query_first(j, '$.keyvalue()')
                                          OPERATOR(pg_catalog.->>) 'key'))
              OPERATOR(pg_catalog.<>) '{}'::pg_catalog.jsonb THEN
            response := j;
        ELSE
            head := pg_catalog.substr(pg_catalog.record_send(result), 1, 8);
            IF pg_catalog.get_byte(head, 3) OPERATOR(pg_catalog.=) 1
               AND pg_catalog.get_byte(head, 0) OPERATOR(pg_catalog.=) 0
               AND pg_catalog.get_byte(head, 1) OPERATOR(pg_catalog.=) 0
               AND pg_catalog.get_byte(head, 2) OPERATOR(pg_catalog.=) 0
               -- json (oid 114) or jsonb (oid 3802)
               AND pg_catalog.encode(pg_catalog.substr(head, 5, 4), 'hex') OPERATOR(pg_catalog.=) ANY ('{00000072,00000eda}') THEN
                IF result IS NULL THEN
                    response := NULL;
                ELSE
                    response := pg_catalog.jsonb_path_query_first(j, '$.*');
                END IF;
            ELSE
                response := j;
            END IF;
        END IF;
        IF pg_catalog.pg_column_size(response) OPERATOR(pg_catalog.>) 10485760 THEN
            RAISE EXCEPTION 'the result of the statement of idempotency.execute_once is too large'
                USING ERRCODE = '54000',
                DETAIL = pg_catalog.format('It takes %s bytes as jsonb; the limit is 10485760 bytes.',
                                           pg_catalog.pg_column_size(response));
        END IF;
    END IF;

    -- Completed in one step when the claim is still this call's (the usual case).
    done := idempotency._complete_claim(scope, key, res.attempt, status_code, response);
    IF done.expires_at IS NOT NULL THEN
        RETURN ROW('new', status_code, response, res.attempt, done.recovery_point,
                   done.first_seen_at, NULL, done.expires_at)::idempotency.reservation;
    END IF;
    -- Otherwise the claim must be this call's still: the statement must not have completed,
    -- failed or forgotten its own key; a claim whose lease lapsed meanwhile is completed
    -- late, as complete does.
    SELECT l.attempt, l.state, l.recovery_point, l.first_seen_at, l.locked_until, l.expires_at
      INTO claim FROM idempotency.lookup(scope, key) l;
    IF claim.state IS NULL OR claim.state OPERATOR(pg_catalog.<>) 'processing'
       OR claim.attempt OPERATOR(pg_catalog.<>) res.attempt THEN
        RAISE EXCEPTION 'the statement of idempotency.execute_once changed its own key'
            USING ERRCODE = '55000',
            DETAIL = 'The key''s claim was completed, failed or forgotten while the statement ran.',
            HINT = 'The statement must not call complete, fail or forget on its own key.';
    END IF;
    PERFORM idempotency.complete(scope, key, status_code, response, res.attempt);
    -- complete moves expires_at only when it comes after the lease.
    expires := claim.expires_at;
    IF claim.locked_until IS NULL OR pg_catalog.clock_timestamp() OPERATOR(pg_catalog.>) claim.locked_until THEN
        SELECT l.expires_at INTO expires FROM idempotency.lookup(scope, key) l;
    END IF;
    RETURN ROW('new', status_code, response, claim.attempt, claim.recovery_point,
               claim.first_seen_at, NULL, expires)::idempotency.reservation;
END
$$;

-- Like reserve: only roles granted EXECUTE (docs/operations.md, "Roles and privileges"); the
-- statement's preparation runs as the caller and touches nothing of the edition's.
REVOKE ALL ON FUNCTION
    idempotency.execute_once(text, text, bytea, text, text[], integer, interval, interval, interval),
    idempotency._complete_claim(text, text, integer, integer, jsonb)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION idempotency._statement_prepare(text, text, text[]),
    idempotency._statement_count(text), idempotency._one_statement(text) TO PUBLIC;

-- ---- src/streams.sql
-- === monotonic keys and consumer watermarks ===

-- The extension's tables, shape for shape. A stream's keys come from a sequence of its own
-- (idempotency.next_key_<md5 of the stream>): nextval is monotonic across sessions, never
-- repeats, and is not undone by a rollback, as the extension's next_key. reserved_up_to
-- stays at the bound create_stream or set_stream_floor gave; stream_positions() reads the
-- sequence.
CREATE TABLE idempotency.streams (
    stream text COLLATE "C" PRIMARY KEY,
    block integer NOT NULL CHECK (block > 0),
    reserved_up_to bigint NOT NULL DEFAULT 0 CHECK (reserved_up_to >= 0)
);

CREATE TABLE idempotency.consumer_positions (
    consumer text COLLATE "C" NOT NULL,
    partition text COLLATE "C" NOT NULL,
    position uuid NOT NULL,
    moved_at timestamptz,
    PRIMARY KEY (consumer, partition)
) WITH (fillfactor = 70);

REVOKE ALL ON idempotency.streams, idempotency.consumer_positions FROM PUBLIC;

-- As in the extension, the rows of streams change only through create_stream, drop_stream
-- and set_stream_floor.
CREATE FUNCTION idempotency.streams_refuse_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'rows of idempotency.streams cannot be updated'
        USING ERRCODE = '55000',
              HINT = 'next_key overwrites them in place; use create_stream and drop_stream.';
END
$$;

CREATE TRIGGER streams_refuse_update BEFORE UPDATE ON idempotency.streams
    FOR EACH ROW EXECUTE FUNCTION idempotency.streams_refuse_update();

-- Installed as an extension (pg_tle), pg_dump keeps the bounds, the watermarks and the keys
-- of the default partition, as it does for the extension's.
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'idempotency') THEN
        PERFORM pg_catalog.pg_extension_config_dump('idempotency.streams', '');
        PERFORM pg_catalog.pg_extension_config_dump('idempotency.consumer_positions', '');
        PERFORM pg_catalog.pg_extension_config_dump('idempotency.keys_default', '');
    END IF;
END
$$;

CREATE FUNCTION idempotency._stream_sequence(stream text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT 'idempotency.' OPERATOR(pg_catalog.||) pg_catalog.quote_ident(
                 'next_key_' OPERATOR(pg_catalog.||) pg_catalog.md5(stream)) $$;

CREATE FUNCTION idempotency._check_stream(call text, stream text)
RETURNS text
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF current_setting('transaction_read_only')::boolean THEN
        RAISE EXCEPTION 'cannot execute % in a read-only transaction', call USING ERRCODE = '25006';
    END IF;
    PERFORM idempotency._check_name('stream', stream);
    RETURN idempotency._stream_sequence(stream);
END
$$;

CREATE FUNCTION idempotency.create_stream(stream text, block integer DEFAULT 1000)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    seq text := idempotency._check_stream('idempotency.create_stream()', stream);
BEGIN
    IF block IS NULL THEN
        RAISE EXCEPTION 'block must not be null' USING ERRCODE = '22004';
    ELSIF block < 1 THEN
        RAISE EXCEPTION 'block must be between 1 and 2147483647, not %', block
            USING ERRCODE = '22023';
    END IF;
    INSERT INTO idempotency.streams AS s (stream, block) VALUES (create_stream.stream, block)
        ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'stream "%" already exists', stream USING ERRCODE = '42710';
    END IF;
    EXECUTE format('CREATE SEQUENCE %s AS bigint MINVALUE 1 NO CYCLE', seq);
END
$$;

CREATE FUNCTION idempotency.drop_stream(stream text)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    seq text := idempotency._check_stream('idempotency.drop_stream()', stream);
BEGIN
    DELETE FROM idempotency.streams s WHERE s.stream = drop_stream.stream;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'stream "%" does not exist', stream USING ERRCODE = '42704';
    END IF;
    EXECUTE format('DROP SEQUENCE IF EXISTS %s', seq);
END
$$;

CREATE FUNCTION idempotency.next_key(stream text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    seq text := idempotency._check_stream('next_key()', stream);
BEGIN
    RETURN nextval(seq::regclass);
EXCEPTION
    WHEN undefined_table THEN
        RAISE EXCEPTION 'stream "%" does not exist', stream USING ERRCODE = '42704';
    WHEN sequence_generator_limit_exceeded THEN
        RAISE EXCEPTION 'stream "%" has reached its maximum value', stream USING ERRCODE = '2200H';
END
$$;

CREATE FUNCTION idempotency.stream_positions()
RETURNS TABLE (stream text, block integer, reserved_up_to bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s record;
    last bigint;
BEGIN
    FOR s IN SELECT * FROM idempotency.streams ORDER BY 1 LOOP
        EXECUTE format('SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END FROM %s',
                       idempotency._stream_sequence(s.stream)) INTO last;
        stream := s.stream;
        block := s.block;
        reserved_up_to := greatest(s.reserved_up_to, last);
        RETURN NEXT;
    END LOOP;
END
$$;

CREATE FUNCTION idempotency.set_stream_floor(stream text, floor bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    seq text := idempotency._check_stream('idempotency.set_stream_floor()', stream);
    last bigint;
BEGIN
    IF floor IS NULL THEN
        RAISE EXCEPTION 'floor must not be null' USING ERRCODE = '22004';
    ELSIF floor < 0 THEN
        RAISE EXCEPTION 'floor must not be negative' USING ERRCODE = '22023',
            DETAIL = format('The floor was %s.', floor);
    END IF;
    PERFORM FROM idempotency.streams s WHERE s.stream = set_stream_floor.stream FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'stream "%" does not exist', stream USING ERRCODE = '42704';
    END IF;
    EXECUTE format('SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END FROM %s',
                   seq) INTO last;
    IF floor > last THEN
        PERFORM setval(seq::regclass, floor, true);
        last := floor;
    END IF;
    RETURN last;
END
$$;

-- A bigint position as the 128-bit big-endian uuid the watermark is stored as.
CREATE FUNCTION idempotency._position(p bigint)
RETURNS uuid
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
    IF p IS NULL THEN
        RAISE EXCEPTION 'position must not be null' USING ERRCODE = '22004';
    ELSIF p < 0 THEN
        RAISE EXCEPTION 'position must not be negative, not %', p USING ERRCODE = '22023';
    END IF;
    RETURN ('0000000000000000' || lpad(to_hex(p), 16, '0'))::uuid;
END
$$;

CREATE FUNCTION idempotency.position_numeric("position" uuid)
RETURNS numeric
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT (CASE WHEN h.hi < 0 THEN h.hi::numeric + 18446744073709551616 ELSE h.hi END)
           * 18446744073709551616
           + (CASE WHEN h.lo < 0 THEN h.lo::numeric + 18446744073709551616 ELSE h.lo END)
    FROM (SELECT ('x' || substr(x.hex, 1, 16))::bit(64)::bigint AS hi,
                 ('x' || substr(x.hex, 17, 16))::bit(64)::bigint AS lo
          FROM (SELECT replace("position"::text, '-', '') AS hex) x) h
$$;

CREATE FUNCTION idempotency._accept(call text, p_consumer text, p_partition text, p uuid)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF current_setting('transaction_read_only')::boolean THEN
        RAISE EXCEPTION 'cannot execute % in a read-only transaction', call USING ERRCODE = '25006';
    END IF;
    UPDATE idempotency.consumer_positions w SET position = p, moved_at = now()
     WHERE w.consumer = p_consumer AND w.partition = p_partition AND w.position < p;
    IF FOUND THEN
        RETURN true;
    END IF;
    INSERT INTO idempotency.consumer_positions AS w (consumer, partition, position, moved_at)
    VALUES (p_consumer, p_partition, p, now())
    ON CONFLICT (consumer, partition) DO UPDATE
        SET position = EXCLUDED.position, moved_at = EXCLUDED.moved_at
        WHERE w.position < EXCLUDED.position;
    RETURN FOUND;
END
$$;

CREATE FUNCTION idempotency.accept(consumer text, partition text, "position" bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM idempotency._check_name('consumer', consumer);
    PERFORM idempotency._check_name('partition', partition);
    RETURN idempotency._accept('idempotency.accept()', consumer, partition,
                               idempotency._position("position"));
END
$$;

CREATE FUNCTION idempotency.accept(consumer text, partition text, "position" uuid)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM idempotency._check_name('consumer', consumer);
    PERFORM idempotency._check_name('partition', partition);
    IF "position" IS NULL THEN
        RAISE EXCEPTION 'position must not be null' USING ERRCODE = '22004';
    END IF;
    RETURN idempotency._accept('idempotency.accept()', consumer, partition, "position");
END
$$;

CREATE FUNCTION idempotency.watermark(consumer text, partition text)
RETURNS numeric
LANGUAGE plpgsql STABLE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM idempotency._check_name('consumer', consumer);
    PERFORM idempotency._check_name('partition', partition);
    RETURN (SELECT idempotency.position_numeric(w.position) FROM idempotency.consumer_positions w
            WHERE w.consumer = watermark.consumer AND w.partition = watermark.partition);
END
$$;

CREATE FUNCTION idempotency._set_watermark(p_consumer text, p_partition text, p uuid)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM idempotency._check_name('consumer', p_consumer);
    PERFORM idempotency._check_name('partition', p_partition);
    IF p IS NULL THEN
        RAISE EXCEPTION 'position must not be null' USING ERRCODE = '22004';
    END IF;
    IF current_setting('transaction_read_only')::boolean THEN
        RAISE EXCEPTION 'cannot execute idempotency.set_watermark() in a read-only transaction'
            USING ERRCODE = '25006';
    END IF;
    PERFORM FROM idempotency.consumer_positions w WHERE w.consumer = p_consumer
        LIMIT 1 FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'consumer "%" does not exist', p_consumer USING ERRCODE = '42704',
            DETAIL = 'It has no watermark in any partition.',
            HINT = 'A consumer comes into being with its first accept.';
    END IF;
    INSERT INTO idempotency.consumer_positions AS w (consumer, partition, position, moved_at)
    VALUES (p_consumer, p_partition, p, now())
    ON CONFLICT (consumer, partition) DO UPDATE
        SET position = EXCLUDED.position, moved_at = EXCLUDED.moved_at;
END
$$;

CREATE FUNCTION idempotency.set_watermark(consumer text, partition text, "position" bigint)
RETURNS void
LANGUAGE sql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ SELECT idempotency._set_watermark(consumer, partition, idempotency._position("position")) $$;

CREATE FUNCTION idempotency.set_watermark(consumer text, partition text, "position" uuid)
RETURNS void
LANGUAGE sql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ SELECT idempotency._set_watermark(consumer, partition, "position") $$;

CREATE FUNCTION idempotency.drop_consumer(consumer text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    dropped bigint;
BEGIN
    PERFORM idempotency._check_name('consumer', consumer);
    IF current_setting('transaction_read_only')::boolean THEN
        RAISE EXCEPTION 'cannot execute idempotency.drop_consumer() in a read-only transaction'
            USING ERRCODE = '25006';
    END IF;
    DELETE FROM idempotency.consumer_positions w WHERE w.consumer = drop_consumer.consumer;
    GET DIAGNOSTICS dropped = ROW_COUNT;
    IF dropped = 0 THEN
        RAISE EXCEPTION 'consumer "%" does not exist', consumer USING ERRCODE = '42704',
            DETAIL = 'It has no watermark in any partition.',
            HINT = 'A consumer comes into being with its first accept.';
    END IF;
    RETURN dropped;
END
$$;

CREATE VIEW idempotency.watermarks AS
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

REVOKE ALL ON idempotency.watermarks FROM PUBLIC;
REVOKE ALL ON FUNCTION
    idempotency.create_stream(text, integer),
    idempotency.drop_stream(text),
    idempotency.next_key(text),
    idempotency.stream_positions(),
    idempotency.set_stream_floor(text, bigint),
    idempotency.accept(text, text, bigint),
    idempotency.accept(text, text, uuid),
    idempotency.watermark(text, text),
    idempotency.set_watermark(text, text, bigint),
    idempotency.set_watermark(text, text, uuid),
    idempotency.drop_consumer(text),
    idempotency._stream_sequence(text),
    idempotency._check_stream(text, text),
    idempotency._position(bigint),
    idempotency._accept(text, text, text, uuid),
    idempotency._set_watermark(text, text, uuid)
FROM PUBLIC;

-- ---- src/views.sql
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

-- ---- src/maintenance.sql
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
