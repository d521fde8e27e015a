-- idempotency 0.2.0 -> 0.3.0. A new install runs 0.1.0's script and every upgrade after it,
-- so a new database and an updated one end with the same objects
-- (test/scripted/upgrade_chain.sh compares them).
\echo Use "ALTER EXTENSION idempotency UPDATE TO '0.3.0'" to load this file. \quit

-- === logical replication: each server's own maintenance history (issue 22) ===
-- A publication FOR ALL TABLES (or FOR TABLES IN SCHEMA idempotency) carries
-- idempotency.maintenance_log too, and both servers number their runs from 1: the publisher's
-- runs collided with the subscriber's own and stopped the whole subscription. The history is
-- each server's own (docs/replication.md): this row trigger fires only where
-- session_replication_role = replica (the apply and table-sync workers) and there skips every
-- row but those the server's own maintain() writes.
CREATE FUNCTION idempotency.keep_local_rows()
RETURNS trigger
AS 'MODULE_PATHNAME', 'idem_keep_local_rows' LANGUAGE C;

CREATE TRIGGER keep_local_rows BEFORE INSERT OR UPDATE OR DELETE ON idempotency.maintenance_log
    FOR EACH ROW EXECUTE FUNCTION idempotency.keep_local_rows();
ALTER TABLE idempotency.maintenance_log ENABLE REPLICA TRIGGER keep_local_rows;
