-- execute_once: the claim, one statement (the work) and its answer in one call, inside the
-- caller's transaction, as the caller.
\set VERBOSITY terse
\i sql/include/try.sql
CREATE TABLE eo_orders (id bigserial PRIMARY KEY, account text NOT NULL, amount integer NOT NULL,
                        note jsonb);
-- pg_temp.claims(key): how many records the key has (0: nothing claimed).
CREATE FUNCTION pg_temp.claims(k text) RETURNS bigint LANGUAGE sql
    AS $$SELECT count(*) FROM idempotency.lookup('eo', k)$$;

-- 1. A new key: the statement runs, its row is the response, the key is completed with it,
-- and the reservation says so (outcome new, with status_code and response).
SELECT outcome, status_code, response, attempt, recovery_point, locked_until
  FROM idempotency.execute_once('eo', 'k1', '\x01',
       'INSERT INTO eo_orders (account, amount) VALUES ($1, $2) RETURNING id, account, amount',
       ARRAY['acct-1', '100']);
SELECT state, status_code, response, attempt, locked_until FROM idempotency.lookup('eo', 'k1');
-- A replay: the stored answer; nothing runs (still one order).
SELECT outcome, status_code, response, attempt
  FROM idempotency.execute_once('eo', 'k1', '\x01',
       'INSERT INTO eo_orders (account, amount) VALUES ($1, $2) RETURNING id, account, amount',
       ARRAY['acct-1', '100']);
SELECT count(*) FROM eo_orders;
-- Nothing of the statement runs on a replay, not even its parsing.
SELECT outcome, response FROM idempotency.execute_once('eo', 'k1', '\x01', 'no such statement');
-- The key reused with another request: mismatch, nothing runs.
SELECT outcome, status_code, response, attempt
  FROM idempotency.execute_once('eo', 'k1', '\x02',
       'INSERT INTO eo_orders (account, amount) VALUES ($1, $2) RETURNING id', ARRAY['acct-1', '5']);
-- A ULID made in 2016: too_old, nothing runs.
SELECT outcome, status_code, response, attempt
  FROM idempotency.execute_once('eo', '01ARZ3NDEKTSV4RRFFQ69G5FAV', NULL,
       'INSERT INTO eo_orders (account, amount) VALUES ($1, $2) RETURNING id', ARRAY['acct-1', '5']);
SELECT count(*) FROM eo_orders;
-- reserve sees the key completed by execute_once as a replay, and the other way round.
SELECT outcome, status_code, response FROM idempotency.reserve('eo', 'k1', '\x01');
SELECT outcome FROM idempotency.reserve('eo', 'r1');
SELECT idempotency.complete('eo', 'r1', 200, '{"done": true}');
SELECT outcome, status_code, response FROM idempotency.execute_once('eo', 'r1', NULL, 'SELECT 1');

-- 2. The response: one row of one jsonb or json column is that value; one row otherwise the
-- row as an object; no row, or no result columns, NULL; several rows are refused (21000) and
-- nothing is claimed. status_code is stored as given (default 201).
SELECT status_code, response FROM idempotency.execute_once('eo', 'shape-jsonb', NULL,
       'SELECT jsonb_build_object(''id'', $1::int, ''tags'', ARRAY[''a'', ''b''])', ARRAY['7']);
SELECT status_code, response FROM idempotency.execute_once('eo', 'shape-json', NULL,
       'SELECT json_build_array(1, ''two'', null) AS j', status_code => 200);
SELECT response FROM idempotency.execute_once('eo', 'shape-scalar', NULL, 'SELECT 42 AS answer');
SELECT response, response IS NULL AS sql_null FROM idempotency.execute_once('eo', 'shape-null-jsonb',
       NULL, 'SELECT NULL::jsonb');
SELECT status_code, response IS NULL AS no_response FROM idempotency.execute_once('eo',
       'shape-no-returning', NULL, 'INSERT INTO eo_orders (account, amount) VALUES ($1, 1)',
       ARRAY['acct-2'], 202);
SELECT status_code, response IS NULL AS no_response FROM idempotency.execute_once('eo',
       'shape-no-row', NULL, 'UPDATE eo_orders SET amount = 0 WHERE account = $1 RETURNING id',
       ARRAY['nobody'], 404);
SELECT state, status_code, response FROM idempotency.lookup('eo', 'shape-no-row');
SELECT pg_temp.try($$SELECT idempotency.execute_once('eo', 'shape-rows', NULL,
       'SELECT g FROM generate_series(1, 3) g')$$);
