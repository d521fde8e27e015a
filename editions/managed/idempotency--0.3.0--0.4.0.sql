-- idempotency managed edition 0.3.0 -> 0.4.0. Run once on a database at 0.3.0, by the role
-- that installed the edition: through pg_tle (update_pg_tle.sql registers it with
-- pgtle.install_update_path, then ALTER EXTENSION idempotency UPDATE), or with
-- psql -1 -f on a database where the 0.3.0 script was run. A database updated either way ends
-- with the objects of a new install of 0.4.0 (the managed suite compares them). No psql
-- command here: pg_tle runs the text as it is.

COMMENT ON SCHEMA idempotency IS 'idempotency managed edition 0.4.0';

-- === execute_once reads no server message ===
-- One statement is told from several by the server's parser and a count of the statement's
-- own tokens, and parameters are typed by declaring them, not by reading the wording of an
-- error (SQLERRM follows lc_messages).
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
CREATE OR REPLACE FUNCTION idempotency._statement_prepare(statement text, base text, running text[])
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

GRANT EXECUTE ON FUNCTION idempotency._statement_count(text), idempotency._one_statement(text)
TO PUBLIC;

-- === maintain() does not keep key calls queued behind its lock request ===
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

REVOKE ALL ON FUNCTION idempotency._lock_keys_exclusively(bigint) FROM PUBLIC;

-- === partitions from the install on ===
-- maintain() moves the rows of a new partition's range without a temporary table (one made
-- while pg_tle updates the extension would become the extension's).
CREATE OR REPLACE FUNCTION idempotency.maintain()
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

-- === reserve and complete: the usual call told by one small expression ===
-- The full argument checks (large expressions, set up again in every transaction) run only
-- when it fails; reserve answers a new key or a replay itself, without nested calls.
-- An interval in microseconds as _interval_usecs counts it (a month of 30 days), unchecked:
-- for a value known to be in range (reserve's usual call).
CREATE FUNCTION idempotency._usecs(value interval)
RETURNS bigint
LANGUAGE sql IMMUTABLE
AS $$
    SELECT (extract(epoch FROM value) * 1000000 - extract(year FROM value) * 453600000000)::bigint
$$;

REVOKE ALL ON FUNCTION idempotency._usecs(interval) FROM PUBLIC;

CREATE OR REPLACE FUNCTION idempotency.reserve(
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

CREATE OR REPLACE FUNCTION idempotency.complete(
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

-- === execute_once: the usual call searches no catalog and completes in one step ===
-- The kept statement's call is cached per session (idempotency_managed.eo_<md5>), the values
-- reach it in one setting (idempotency_managed.params), and the claim is completed by
-- _complete_claim, which answers the record in the same step (no lookup around complete).

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

REVOKE ALL ON FUNCTION idempotency._complete_claim(text, text, integer, integer, jsonb) FROM PUBLIC;
-- Every role that may call execute_once may call the step it completes through.
DO $$
DECLARE
    grantee regrole;
BEGIN
    FOR grantee IN
        SELECT DISTINCT a.grantee::regrole
          FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
         WHERE p.oid = 'idempotency.execute_once(text, text, bytea, text, text[], integer, interval, interval, interval)'::regprocedure
           AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner
    LOOP
        EXECUTE pg_catalog.format(
            'GRANT EXECUTE ON FUNCTION idempotency._complete_claim(text, text, integer, integer, jsonb) TO %s',
            grantee);
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION idempotency.execute_once(
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
