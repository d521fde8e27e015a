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
