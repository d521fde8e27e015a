-- execute_once in the managed edition: what differs from the extension (docs/managed.md) and
-- what its PL/pgSQL has to get right on its own.
\set VERBOSITY terse
\i sql/include/try.sql
CREATE TABLE meo_orders (id bigserial PRIMARY KEY, account text NOT NULL, amount integer NOT NULL);

-- 1. It claims and completes through reserve, _complete_claim, lookup and complete: a role
-- needs EXECUTE on them too (the grant block of docs/managed.md has it). The statement runs
-- as the caller: a table it may not write is 42501, and nothing is claimed.
CREATE ROLE regress_idem_meo_app NOLOGIN;
GRANT USAGE ON SCHEMA idempotency TO regress_idem_meo_app;
GRANT EXECUTE ON FUNCTION
    idempotency.execute_once(text, text, bytea, text, text[], integer, interval, interval, interval)
TO regress_idem_meo_app;
GRANT SELECT ON meo_orders TO regress_idem_meo_app;
SET ROLE regress_idem_meo_app;
SELECT pg_temp.try($$SELECT idempotency.execute_once('meo', 'only-eo', NULL, 'SELECT 1')$$);
RESET ROLE;
GRANT EXECUTE ON FUNCTION
    idempotency.reserve(text, text, bytea, interval, interval, interval),
    idempotency.complete(text, text, integer, jsonb, integer),
    idempotency.lookup(text, text)
TO regress_idem_meo_app;
SET ROLE regress_idem_meo_app;
SELECT pg_temp.try($$SELECT idempotency.execute_once('meo', 'no-complete-claim', NULL, 'SELECT 1')$$);
RESET ROLE;
GRANT EXECUTE ON FUNCTION idempotency._complete_claim(text, text, integer, integer, jsonb)
TO regress_idem_meo_app;
SET ROLE regress_idem_meo_app;
SELECT pg_temp.try($$SELECT idempotency.execute_once('meo', 'priv-1', NULL,
       'INSERT INTO meo_orders (account, amount) VALUES ($1, 1)', ARRAY['priv'])$$);
SELECT count(*) AS claimed FROM idempotency.lookup('meo', 'priv-1');
SELECT outcome, response FROM idempotency.execute_once('meo', 'priv-2', NULL,
       'SELECT current_user AS who, count(*) AS orders FROM meo_orders WHERE account = $1',
       ARRAY['priv']);
SELECT pg_temp.try($$SELECT count(*) FROM idempotency.keys$$);
RESET ROLE;
REVOKE ALL ON meo_orders FROM regress_idem_meo_app;
REVOKE ALL ON SCHEMA idempotency FROM regress_idem_meo_app;
REVOKE ALL ON FUNCTION
    idempotency.execute_once(text, text, bytea, text, text[], integer, interval, interval, interval),
    idempotency.reserve(text, text, bytea, interval, interval, interval),
    idempotency.complete(text, text, integer, jsonb, integer),
    idempotency.lookup(text, text),
    idempotency._complete_claim(text, text, integer, integer, jsonb)
FROM regress_idem_meo_app;
DROP ROLE regress_idem_meo_app;

-- 2. The function runs under the caller's search_path and names everything it uses with
-- its schema: look-alikes of the functions it calls, first in the path, change nothing.
CREATE SCHEMA meo_evil;
CREATE FUNCTION meo_evil.format(text, text) RETURNS text LANGUAGE sql AS $$SELECT 'SELECT 666'$$;
CREATE FUNCTION meo_evil.format(text, text, text) RETURNS text LANGUAGE sql AS $$SELECT 'SELECT 666'$$;
CREATE FUNCTION meo_evil.concat(text, text) RETURNS text LANGUAGE sql AS $$SELECT 'x'$$;
CREATE FUNCTION meo_evil.md5(text) RETURNS text LANGUAGE sql AS $$SELECT 'x'$$;
CREATE FUNCTION meo_evil.current_setting(text) RETURNS text LANGUAGE sql AS $$SELECT '666'$$;
SET search_path = meo_evil, pg_catalog, public;
SELECT outcome, response FROM idempotency.execute_once('meo', 'path-1', NULL,
       'INSERT INTO meo_orders (account, amount) VALUES ($1, $2) RETURNING account, amount',
       ARRAY['path', '7']);
RESET search_path;
DROP SCHEMA meo_evil CASCADE;
-- A parameter whose type lives in another schema keeps it when the search_path changes
-- between calls of the same text (the cached call names it with its schema).
CREATE SCHEMA meo_types;
CREATE DOMAIN meo_types.amount AS integer CHECK (VALUE > 0);
CREATE TABLE meo_types.payments (amount meo_types.amount NOT NULL);
SET search_path = meo_types, public;
SELECT outcome, response FROM idempotency.execute_once('meo', 'typed-1', NULL,
       'INSERT INTO meo_types.payments (amount) VALUES ($1) RETURNING amount', ARRAY['5']);
RESET search_path;
SELECT outcome, response FROM idempotency.execute_once('meo', 'typed-2', NULL,
       'INSERT INTO meo_types.payments (amount) VALUES ($1) RETURNING amount', ARRAY['6']);
DROP SCHEMA meo_types CASCADE;

-- 3. A statement text is prepared once per session, under a name of its own; the edition
-- keeps at most 64, and deallocates nothing of the application's.
PREPARE meo_own AS SELECT 1;
DO $$
BEGIN
    FOR i IN 1..70 LOOP
        PERFORM idempotency.execute_once('meo', 'cache-' || i, NULL, 'SELECT ' || i || ' AS n');
    END LOOP;
