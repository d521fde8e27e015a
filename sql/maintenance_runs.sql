-- idempotency.maintenance_runs: every maintain() run, its steps and result, failed runs too.
-- In a database of its own, so the partitions made here do not meet other tests' keys.
\set own_db idem_maintenance_runs
\i sql/include/own_database.sql
SET idempotency.partition_width = '1d';
SET idempotency.premake = 2;

-- The view's shape.
SELECT column_name, data_type FROM information_schema.columns
WHERE table_schema = 'idempotency' AND table_name = 'maintenance_runs' ORDER BY ordinal_position;

-- A run from SQL: caller 'sql', the session's role, result ok, one step per result row.
SELECT count(*) AS steps FROM idempotency.maintain();
SELECT run, caller, role = session_user AS by_me, result, error,
       started_at <= ended_at AND ended_at <= clock_timestamp() AS times_ok,
       duration = ended_at - started_at AS duration_ok,
       jsonb_array_length(steps) AS steps,
       steps -> 0 ->> 'action' AS first_action,
       (steps -> 0 ->> 'range_start')::timestamptz < (steps -> 0 ->> 'range_end')::timestamptz AS range_ok
FROM idempotency.maintenance_runs;
-- A run with nothing to do is recorded too.
SELECT count(*) AS steps FROM idempotency.maintain();
SELECT run, result, steps FROM idempotency.maintenance_runs WHERE run = 2;
-- Each step as maintain() returned it.
SELECT s.action, s.partition ~ '^keys_p\d{4}_\d{2}_\d{2}$' AS named, s.rows, s.detail,
       s.range_end - s.range_start AS width
FROM idempotency.maintenance_runs r,
     jsonb_to_recordset(r.steps) AS s(action text, partition text, range_start timestamptz,
                                      range_end timestamptz, "rows" bigint, detail text)
WHERE r.run = 1;

-- A failing step (an event trigger refuses the DDL): result 'incomplete', the error in steps.
SELECT partition AS last_partition FROM idempotency.partitions
WHERE NOT is_default ORDER BY range_start DESC LIMIT 1 \gset
DROP TABLE idempotency.:last_partition;
CREATE FUNCTION refuse_ddl() RETURNS event_trigger LANGUAGE plpgsql AS
  $$ BEGIN RAISE EXCEPTION 'ddl refused for the test'; END $$;
CREATE EVENT TRIGGER refuse_ddl ON ddl_command_start EXECUTE FUNCTION refuse_ddl();
SELECT action, detail FROM idempotency.maintain();
SELECT run, result, steps -> 0 ->> 'action' AS action, steps -> 0 ->> 'detail' AS detail, error
FROM idempotency.maintenance_runs WHERE run = 3;
DROP EVENT TRIGGER refuse_ddl;

-- A run that ends with an error (a cancel is re-raised, not reported as a step): its own
-- transaction rolls back, and the next maintain() writes its record first.
CREATE OR REPLACE FUNCTION refuse_ddl() RETURNS event_trigger LANGUAGE plpgsql AS
  $$ BEGIN RAISE EXCEPTION 'canceled for the test' USING ERRCODE = 'query_canceled'; END $$;
CREATE EVENT TRIGGER refuse_ddl ON ddl_command_start EXECUTE FUNCTION refuse_ddl();
\set VERBOSITY terse
SELECT count(*) FROM idempotency.maintain();
\set VERBOSITY default
SELECT count(*) AS runs_after_failure FROM idempotency.maintenance_runs;
DROP EVENT TRIGGER refuse_ddl;
SELECT action FROM idempotency.maintain();
SELECT run, caller, result, error, jsonb_array_length(steps) AS steps
FROM idempotency.maintenance_runs WHERE run > 3 ORDER BY run;

-- A failed run's record survives a second failure (it goes back to be written later).
DROP TABLE idempotency.:last_partition;
CREATE EVENT TRIGGER refuse_ddl ON ddl_command_start EXECUTE FUNCTION refuse_ddl();
\set VERBOSITY terse
SELECT count(*) FROM idempotency.maintain();
SELECT count(*) FROM idempotency.maintain();
\set VERBOSITY default
DROP EVENT TRIGGER refuse_ddl;
SELECT action FROM idempotency.maintain();
SELECT run, result, error FROM idempotency.maintenance_runs WHERE run > 5 ORDER BY run;

-- The last 100 runs are kept.
DO $$ BEGIN FOR i IN 1..105 LOOP PERFORM * FROM idempotency.maintain(); END LOOP; END $$;
SELECT count(*) AS kept, max(run) - min(run) + 1 AS span FROM idempotency.maintenance_runs;

-- Not readable by PUBLIC.
CREATE ROLE idem_runs_nobody;
GRANT USAGE ON SCHEMA idempotency TO idem_runs_nobody;
SET ROLE idem_runs_nobody;
\set VERBOSITY terse
SELECT count(*) FROM idempotency.maintenance_runs;
SELECT count(*) FROM idempotency.maintenance_log;
\set VERBOSITY default
RESET ROLE;
REVOKE USAGE ON SCHEMA idempotency FROM idem_runs_nobody;
DROP ROLE idem_runs_nobody;

\c :regress_db
SET client_min_messages = warning;
DROP DATABASE idem_maintenance_runs;
