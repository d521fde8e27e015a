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
