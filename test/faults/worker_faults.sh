#!/usr/bin/env bash
# The maintenance worker under faults. An error in its pass: logged, a clean exit, and the
# next pass runs; inside maintain(), the failed run is recorded at once (caller 'worker'). A SIGTERM while a pass
# holds its lock on idempotency.keys: the pass is rolled back, the worker says it stopped on
# request and exits 0 (no crash, no lock left), and the launcher's next pass works.
set -euo pipefail
# shellcheck source=test/faults/lib.sh
source "$(dirname "$0")/lib.sh"
faults_cluster faults/worker 54395 "idempotency.maintenance_interval = 1"

worker_runs() { q -c "SELECT count(*) FROM idempotency.maintenance_runs WHERE caller = 'worker' AND $1"; }
start_worker() {
  q -c "ALTER SYSTEM SET idempotency.database = '$1'" -c "SELECT pg_reload_conf()" >/dev/null
}

# An error in the worker's pass, before maintain(): logged, and the launcher goes on with the
# next pass (a new worker) an interval later.
attach worker-pass error
start_worker postgres
two_failed_passes() {
  [[ $(test_log | grep -c 'ERROR:  error triggered for injection point idempotency-worker-pass') -ge 2 ]]
}
poll 60 "the worker logs the error, and the next pass runs" two_failed_passes
detach worker-pass
no_restart

# An error inside maintain() in the worker: the failed run is recorded at once.
attach maintain-lock error
poll 60 "the worker records its failed run" sql_true "SELECT count(*) >= 1 FROM idempotency.maintenance_runs
  WHERE caller = 'worker' AND result = 'failed'
  AND error = 'error triggered for injection point idempotency-maintain-lock'"
detach maintain-lock
poll 60 "a later pass of the worker succeeds" sql_true "SELECT count(*) >= 1 FROM idempotency.maintenance_runs
  WHERE caller = 'worker' AND result = 'ok'"
no_leftovers
no_restart

# A SIGTERM while the pass waits at a point, holding its lock on idempotency.keys.
start_worker ''
poll 60 "no worker pass is running" sql_true \
  "SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'idempotency maintenance'"
attach maintain-lock wait
start_worker postgres
poll 60 "a worker pass waits at the point" sql_true "SELECT count(*) = 1 FROM pg_stat_activity
  WHERE backend_type = 'idempotency maintenance' AND $(waiting_at maintain-lock)"
pid=$(q -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'idempotency maintenance'")
expect "it holds its lock on idempotency.keys" "$(q -c "SELECT count(*) FROM pg_locks
  WHERE pid = $pid AND relation = 'idempotency.keys'::regclass AND mode = 'ShareUpdateExclusiveLock'")" 1
detach maintain-lock
ok_runs=$(worker_runs "result = 'ok'")
q -c "SELECT pg_terminate_backend($pid)" >/dev/null
poll 60 "the worker has exited" sql_true "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid"
test_log | grep "LOG:  idempotency: maintenance of database \"postgres\" stopped on request" >/dev/null ||
  fail "the worker did not say it stopped on request"
passed "the worker stopped on request"
if test_log | grep -E "FATAL:  terminating background worker \"idempotency maintenance" >/dev/null; then
  fail "the worker died with FATAL instead of ending its pass"
fi
passed "no FATAL: the pass ended, rolled back"
no_leftovers
no_restart
poll 60 "the launcher's next pass works" sql_true "SELECT count(*) > $ok_runs FROM idempotency.maintenance_runs
  WHERE caller = 'worker' AND result = 'ok'"
no_restart
echo "$CHECKS checks passed"
