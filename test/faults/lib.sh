# shellcheck shell=bash
# For the faults suite (test/faults/*.sh, `IDEM_SUITES=faults bash scripts/test.sh`): each test
# drives the extension's fault points (src/pg/fault_points.hpp) on a cluster of its own.
#   faults_cluster NAME PORT [setting=value ...]   a fresh cluster, the extension created
#   q [psql args]            psql -qAt on it (database postgres), and the rest of the prelude
#                            (test/scripted/lib/prelude.sh: fail, on_exit, the checks, poll)
#   run_error SQL            runs SQL, which must fail; prints psql's error output (verbose)
#   attach POINT ACTION      POINT is the name after "idempotency-"; ACTION error, notice, wait
#   detach POINT
#   waiting_at POINT         SQL condition "this pg_stat_activity row waits at POINT"
#   test_log                 the server log since this test started its cluster
#   no_restart               the postmaster never restarted a crashed backend
#   no_leftovers             no other backend holds a lock on a key or on idempotency.keys
# On a server with injection points (17 and later built with --enable-injection-points), POINT
# is attached with the injection_points module; elsewhere the installed build must be the
# faults build (make IDEM_FAULT_POINTS=1), driven by ALTER DATABASE ... SET
# idempotency.fault_points (new sessions, the maintenance worker included, see it).
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
# shellcheck source=test/scripted/lib/prelude.sh
source "$IDEM_ROOT/test/scripted/lib/prelude.sh" cluster
# shellcheck source=test/scripted/lib/worker.sh
source "$IDEM_ROOT/test/scripted/lib/worker.sh"

pg_major() { "$PG_CONFIG" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/'; }

if [[ $(pg_major) -ge 17 ]] &&
  grep '^#define USE_INJECTION_POINTS 1' "$("$PG_CONFIG" --includedir-server)/pg_config.h" >/dev/null; then
  FAULT_MODE=injection_points
else
  FAULT_MODE=setting
fi

faults_cluster() {
  cluster_setup "$1" "$2"
  shift 2
  cluster_init "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" "$@" || fail "initdb"
  # The server log is appended to across runs: this test reads its own part only.
  LOG_START=$(stat -c %s "$CLUSTER_LOG" 2>/dev/null || echo 0)
  cluster_start "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" || fail "start"
  q -c "CREATE EXTENSION idempotency" >/dev/null
  if [[ $FAULT_MODE == injection_points ]]; then
    q -c "CREATE EXTENSION injection_points" >/dev/null
  elif [[ $(q -c "SELECT count(*) FROM pg_settings WHERE name = 'idempotency.fault_points'") != 1 ]]; then
    fail "the installed idempotency has no fault points: install a build made with" \
      "make IDEM_FAULT_POINTS=1 (IDEM_SUITES=faults bash scripts/test.sh does)"
  fi
  echo "fault points: $FAULT_MODE (PostgreSQL $(pg_major))"
}

attach() {
  if [[ $FAULT_MODE == injection_points ]]; then
    q -c "SELECT injection_points_attach('idempotency-$1', '$2')" >/dev/null
  else
    q -c "ALTER DATABASE postgres SET idempotency.fault_points = 'idempotency-$1=$2'"
  fi
}

detach() {
  if [[ $FAULT_MODE == injection_points ]]; then
    q -c "SELECT injection_points_detach('idempotency-$1')" >/dev/null
  else
    q -c "ALTER DATABASE postgres RESET idempotency.fault_points"
  fi
}

# The injection_points module waits under a wait event named after the point; the faults
# build waits under the generic one of extensions.
waiting_at() {
  if [[ $FAULT_MODE == injection_points ]]; then
    echo "wait_event = 'idempotency-$1'"
  else
    echo "wait_event_type = 'Extension' AND wait_event = 'Extension'"
  fi
}

run_error() {
  local out
  if out=$(q -v VERBOSITY=verbose -c "$1" 2>&1); then
    fail "no error from: $1 (output: $out)"
  fi
  echo "$out"
}

test_log() { tail -c +$((LOG_START + 1)) "$CLUSTER_LOG"; }

no_restart() {
  if test_log | grep -E 'terminated by signal|was terminated by exception|all server processes terminated' \
    >/dev/null; then
    fail "the postmaster restarted: $(test_log | grep -E 'terminated by' | head -n 3)"
  fi
  passed "no backend crashed, the postmaster never restarted"
}

no_leftovers() {
  expect "no lock of another backend on a key or on idempotency.keys" "$(q -c "
    SELECT count(*) FROM pg_locks l
    WHERE l.pid <> pg_backend_pid() AND (l.locktype = 'advisory' OR l.relation IN (
      SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = 'idempotency'))")" 0
}