END $$;
SELECT count(*) FILTER (WHERE name ~ '^idempotency_eo_') AS kept,
       count(*) FILTER (WHERE name = 'meo_own') AS own
  FROM pg_prepared_statements;
SELECT outcome, response FROM idempotency.execute_once('meo', 'cache-again', NULL, 'SELECT 70 AS n');
SELECT count(*) AS prepared_once FROM pg_prepared_statements WHERE statement LIKE '%AS SELECT 70 AS n';
-- A statement that returns no rows is kept under a name that says so.
SELECT outcome, response FROM idempotency.execute_once('meo', 'no-rows', NULL,
       'INSERT INTO meo_orders (account, amount) VALUES ($1, 2)', ARRAY['none']);
SELECT name ~ '^idempotency_eo_[0-9a-f]{32}_n$' AS named_no_rows, parameter_types
  FROM pg_prepared_statements WHERE statement LIKE '%VALUES ($1, 2)';
-- The call of a kept statement is cached for the session (the usual call searches no
-- catalog). DEALLOCATE ALL by the application (or a pooler's DISCARD ALL, which also clears
-- the cache): prepared again, the cached call too.
SELECT outcome, response FROM idempotency.execute_once('meo', 'before-deallocate', NULL,
       'SELECT $1::int * 2 AS n', ARRAY['20']);
SELECT current_setting('idempotency_managed.eo_' || md5('SELECT $1::int * 2 AS n'), true) ~ '^[{]1,idempotency_eo_'
       AS call_cached;
DEALLOCATE ALL;
SELECT outcome, response FROM idempotency.execute_once('meo', 'after-deallocate', NULL,
       'SELECT $1::int * 2 AS n', ARRAY['21']);
SELECT count(*) AS prepared_again FROM pg_prepared_statements WHERE statement LIKE '%AS SELECT $1::int * 2 AS n';
-- The values were handed over in a transaction-local setting: nothing is left after the
-- transaction.
SELECT current_setting('idempotency_managed.params', true) IS NOT DISTINCT FROM ''
       OR current_setting('idempotency_managed.params', true) IS NULL AS no_value_left;

-- 4. Several statements are refused before any runs; the statement's writes and the claim
-- roll back together with its error.
SELECT pg_temp.try($$SELECT idempotency.execute_once('meo', 'two', NULL,
       'INSERT INTO meo_orders (account, amount) VALUES (''two'', 1); DELETE FROM meo_orders')$$);
SELECT count(*) AS orders_kept FROM meo_orders;
SELECT pg_temp.try($$SELECT idempotency.execute_once('meo', 'two-b', NULL, 'SELECT 1;; SELECT 2')$$);
-- One statement with a trailing semicolon, a semicolon in a string and in a comment is one.
SELECT outcome, response FROM idempotency.execute_once('meo', 'one-semi', NULL,
       'SELECT '';'' AS s -- ; not a second statement
        ;');
-- PREPARE TRANSACTION is transaction control; other utility commands are not run.
SELECT pg_temp.try($$SELECT idempotency.execute_once('meo', 'pt', NULL, 'PREPARE TRANSACTION ''x''')$$);
SELECT pg_temp.try($$SELECT idempotency.execute_once('meo', 'vac', NULL, 'VACUUM meo_orders')$$);
SELECT pg_temp.try($$SELECT idempotency.execute_once('meo', 'sel-into', NULL,
       'WITH x AS (SELECT 1 AS a) SELECT a INTO meo_made FROM x')$$);
-- After a WITH, an INSERT without RETURNING runs (and answers NULL).
SELECT outcome, response FROM idempotency.execute_once('meo', 'with-insert', NULL,
       'WITH x AS (SELECT $1 AS account) INSERT INTO meo_orders (account, amount) SELECT account, 3 FROM x',
       ARRAY['with']);
SELECT count(*) AS with_orders FROM meo_orders WHERE account = 'with';
SELECT to_regclass('meo_made') IS NULL AS no_table_made;
SELECT count(*) AS claimed FROM idempotency.keys WHERE scope = 'meo' AND key IN ('two', 'two-b', 'pt', 'vac', 'sel-into');

-- A statement whose own error is 0A000 (the SQLSTATE a kept statement gets when DDL changed
-- its result columns, which is prepared again and run once more): the error, nothing claimed.
CREATE FUNCTION pg_temp.unsupported() RETURNS int LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO meo_orders (account, amount) VALUES ('unsupported', 1);
    RAISE EXCEPTION 'not here' USING ERRCODE = '0A000';
END $$;
SELECT pg_temp.try($$SELECT idempotency.execute_once('meo', 'own-0a000', NULL,
       'SELECT pg_temp.unsupported() AS u')$$);
SELECT (SELECT count(*) FROM idempotency.lookup('meo', 'own-0a000')) AS claimed,
       (SELECT count(*) FROM meo_orders WHERE account = 'unsupported') AS orders;

-- 5. The calls that write keys need READ COMMITTED in this edition (0A000), execute_once too.
BEGIN TRANSACTION ISOLATION LEVEL REPEATABLE READ;
SELECT outcome FROM idempotency.execute_once('meo', 'rr', NULL, 'SELECT 1');
ROLLBACK;

-- 6. The function bodies read the same under standard_conforming_strings = off.
\c
\i sql/include/try.sql
SET standard_conforming_strings = off;
SET escape_string_warning = off;
SELECT outcome, response FROM idempotency.execute_once('meo', 'scs-off', NULL,
       'SELECT $1 AS v, $2::jsonb AS j', ARRAY['a\b', '{"k": "v"}']);
SELECT pg_temp.try($$SELECT idempotency.execute_once('meo', 'scs-two', NULL, 'SELECT 1; SELECT 2')$$);
RESET standard_conforming_strings;

DROP TABLE meo_orders;
