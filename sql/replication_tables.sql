-- Every table the extension owns has a stated replication behaviour: the table "What is
-- replicated and what is not" of docs/replication.md, repeated here. A table the extension
-- gains later without a line here shows up with behaviour NULL, and the test fails until its
-- behaviour is decided (and written into docs/replication.md).
-- In a database of its own: maintain() runs here.
\set own_db idem_replication_tables
\i sql/include/own_database.sql

-- kind: 'root' (published through the root, with publish_via_partition_root: every change of
-- a partition arrives as a change of this table), 'partition' (a partition of the root: never
-- published on its own, the publication guard refuses it), 'rows' (its rows, by their
-- replica identity), 'local' (each server's own: a REPLICA trigger skips every row logical
-- replication applies to it).
CREATE TEMP TABLE stated (relname name PRIMARY KEY, kind text NOT NULL, behaviour text NOT NULL);
INSERT INTO stated VALUES
    ('keys', 'root', 'keys in every state, through the root'),
    ('keys_default', 'partition', 'through the root (keys)'),
    ('streams', 'rows', 'streams created and dropped; next_key bounds are not'),
    ('consumer_positions', 'rows', 'watermarks'),
    ('maintenance_log', 'local', 'never: each server''s own maintenance history'),
    ('stats_snapshots', 'local', 'never: each server''s own counters per hour');

-- Each member table with its stated behaviour, and whether the table is set up for it:
-- root: replica identity FULL (it has no primary key); partition: a partition of keys;
-- rows: a primary key as replica identity (updates and deletes find the row); local: the
-- trigger keep_local_rows, enabled for replication only ('R').
WITH members AS (
    SELECT c.* FROM pg_depend d JOIN pg_class c ON c.oid = d.objid
    WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_extension'::regclass
      AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'idempotency')
      AND d.deptype = 'e' AND c.relkind IN ('r', 'p', 'f', 'm'))
SELECT coalesce(m.relname, s.relname) AS relname, m.oid IS NOT NULL AS member, s.kind,
       s.behaviour,
       CASE s.kind
           WHEN 'root' THEN m.relkind = 'p' AND m.relreplident = 'f'
           WHEN 'partition' THEN m.relispartition
               AND pg_partition_root(m.oid) = 'idempotency.keys'::regclass
           WHEN 'rows' THEN m.relreplident = 'd'
               AND EXISTS (SELECT FROM pg_index i WHERE i.indrelid = m.oid AND i.indisprimary)
           WHEN 'local' THEN EXISTS (
               SELECT FROM pg_trigger t
               WHERE t.tgrelid = m.oid AND t.tgfoid = 'idempotency.keep_local_rows'::regproc
                 AND t.tgenabled = 'R' AND t.tgtype & (1 | 2 | 4 | 8 | 16) = (1 | 2 | 4 | 8 | 16))
       END AS set_up
FROM members m
FULL JOIN stated s ON s.relname = m.relname
ORDER BY 1;

-- The partitions maintain() makes are no members; each is a partition of the root.
SELECT count(*) > 0 AS made FROM idempotency.maintain();
SELECT count(*) > 1 AS partitions,
       bool_and(NOT EXISTS (SELECT FROM pg_depend d WHERE d.objid = t.relid AND d.deptype = 'e'))
           AS no_members
FROM pg_partition_tree('idempotency.keys') t
WHERE t.isleaf AND t.relid <> 'idempotency.keys_default'::regclass;

-- keep_local_rows: where session_replication_role = replica (the apply and table-sync
-- workers), writes of another server's history are skipped, maintain()'s own are not.
SELECT run AS own_run FROM idempotency.maintenance_log \gset
SET session_replication_role = replica;
WITH w AS (INSERT INTO idempotency.maintenance_log (run, started_at, ended_at, caller, role, result)
           OVERRIDING SYSTEM VALUE
           VALUES (:own_run, now(), now(), 'worker', 'publisher', 'ok'),
                  (:own_run + 50, now(), now(), 'worker', 'publisher', 'ok')
           RETURNING 1)
SELECT count(*) AS applied_inserts FROM w;
WITH w AS (UPDATE idempotency.maintenance_log SET error = 'publisher' RETURNING 1)
SELECT count(*) AS applied_updates FROM w;
WITH w AS (DELETE FROM idempotency.maintenance_log RETURNING 1)
SELECT count(*) AS applied_deletes FROM w;
COPY idempotency.maintenance_log (run, started_at, ended_at, caller, role, result) FROM STDIN;
77	2026-01-01 00:00:00+00	2026-01-01 00:00:01+00	worker	publisher	ok
\.
SELECT 'done' AS maintain_in_replica_session FROM (SELECT count(*) FROM idempotency.maintain()) m;
RESET session_replication_role;
SELECT run - :own_run AS run, role = session_user AS own, result, error
FROM idempotency.maintenance_log ORDER BY run;
-- Elsewhere the trigger does not fire: an operator may still edit the history.
WITH w AS (DELETE FROM idempotency.maintenance_log WHERE run = :own_run RETURNING 1)
SELECT count(*) AS deleted_by_operator FROM w;

\c :regress_db
SET client_min_messages = warning;
DROP DATABASE idem_replication_tables;