SELECT pg_temp.claims('shape-rows');
-- Several rows aggregated into one value are one answer.
SELECT response FROM idempotency.execute_once('eo', 'shape-agg', NULL,
       'SELECT jsonb_agg(g ORDER BY g) FROM generate_series(1, 3) g');
-- A DML statement that returns several rows is refused too, and its writes are undone.
SELECT pg_temp.try($$SELECT idempotency.execute_once('eo', 'shape-dml-rows', NULL,
       'INSERT INTO eo_orders (account, amount) SELECT ''many'', g FROM generate_series(1, 5) g
        RETURNING id')$$);
SELECT pg_temp.claims('shape-dml-rows'), (SELECT count(*) FROM eo_orders WHERE account = 'many');
SELECT pg_temp.try($$SELECT idempotency.execute_once('eo', 'bad-status', NULL, 'SELECT 1', '{}', 99)$$);
SELECT pg_temp.try($$SELECT idempotency.execute_once('eo', 'no-statement', NULL, NULL)$$);
SELECT pg_temp.claims('bad-status') + pg_temp.claims('no-statement') AS claimed;

-- 3. Parameters: bound, never part of the statement's text, each converted to the type the
-- statement gives it ($1::int, a column's type; text when nothing says); a NULL element is
-- NULL; a NULL array is no parameters.
SELECT response FROM idempotency.execute_once('eo', 'p-typed', NULL,
       'SELECT $1::int + 1 AS n, $2::jsonb AS doc, $3::timestamptz AS at, $4 IS NULL AS fourth_null,
               pg_typeof($5) AS fifth_type, $6::numeric * 2 AS m',
       ARRAY['41', '{"a": [1, 2]}', '2026-01-02 03:04:05+00', NULL, 'x', '1.25']);
SELECT response FROM idempotency.execute_once('eo', 'p-column', NULL,
       'INSERT INTO eo_orders (account, amount, note) VALUES ($1, $2, $3) RETURNING account, amount, note',
       ARRAY['acct-3', '250', '{"gift": true}']);
SELECT response FROM idempotency.execute_once('eo', 'p-null-array', NULL, 'SELECT 1 AS one', NULL);
SELECT response FROM idempotency.execute_once('eo', 'p-value', NULL, 'SELECT $1 AS v',
       ARRAY['x''); DROP TABLE eo_orders; --']);
SELECT count(*) > 0 AS orders_still_there FROM eo_orders;
-- Too few or too many values, a value its type refuses, a multi-dimensional array: an error,
-- nothing claimed.
SELECT pg_temp.try($$SELECT idempotency.execute_once('eo', 'p-few', NULL, 'SELECT $1::int, $2::int',
       ARRAY['1'])$$);
SELECT pg_temp.try($$SELECT idempotency.execute_once('eo', 'p-many', NULL, 'SELECT 1', ARRAY['1'])$$);
SELECT pg_temp.try($$SELECT idempotency.execute_once('eo', 'p-bad', NULL,
       'INSERT INTO eo_orders (account, amount) VALUES ($1, $2)', ARRAY['acct-4', 'lots'])$$);
SELECT pg_temp.try($$SELECT idempotency.execute_once('eo', 'p-2d', NULL, 'SELECT $1',
       ARRAY[['1'], ['2']])$$);
SELECT pg_temp.claims('p-few') + pg_temp.claims('p-many') + pg_temp.claims('p-bad')
       + pg_temp.claims('p-2d') AS claimed;

-- 4. A statement that cannot run is a clear error, and nothing is claimed: one that does not
-- parse, names what does not exist, tries to end the transaction, is a utility command or
-- SELECT INTO, or is two statements. An error raised by the statement rolls the claim back
-- with it: the key is new again afterwards.
SELECT pg_temp.try($$SELECT idempotency.execute_once('eo', 's-parse', NULL, 'INSRT INTO eo_orders')$$);
SELECT pg_temp.try($$SELECT idempotency.execute_once('eo', 's-missing', NULL, 'SELECT * FROM eo_nothing')$$);
SELECT pg_temp.try($$SELECT idempotency.execute_once('eo', 's-commit', NULL, 'COMMIT')$$);
SELECT pg_temp.try($$SELECT idempotency.execute_once('eo', 's-rollback', NULL, 'ROLLBACK')$$);
SELECT pg_temp.try($$SELECT idempotency.execute_once('eo', 's-savepoint', NULL, 'SAVEPOINT x')$$);
SELECT pg_temp.try($$SELECT idempotency.execute_once('eo', 's-ddl', NULL, 'CREATE TABLE eo_x (a int)')$$);
SELECT pg_temp.try($$SELECT idempotency.execute_once('eo', 's-into', NULL, 'SELECT 1 AS a INTO eo_y')$$);
SELECT pg_temp.try($$SELECT idempotency.execute_once('eo', 's-two', NULL, 'SELECT 1; COMMIT')$$);
SELECT pg_temp.try($$SELECT idempotency.execute_once('eo', 's-empty', NULL, '')$$);
SELECT pg_temp.try($$SELECT idempotency.execute_once('eo', 's-fails', NULL, 'SELECT 1 / $1::int',
       ARRAY['0'])$$);
SELECT pg_temp.claims('s-parse') + pg_temp.claims('s-missing') + pg_temp.claims('s-commit')
       + pg_temp.claims('s-rollback') + pg_temp.claims('s-savepoint') + pg_temp.claims('s-ddl')
       + pg_temp.claims('s-into') + pg_temp.claims('s-two') + pg_temp.claims('s-empty')
       + pg_temp.claims('s-fails') AS claimed;
SELECT to_regclass('eo_x') IS NULL AND to_regclass('eo_y') IS NULL AS no_table_made;
SELECT outcome, response FROM idempotency.execute_once('eo', 's-fails', NULL, 'SELECT 1 / $1::int AS q',
       ARRAY['1']);
-- In autocommit an error leaves nothing: the statement's writes go with the claim.
SELECT pg_temp.try($$SELECT idempotency.execute_once('eo', 's-unique', NULL,
       'INSERT INTO eo_orders (id, account, amount) VALUES ($1, ''dup'', 1), ($1, ''dup'', 2)',
       ARRAY['1000'])$$);
SELECT pg_temp.claims('s-unique'), (SELECT count(*) FROM eo_orders WHERE account = 'dup');

-- 5. Inside a transaction block the claim, the statement's writes and the answer commit or
-- roll back with the transaction.
BEGIN;
SELECT outcome, response FROM idempotency.execute_once('eo', 'tx-1', NULL,
       'INSERT INTO eo_orders (account, amount) VALUES ($1, 1) RETURNING account', ARRAY['tx']);
-- Again in the same transaction: a replay.
SELECT outcome, response FROM idempotency.execute_once('eo', 'tx-1', NULL,
       'INSERT INTO eo_orders (account, amount) VALUES ($1, 1) RETURNING account', ARRAY['tx']);
ROLLBACK;
SELECT pg_temp.claims('tx-1'), (SELECT count(*) FROM eo_orders WHERE account = 'tx');
-- A savepoint rolled back takes the claim and the write with it.
BEGIN;
SAVEPOINT s;
SELECT outcome FROM idempotency.execute_once('eo', 'tx-2', NULL,
       'INSERT INTO eo_orders (account, amount) VALUES ($1, 1)', ARRAY['tx']);
ROLLBACK TO SAVEPOINT s;
SELECT outcome FROM idempotency.execute_once('eo', 'tx-2', NULL,
       'INSERT INTO eo_orders (account, amount) VALUES ($1, 2)', ARRAY['tx']);
COMMIT;
SELECT (SELECT state FROM idempotency.lookup('eo', 'tx-2')),
       (SELECT string_agg(amount::text, ',') FROM eo_orders WHERE account = 'tx');
-- A key this transaction reserved and has not completed: in_progress, as reserve answers.
BEGIN;
SELECT outcome FROM idempotency.reserve('eo', 'tx-3');
SELECT outcome, status_code, response FROM idempotency.execute_once('eo', 'tx-3', NULL, 'SELECT 1');
ROLLBACK;
-- Another holder's claim with a live lease: in_progress; once failed, the next call takes
-- the key over (attempt 2) and runs the statement.
SELECT outcome FROM idempotency.reserve('eo', 'tx-4', NULL, '1 hour');
SELECT outcome, attempt FROM idempotency.execute_once('eo', 'tx-4', NULL, 'SELECT 1 AS one');
SELECT idempotency.fail('eo', 'tx-4', '{"error": "timeout"}');
SELECT outcome, attempt, response FROM idempotency.execute_once('eo', 'tx-4', NULL, 'SELECT 1 AS one');
-- A read-only transaction is refused (25006), as for every call that claims keys.
BEGIN TRANSACTION READ ONLY;
SELECT outcome FROM idempotency.execute_once('eo', 'ro', NULL, 'SELECT 1');
ROLLBACK;
SELECT pg_temp.claims('ro');

-- 6. The statement runs as the caller: a table the caller may not write is 42501, and
-- nothing is claimed; the extension's own table access is unchanged.
CREATE ROLE regress_idem_eo_app NOLOGIN;
GRANT USAGE ON SCHEMA idempotency TO regress_idem_eo_app;
GRANT EXECUTE ON FUNCTION
    idempotency.execute_once(text, text, bytea, text, text[], integer, interval, interval, interval),
    idempotency.lookup(text, text)
TO regress_idem_eo_app;
GRANT SELECT ON eo_orders TO regress_idem_eo_app;
SET ROLE regress_idem_eo_app;
SELECT pg_temp.try($$SELECT idempotency.execute_once('eo', 'priv-1', NULL,
       'INSERT INTO eo_orders (account, amount) VALUES ($1, 1)', ARRAY['priv'])$$);
SELECT pg_temp.claims('priv-1');
SELECT response FROM idempotency.execute_once('eo', 'priv-2', NULL,
       'SELECT current_user AS who, count(*) AS orders FROM eo_orders WHERE account = $1',
       ARRAY['priv']);
SELECT pg_temp.try($$SELECT count(*) FROM idempotency.keys$$);
RESET ROLE;
REVOKE ALL ON eo_orders FROM regress_idem_eo_app;
REVOKE ALL ON SCHEMA idempotency FROM regress_idem_eo_app;
REVOKE ALL ON FUNCTION
    idempotency.execute_once(text, text, bytea, text, text[], integer, interval, interval, interval),
    idempotency.lookup(text, text)
FROM regress_idem_eo_app;
DROP ROLE regress_idem_eo_app;
-- With the caller's search_path: the same text names another schema's table under another
-- path (the kept plan is planned again for it).
CREATE SCHEMA eo_a;
CREATE SCHEMA eo_b;
CREATE TABLE eo_a.place (name text);
CREATE TABLE eo_b.place (name text);
INSERT INTO eo_a.place VALUES ('a');
INSERT INTO eo_b.place VALUES ('b');
SET search_path = eo_a, public;
SELECT response FROM idempotency.execute_once('eo', 'path-a', NULL, 'SELECT name FROM place');
SET search_path = eo_b, public;
SELECT response FROM idempotency.execute_once('eo', 'path-b', NULL, 'SELECT name FROM place');
RESET search_path;
DROP SCHEMA eo_a, eo_b CASCADE;

-- 7. DDL between two calls of one statement text: the kept plan follows the table.
SELECT response - 'id' AS response FROM idempotency.execute_once('eo', 'ddl-1', NULL,
       'INSERT INTO eo_orders (account, amount) VALUES ($1, $2) RETURNING *', ARRAY['ddl', '1']);
ALTER TABLE eo_orders ADD COLUMN currency text NOT NULL DEFAULT 'EUR';
SELECT response - 'id' AS response FROM idempotency.execute_once('eo', 'ddl-2', NULL,
       'INSERT INTO eo_orders (account, amount) VALUES ($1, $2) RETURNING *', ARRAY['ddl', '2']);
ALTER TABLE eo_orders DROP COLUMN note;
SELECT response - 'id' AS response FROM idempotency.execute_once('eo', 'ddl-3', NULL,
       'INSERT INTO eo_orders (account, amount) VALUES ($1, $2) RETURNING *', ARRAY['ddl', '3']);
-- The table dropped and made again under the same name.
CREATE TABLE eo_notes (id int, body text);
SELECT response FROM idempotency.execute_once('eo', 'ddl-4', NULL,
       'INSERT INTO eo_notes VALUES (1, $1) RETURNING body', ARRAY['first']);
DROP TABLE eo_notes;
SELECT pg_temp.try($$SELECT idempotency.execute_once('eo', 'ddl-5', NULL,
       'INSERT INTO eo_notes VALUES (1, $1) RETURNING body', ARRAY['gone'])$$);
CREATE TABLE eo_notes (id bigint, body text, extra text DEFAULT 'new');
SELECT response FROM idempotency.execute_once('eo', 'ddl-6', NULL,
       'INSERT INTO eo_notes VALUES (1, $1) RETURNING body', ARRAY['again']);
SELECT id, body, extra FROM eo_notes;
SELECT pg_temp.claims('ddl-5');

-- 8. A statement that calls back into the extension: execute_once for its own key is
-- refused (55006); for another key it runs; completing, failing or forgetting its own key is
-- refused once the statement returns (55000). Nothing is claimed when refused.
SELECT pg_temp.try($$SELECT idempotency.execute_once('eo', 'cb-1', NULL,
       'SELECT (idempotency.execute_once(''eo'', ''cb-1'', NULL, ''SELECT 1 AS one'')).response')$$);
SELECT pg_temp.claims('cb-1');
SELECT response FROM idempotency.execute_once('eo', 'cb-2', NULL,
       'SELECT (idempotency.execute_once(''eo'', ''cb-3'', NULL, ''SELECT 1 AS one'')).response AS inner');
SELECT key, state, response FROM idempotency.keys WHERE scope = 'eo' AND key IN ('cb-2', 'cb-3')
 ORDER BY key;
SELECT pg_temp.try($$SELECT idempotency.execute_once('eo', 'cb-4', NULL,
       'SELECT idempotency.complete(''eo'', ''cb-4'', 200, NULL)')$$);
SELECT pg_temp.try($$SELECT idempotency.execute_once('eo', 'cb-5', NULL,
       'SELECT idempotency.fail(''eo'', ''cb-5'')')$$);
SELECT pg_temp.try($$SELECT idempotency.execute_once('eo', 'cb-6', NULL,
       'SELECT idempotency.forget(''eo'', ''cb-6'')')$$);
SELECT pg_temp.claims('cb-1') + pg_temp.claims('cb-4') + pg_temp.claims('cb-5')
       + pg_temp.claims('cb-6') AS claimed;
-- reserve of its own key from the statement: in_progress (the claim is the statement's).
SELECT response FROM idempotency.execute_once('eo', 'cb-7', NULL,
       'SELECT outcome FROM idempotency.reserve(''eo'', ''cb-7'')');
-- The refusal of a nested call caught inside the statement leaves the outer call working.
CREATE FUNCTION pg_temp.nested(k text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    PERFORM idempotency.execute_once('eo', k, NULL, 'SELECT 1');
    RETURN 'ran';
EXCEPTION WHEN object_in_use THEN
    RETURN 'refused';
END $$;
SELECT response FROM idempotency.execute_once('eo', 'cb-8', NULL, 'SELECT pg_temp.nested($1) AS r',
       ARRAY['cb-8']);
SELECT response FROM idempotency.execute_once('eo', 'cb-9', NULL, 'SELECT pg_temp.nested($1) AS r',
       ARRAY['cb-9-other']);

-- 9. More statement texts than a backend keeps: each still runs, and the first ones are
-- prepared again when they come back.
DO $$
BEGIN
    FOR i IN 1..70 LOOP
        PERFORM idempotency.execute_once('eo', 'many-' || i, NULL, 'SELECT ' || i || ' AS n');
    END LOOP;
    FOR i IN 1..3 LOOP
        PERFORM idempotency.execute_once('eo', 'many-again-' || i, NULL, 'SELECT ' || i || ' AS n');
    END LOOP;
END $$;
SELECT count(*) FILTER (WHERE response = jsonb_build_object('n', split_part(key, '-', 2)::int))
       AS right_answers, count(*) AS keys
  FROM idempotency.keys WHERE scope = 'eo' AND key ~ '^many-[0-9]+$';
SELECT string_agg(response::text, ' ' ORDER BY key) FROM idempotency.keys
 WHERE scope = 'eo' AND key LIKE 'many-again-%';
-- A statement that calls execute_once for more texts than a backend keeps keeps its own plan
-- while it runs.
CREATE FUNCTION pg_temp.many(prefix text) RETURNS integer LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..70 LOOP
        PERFORM idempotency.execute_once('eo', prefix || i, NULL, 'SELECT ' || i || ' + 1000 AS n');
    END LOOP;
    RETURN 70;
END $$;
SELECT response FROM idempotency.execute_once('eo', 'nested-many', NULL,
       'SELECT pg_temp.many($1) AS calls, $2::int AS after', ARRAY['nested-', '7']);
SELECT count(*) FROM idempotency.keys WHERE scope = 'eo' AND key ~ '^nested-[0-9]+$';
SELECT response FROM idempotency.execute_once('eo', 'nested-many-2', NULL,
       'SELECT pg_temp.many($1) AS calls, $2::int AS after', ARRAY['nested-again-', '8']);

DROP TABLE eo_orders, eo_notes;
