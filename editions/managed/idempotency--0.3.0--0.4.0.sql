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
    END LOOP;
    RETURN final;
END
$$;

GRANT EXECUTE ON FUNCTION idempotency._statement_count(text), idempotency._one_statement(text)
TO PUBLIC;
