-- The direct storage path (idempotency.direct_storage) handles only the table shape the install
-- script creates. A session that has already written keys directly must notice a trigger or a
-- constraint added afterwards, and go through SPI, which fires the trigger and checks the
-- constraint. Also: the relation locks it takes, and the outcome labels surviving the
-- extension being dropped and recreated.
\set VERBOSITY terse
-- This file is about the direct path: on, whatever the server says.
SET idempotency.direct_storage = on;
-- Written directly: this session now knows the table's shape.
SELECT outcome FROM idempotency.reserve('direct', 'k1');
SELECT idempotency.complete('direct', 'k1', 201, '{"n": 1}');
SELECT outcome, status_code, response FROM idempotency.reserve('direct', 'k1');

-- A row trigger on the partition that takes the session's keys.
CREATE TABLE direct_inserted (key text);
CREATE FUNCTION direct_log_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO direct_inserted VALUES (NEW.key);
    RETURN NEW;
END $$;
SELECT tableoid::regclass AS leaf FROM idempotency.keys
WHERE scope = 'direct' AND key = 'k1' \gset
CREATE TRIGGER direct_log AFTER INSERT ON :leaf FOR EACH ROW EXECUTE FUNCTION direct_log_insert();

SELECT outcome FROM idempotency.reserve('direct', 'k2');
SELECT idempotency.complete('direct', 'k2', 201, '{"n": 2}');
SELECT key FROM direct_inserted;

-- Without the trigger, and with one more CHECK constraint on that partition: the constraint
-- is checked.
DROP TRIGGER direct_log ON :leaf;
ALTER TABLE :leaf ADD CONSTRAINT direct_no_forbidden CHECK (key <> 'forbidden');
SELECT outcome FROM idempotency.reserve('direct', 'k3');
SELECT idempotency.complete('direct', 'k3', 201, '{"n": 3}');
SELECT key FROM direct_inserted;
BEGIN;
SELECT outcome FROM idempotency.reserve('direct', 'forbidden');
\set VERBOSITY sqlstate
SELECT idempotency.complete('direct', 'forbidden', 201, '{}');
\set VERBOSITY terse
ROLLBACK;

ALTER TABLE :leaf DROP CONSTRAINT direct_no_forbidden;
SELECT outcome FROM idempotency.reserve('direct', 'forbidden');
SELECT idempotency.complete('direct', 'forbidden', 201, '{}');
SELECT key, state, status_code FROM idempotency.keys WHERE scope = 'direct' ORDER BY key;

-- More indexes on the partition: plain ones get the new rows' entries (and check uniqueness),
-- an expression index gets them through the executor.
CREATE INDEX direct_by_scope ON :leaf (scope, completed_at);
CREATE UNIQUE INDEX direct_one_per_response ON :leaf (response);
SELECT outcome FROM idempotency.reserve('direct', 'k5');
SELECT idempotency.complete('direct', 'k5', 201, '{"n": 5}');
BEGIN;
SELECT outcome FROM idempotency.reserve('direct', 'k6');
\set VERBOSITY sqlstate
SELECT idempotency.complete('direct', 'k6', 201, '{"n": 5}');
\set VERBOSITY terse
ROLLBACK;
DROP INDEX idempotency.direct_one_per_response;
CREATE INDEX direct_by_upper_key ON :leaf (upper(key));
SELECT outcome FROM idempotency.reserve('direct', 'k7');
SELECT idempotency.complete('direct', 'k7', 201, '{"n": 7}');
-- amcheck: every heap row of the partition has its entry in each of its btree indexes.
CREATE EXTENSION amcheck;
SELECT i.indexrelid::regclass::text LIKE '%pkey' AS primary_key, bt_index_check(i.indexrelid, true)
FROM pg_index i
WHERE i.indrelid = :'leaf'::regclass
ORDER BY 1, i.indexrelid::regclass::text;
SELECT key FROM idempotency.keys WHERE scope = 'direct' ORDER BY key;
DROP EXTENSION amcheck;
DROP INDEX idempotency.direct_by_scope, idempotency.direct_by_upper_key;

-- The relation locks a call holds: a lookup only reads (AccessShareLock), and a reserve +
-- complete reads and writes under RowExclusiveLock alone (through SPI it would hold both).
BEGIN;
SELECT count(*) FROM idempotency.lookup('direct', 'k1');
SELECT c.relname, l.mode FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
WHERE l.pid = pg_backend_pid() AND c.relnamespace = 'idempotency'::regnamespace
  AND c.relname = 'keys' ORDER BY 1, 2;
ROLLBACK;
BEGIN;
SELECT outcome FROM idempotency.reserve('direct', 'k4');
SELECT idempotency.complete('direct', 'k4', 201, '{}');
SELECT c.relname, l.mode FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
WHERE l.pid = pg_backend_pid() AND c.relnamespace = 'idempotency'::regnamespace
  AND c.relname = 'keys' ORDER BY 1, 2;
ROLLBACK;

-- The extension dropped and recreated in this session: reserve answers with the new type's
-- labels.
DROP EXTENSION idempotency;
CREATE EXTENSION idempotency;
SELECT outcome FROM idempotency.reserve('direct', 'k1');
SELECT outcome, status_code FROM idempotency.reserve('direct', 'k1');

DROP TABLE direct_inserted;
DROP FUNCTION direct_log_insert();
