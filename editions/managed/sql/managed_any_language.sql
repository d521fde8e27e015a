-- execute_once tells one statement from several, and types its parameters, without reading a
-- server message: the results are the same whatever lc_messages is (the managed suite runs
-- this file with lc_messages C, German and Japanese). Each call prints its outcome and
-- response, or the SQLSTATE of its error, with the edition's own detail.
SET client_min_messages = warning;
CREATE TABLE lang_orders (id serial PRIMARY KEY, account text NOT NULL, amount integer NOT NULL);
CREATE FUNCTION pg_temp.run(key text, statement text, params text[] DEFAULT '{}')
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    result text;
    state text;
    message text;
    detail text;
BEGIN
    SELECT e.outcome || ' ' || coalesce(e.response::text, 'null') INTO result
      FROM idempotency.execute_once('lang', key, NULL, statement, params) e;
    RETURN result;
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
        detail = PG_EXCEPTION_DETAIL;
    RETURN 'error ' || state ||
        CASE WHEN message LIKE 'idempotency.%' THEN ': ' || coalesce(detail, message) ELSE '' END;
END
$$;

-- 1. Parameters the server cannot type are text; the others keep the type their place gives.
SELECT pg_temp.run('t-1', 'SELECT $1 AS v', ARRAY['x']);
SELECT pg_temp.run('t-2', 'SELECT $1 IS NULL AS n, pg_typeof($2)::text AS t, $3::int + 1 AS i',
                   ARRAY[NULL, 'a', '4']);
SELECT pg_temp.run('t-3', 'SELECT $2 AS second', ARRAY['unused', 'b']);
SELECT pg_temp.run('t-4', 'SELECT format(''%s-%s'', $1, $2) AS f, pg_typeof($2)::text AS t', ARRAY['a', 'b']);
SELECT pg_temp.run('t-5', 'SELECT pg_typeof($1)::text AS t1, $2::int * 2 AS n, pg_typeof($3)::text AS t3',
                   ARRAY['a', '21', 'c']);
SELECT pg_temp.run('t-6', 'INSERT INTO lang_orders (account, amount) VALUES ($1, $2) RETURNING account, amount',
                   ARRAY['acct', '5']);
SELECT pg_temp.run('t-7', 'SELECT $1::int + 1 AS n', ARRAY['not a number']);

-- 2. One statement, whatever semicolons its strings, identifiers, dollar quotes and comments
-- hold, and with empty statements after it.
SELECT pg_temp.run('s-1', 'SELECT '';'' AS semi');
SELECT pg_temp.run('s-2', 'SELECT $q$a;b$q$ AS d, E''\'';'' AS e, "x;y" FROM (SELECT 1 AS "x;y") s');
SELECT pg_temp.run('s-3', '/* ; /* ; */ ; */ SELECT 2 AS two -- ;');
SELECT pg_temp.run('s-4', 'SELECT 1 AS one;');
SELECT pg_temp.run('s-5', 'SELECT 1 AS one ; ;  -- done');

-- 3. Several statements are refused before any runs, counted as the extension counts them,
-- also when a later one names what does not exist; text of no statement is refused too.
SELECT pg_temp.run('m-1', 'SELECT 1; SELECT 2');
SELECT pg_temp.run('m-2', 'INSERT INTO lang_orders (account, amount) VALUES (''m'', 1); DELETE FROM lang_orders; SELECT 3');
SELECT pg_temp.run('m-3', 'SELECT 1; SELECT * FROM lang_nothing');
SELECT pg_temp.run('m-4', 'SELECT '';''; SELECT $$;$$');
SELECT pg_temp.run('m-5', '-- nothing');
SELECT pg_temp.run('m-6', ' ; ');
SELECT pg_temp.run('m-7', 'COMMIT; SELECT 1');
SELECT pg_temp.run('m-8', 'SELECT 1 FROM');
SELECT account, amount FROM lang_orders ORDER BY id;
SELECT count(*) AS claimed FROM idempotency.keys WHERE scope = 'lang' AND key LIKE 'm-%';
