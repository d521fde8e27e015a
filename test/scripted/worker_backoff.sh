#!/usr/bin/env bash
# The maintenance worker with a database it cannot use: one LOG line with a hint naming
# idempotency.database, then a back-off; no FATAL, no worker exit per interval. Routine passes
# (nothing to do) log nothing at LOG. The database becoming usable is picked up by itself.
# The server logs at DEBUG1: the retries and routine passes logged there are what the test
# counts instead of waiting for a number of seconds (a loaded machine runs fewer passes).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"

cluster_setup test-cluster/worker-backoff 54471
source "$(dirname "${BASH_SOURCE[0]}")/lib/prelude.sh" cluster
cluster_init "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" \
  "idempotency.database = 'app'" "idempotency.maintenance_interval = '1s'" \
  "log_min_messages = debug1"
rm -f "$CLUSTER_LOG" # lines are counted: only this run's
cluster_start "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK"

count() { grep -c -- "$1" "$CLUSTER_LOG" || true; }
# at_least N PATTERN [MARK]: N lines matching PATTERN in the log (since MARK)
at_least() { [[ $(log_count "$CLUSTER_LOG" "${3:-0}" "$2") -ge $1 ]]; }
routine_pass='DEBUG:  idempotency: maintained database "app"'
source "$(dirname "${BASH_SOURCE[0]}")/lib/worker.sh"

# 1. 'app' does not exist: over three tries (the first, then two retries of the back-off at
# DEBUG1), one LOG line and its hint, no FATAL.
poll 60 "the launcher retried a missing database twice" \
  at_least 2 'DEBUG:  idempotency: cannot maintain database "app": it does not exist'
n=$(count 'LOG:  idempotency: cannot maintain database "app": it does not exist')
[[ $n == 1 ]] || fail "expected 1 'cannot maintain' line at LOG over 3 tries, got $n"
[[ $(count "HINT:  Set idempotency.database to databases that exist") -ge 1 ]] ||
  fail "the line has no hint naming idempotency.database"
[[ $(count FATAL) == 0 ]] || fail "FATAL lines in the log: $(grep FATAL "$CLUSTER_LOG" | head -3)"
[[ $(count 'background worker "idempotency maintenance" (PID [0-9]*) exited') == 0 ]] ||
  fail "maintenance workers were started for a missing database"
passed "a missing database gives 1 LOG line with a hint over 3 tries, no FATAL"
pid=$(launcher_pid)
[[ -n $pid ]] || fail "the launcher is not running"

# 2. The database appears (with the extension): picked up within the back-off, logged once.
q -d postgres -c "CREATE DATABASE app"
q -d app -c "CREATE EXTENSION idempotency"
DB=app poll 30 "the worker maintains 'app' once it exists" sql_true \
  "SELECT count(*) >= 3 FROM idempotency.partitions WHERE NOT is_default"
[[ $(count 'idempotency: database "app" can be maintained again') == 1 ]] ||
  fail "no 'can be maintained again' line"

# 2b. maintenance_runs: the worker's runs say so; a failed run (an event trigger cancelling
# the DDL: the error ends the run) is recorded by the worker at once, in a new transaction.
[[ $(q -d app -c "SELECT count(*) >= 1 FROM idempotency.maintenance_runs WHERE caller = 'worker' AND result = 'ok'") == t ]] ||
  fail "no 'worker' run in maintenance_runs"
last=$(q -d app -c "SELECT partition FROM idempotency.partitions WHERE NOT is_default ORDER BY range_start DESC LIMIT 1")
q -d app <<SQL
CREATE FUNCTION cancel_ddl() RETURNS event_trigger LANGUAGE plpgsql AS
  \$\$ BEGIN RAISE EXCEPTION 'canceled for the test' USING ERRCODE = 'query_canceled'; END \$\$;
DROP TABLE idempotency.$last;
CREATE EVENT TRIGGER cancel_ddl ON ddl_command_start EXECUTE FUNCTION cancel_ddl();
SQL
DB=app poll 15 "a failed worker run is in maintenance_runs" sql_true \
  "SELECT count(*) >= 1 FROM idempotency.maintenance_runs WHERE caller = 'worker' AND result = 'failed' AND error = 'canceled for the test'"
