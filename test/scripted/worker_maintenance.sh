#!/usr/bin/env bash
# The maintenance worker: with the library preloaded and a 1-second interval, expired
# partitions disappear without any call; a failing run is logged and retried; SIGHUP reloads
# the database list; SIGTERM stops the launcher cleanly (and it stays stopped).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"

cluster_setup test-cluster/worker 54461
source "$(dirname "${BASH_SOURCE[0]}")/lib/prelude.sh" cluster
# premake 4: a pass covers 4 s ahead, so the key below (expiring 2 s after it is reserved) finds
# its partition even when the reserve comes up to a second after the pass.
cluster_init "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" \
  "idempotency.database = 'postgres'" "idempotency.maintenance_interval = '1s'" \
  "idempotency.partition_width = '1s'" "idempotency.premake = 4"
cluster_start "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK"

source "$(dirname "${BASH_SOURCE[0]}")/lib/worker.sh"

q -d postgres -c "CREATE EXTENSION idempotency"
poll 10 "the worker created partitions" sql_true \
  "SELECT count(*) >= 3 FROM idempotency.partitions WHERE NOT is_default"

# A key that expires in 2 seconds: its partition disappears with no call from us.
part=$(q -d postgres -c "SELECT (idempotency.reserve('w', 'k', NULL, '1 s', '2 s')).outcome" \
  -c "SELECT tableoid::regclass FROM idempotency.keys WHERE scope = 'w'" | tail -n1)
[[ $part == idempotency.keys_p* ]] || fail "the key landed in $part, not in a premade partition"
echo "the key is in $part"
poll 10 "its partition was dropped after it expired" sql_true \
  "SELECT to_regclass('$part') IS NULL"
grep -q "idempotency: dropped partition keys_p.* in database \"postgres\"" "$CLUSTER_LOG" ||
  fail "no 'dropped partition' line in the server log"
[[ $(q -d postgres -c "SELECT count(*) FROM idempotency.lookup('w', 'k')") == 0 ]] ||
  fail "the expired key is still visible"

# A failing step (DDL refused by an event trigger) is logged as a warning with the error, and
# the next run tries again.
pid=$(launcher_pid)
q -d postgres <<'SQL'
CREATE FUNCTION refuse_ddl() RETURNS event_trigger LANGUAGE plpgsql AS
  $$ BEGIN RAISE EXCEPTION 'ddl refused for the test'; END $$;
CREATE EVENT TRIGGER refuse_ddl ON ddl_command_start EXECUTE FUNCTION refuse_ddl();
SQL
in_log() { [[ $(grep -c -- "$2" "$CLUSTER_LOG") -ge $1 ]]; }
poll --try 60 in_log 2 "WARNING:  idempotency: failed partition keys_p" ||
  fail "the failing steps were not logged as warnings (and retried)"
[[ $(grep -c "DETAIL:  ddl refused for the test" "$CLUSTER_LOG") -ge 2 ]] ||
  fail "the failing steps' error is not in the log"
[[ $(launcher_pid) == "$pid" ]] || fail "the launcher did not survive failing runs"
passed "failing steps logged, launcher $pid still running"
q -d postgres -c "DROP EVENT TRIGGER refuse_ddl"
poll 10 "maintenance resumed after the failure" sql_true \
  "SELECT max(range_end) > now() + interval '1 second' FROM idempotency.partitions"

# SIGHUP: a second database joins the list.
q -d postgres -c "CREATE DATABASE second"
q -d second -c "CREATE EXTENSION idempotency"
run0=$(q -c "SELECT max(run) FROM idempotency.maintenance_runs")
poll 60 "two more passes of the worker" sql_true \
  "SELECT count(*) >= 2 FROM idempotency.maintenance_runs WHERE run > $run0 AND caller = 'worker'"
[[ $(DB=second q -d second -c "SELECT count(*) FROM idempotency.partitions WHERE NOT is_default") == 0 ]] ||
  fail "database 'second' was maintained before it was configured"
q -d postgres -c "ALTER SYSTEM SET idempotency.database = 'postgres, second'" -c "SELECT pg_reload_conf()" >/dev/null
DB=second poll 10 "after SIGHUP the worker maintains database 'second'" sql_true \
  "SELECT count(*) >= 3 FROM idempotency.partitions WHERE NOT is_default"
grep -q "idempotency launcher reloaded its settings" "$CLUSTER_LOG" || fail "no reload line in the log"
[[ $(launcher_pid) == "$pid" ]] || fail "the launcher restarted on SIGHUP"

# A SIGHUP is handled without starting a pass early: with a 1-hour interval, reloads do not
# make the launcher run again (each pass creates partitions here, the width being 1 s).
reloads() { grep -c "idempotency launcher reloaded its settings" "$CLUSTER_LOG" || true; }
q -d postgres -c "ALTER SYSTEM SET idempotency.maintenance_interval = '1h'" -c "SELECT pg_reload_conf()" >/dev/null
poll --try 60 in_log 1 "idempotency launcher reloaded its settings (interval 3600 s" ||
  fail "the launcher did not reload the 1-hour interval"
poll 60 "no pass under way" sql_true \
  "SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'idempotency maintenance'"
passes() { grep -c "idempotency: created partition .* in database \"postgres\"" "$CLUSTER_LOG" || true; }
before=$(passes)
for i in 1 2 3; do
  n=$(reloads)
  q -d postgres -c "SELECT pg_reload_conf()" >/dev/null
  poll --try 60 in_log $((n + 1)) "idempotency launcher reloaded its settings" ||
    fail "reload $i was not handled"
done
# A pass started by a reload would show at once: a short window, as nothing is to be waited for.
sleep 1
[[ $(passes) == "$before" ]] || fail "reloads started maintenance passes before the interval"
[[ $(q -c "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'idempotency maintenance'") == 0 ]] ||
  fail "a reload started a maintenance pass"
[[ $(grep -c "idempotency launcher reloaded its settings" "$CLUSTER_LOG") -ge 5 ]] ||
  fail "not every reload was handled"
passed "reloads handled, no early pass"

# SIGTERM: the launcher exits cleanly and is not restarted; the server keeps running.
kill -TERM "$pid"
poll 5 "the launcher exited on SIGTERM" sql_true \
  "SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'idempotency launcher'"
grep -q "idempotency launcher shutting down" "$CLUSTER_LOG" || fail "no shutdown line in the log"
# A crashed launcher would be restarted after bgw_restart_time (10 s): watch that long.
sleep 11
[[ -z $(launcher_pid) ]] || fail "the launcher was restarted after SIGTERM"
grep -q "terminated by signal\|server process .* was terminated" "$CLUSTER_LOG" &&
  fail "a process crashed"
[[ $(q -d postgres -c "SELECT (idempotency.reserve('w', 'after')).outcome") == new ]] ||
  fail "reserve failed after the launcher stopped"
echo "worker_maintenance: $CHECKS checks passed"