q -d app -c "DROP EVENT TRIGGER cancel_ddl"
DB=app poll 15 "the worker's next run is ok again" sql_true \
  "SELECT result = 'ok' FROM idempotency.maintenance_runs ORDER BY run DESC LIMIT 1"
# (the ok run's lines are in the log once its row is visible: it logs before it commits)

# 3. Routine passes (nothing to create or drop) log nothing at LOG: 4 more passes, no new
# line from the worker beyond what was there.
mark=$(log_mark "$CLUSTER_LOG")
poll 60 "4 more routine passes" at_least 4 "$routine_pass" "$mark"
n=$(log_count "$CLUSTER_LOG" "$mark" 'LOG:  idempotency')
[[ $n == 0 ]] || fail "routine passes logged at LOG: $(tail -c +"$((mark + 1))" "$CLUSTER_LOG" | grep 'LOG:  idempotency')"
passed "routine passes are silent at LOG (no idempotency line at LOG over 4 passes)"

# 3b. Under pg_partman every pass returns a 'deferred' row: routine, so DEBUG1 only (it was a
# LOG line every interval).
q -d app -c "CREATE SCHEMA partman" -c "CREATE EXTENSION pg_partman SCHEMA partman" \
  -c "SELECT idempotency.use_partman()" >/dev/null
run0=$(q -d app -c "SELECT max(run) FROM idempotency.maintenance_runs")
DB=app poll 15 "the worker deferred to pg_partman in 3 passes" sql_true \
  "SELECT count(*) >= 3 FROM idempotency.maintenance_runs WHERE run > $run0 AND caller = 'worker' AND steps @> '[{\"action\": \"deferred\"}]'"
n=$(count 'LOG:  idempotency: deferred')
[[ $n == 0 ]] || fail "$n 'deferred' lines at LOG"
passed "passes under pg_partman log no 'deferred' line at LOG"

# 4. A database that does not allow connections: one LOG line again, no FATAL.
q -d postgres -c "ALTER DATABASE app ALLOW_CONNECTIONS false"
poll 60 "the launcher retried a database refusing connections twice" \
  at_least 2 'DEBUG:  idempotency: cannot maintain database "app": it does not allow connections'
n=$(count 'LOG:  idempotency: cannot maintain database "app": it does not allow connections')
[[ $n == 1 ]] || fail "expected 1 'does not allow connections' line at LOG, got $n"
[[ $(count FATAL) == 0 ]] || fail "FATAL lines in the log: $(grep FATAL "$CLUSTER_LOG" | head -3)"
[[ $(launcher_pid) == "$pid" ]] || fail "the launcher restarted"
passed "a database refusing connections gives 1 LOG line, no FATAL; launcher $pid still up"

# 5. idempotency.database = '' turns the worker off: the launcher idles, logs nothing more.
# (Nothing happens, so nothing can be waited for: the check watches a window as long as the
# back-off's next two tries would take.)
mark=$(log_mark "$CLUSTER_LOG")
q -d postgres -c "ALTER SYSTEM SET idempotency.database = ''" -c "SELECT pg_reload_conf()" >/dev/null
poll 60 "the launcher reloaded with no database" \
  at_least 1 'idempotency launcher reloaded its settings (.*databases "")' "$mark"
mark=$(log_mark "$CLUSTER_LOG")
sleep 6
n=$(log_count "$CLUSTER_LOG" "$mark" 'cannot maintain')
[[ $n == 0 ]] || fail "the worker kept trying with idempotency.database = ''"
passed "idempotency.database = '' turns the worker off"

# 6. DEBUG1 shows the routine lines (they exist, just below LOG).
q -d postgres -c "ALTER DATABASE app ALLOW_CONNECTIONS true" \
  -c "ALTER SYSTEM SET idempotency.database = 'app'" \
  -c "SELECT pg_reload_conf()" >/dev/null
mark=$(log_mark "$CLUSTER_LOG")
poll 60 "a routine pass logs at DEBUG1 once the worker is on again" \
  at_least 1 "$routine_pass" "$mark"
echo "worker_backoff: $CHECKS checks passed"
