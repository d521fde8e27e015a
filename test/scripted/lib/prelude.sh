# shellcheck shell=bash
# The one prelude of the shell tests (test/scripted, test/faults, test/citus): source
# scripts/lib.sh (the cluster_* helpers) first, then `source test/scripted/lib/prelude.sh KIND`.
#
# Every KIND gives
#   fail MESSAGE           prints FAIL: MESSAGE, runs the on_fail hooks (logs to show), exits 1
#   on_exit CMD            runs CMD (eval'd) at exit, in the order added, before the KIND's
#                          servers stop
#   on_fail CMD            runs CMD (eval'd) in fail
#   BG+=(PID)              background processes killed (-9) at exit
#   WORK                   a folder removed at exit, if the test sets it (after sourcing this)
#   passed WHAT / ok WHAT  one more check passed: prints "ok: WHAT" (CHECKS counts them, for
#                          the test's last line)
#   expect WHAT ACTUAL WANTED    ACTUAL must equal WANTED
#   poll SECONDS WHAT CMD...     the one wait: runs CMD every 0.2 s until it succeeds, then
#                                passed WHAT; fails with "WHAT (not within SECONDS s)" after
#                                SECONDS. Tests wait for a condition this way, never for a
#                                length of time (a loaded machine is slow).
#   poll --try SECONDS CMD...    the same bounded wait without the check: false after SECONDS
#                                (the caller says what went wrong, or goes on)
#   sql_true SQL           a condition for poll: SQL (through q, in database $DB, default
#                          postgres) returns t
#   prints_t CMD...        a condition for poll: CMD prints t
#   log_mark LOG           the log's size now, for log_count
#   log_count LOG MARK PATTERN   lines matching PATTERN (grep) written since MARK
# and, by KIND:
#   cluster        the cluster of cluster_setup NAME PORT (CLUSTER_DATA, _PORT, _SOCK, _LOG):
#                  q ARGS... is psql -qAt on it (database postgres unless -d says another);
#                  it is stopped at exit and fail shows its log's tail
#   test_cluster   databases of the test's own on the test command's cluster (PGHOST, PGPORT,
#                  PGUSER from scripts/test.sh): q ARGS... is psql -qAt on $DB (postgres if
#                  unset; a -d of its own wins); own_database DB (re)creates DB, dropped (WITH
#                  FORCE) at exit
#   two_servers    an old server (publisher) and a new one (subscriber): the test sets OLD_DATA,
#                  OLD_LOG, NEW_DATA, NEW_LOG and NEW_PGBIN (the new server's binaries; default
#                  $PGBIN) before sourcing this; on_new CMD runs a lib.sh command with the new
#                  server's binaries; both stop at exit and fail shows both logs' tails
#                  (without the worker's routine partition lines)
#   none           servers of the test's own, which it stops and shows through on_exit and
#                  on_fail (test/citus/common.sh, failover.sh, pg_upgrade.sh), or none at all
WORK=
BG=()
EXIT_HOOKS=()
FAIL_HOOKS=()
CHECKS=0
on_exit() { EXIT_HOOKS+=("$1"); }
on_fail() { FAIL_HOOKS+=("$1"); }
cleanup() {
  local p h
  for p in "${BG[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for h in "${EXIT_HOOKS[@]}"; do eval "$h" || true; done
  stop_servers >/dev/null 2>&1 || true
  if [[ -n $WORK ]]; then rm -rf "$WORK"; fi
}
trap cleanup EXIT
fail() {
  local h
  echo "FAIL: $*"
  for h in "${FAIL_HOOKS[@]}"; do eval "$h" || true; done
  exit 1
}
passed() {
  CHECKS=$((CHECKS + 1))
  echo "ok: $*"
}
ok() { passed "$@"; }
expect() {
  [[ $2 == "$3" ]] || fail "$1: got '$2', want '$3'"
  passed "$1"
}
poll() {
  local try=false limit what=
  if [[ $1 == --try ]]; then
    try=true
    shift
  fi
  limit=$1
  shift
  if ! $try; then
    what=$1
    shift
  fi
  local end=$((SECONDS + limit))
  until "$@"; do
    if ((SECONDS >= end)); then
      $try && return 1
      fail "$what (not within ${limit}s)"
    fi
    sleep 0.2
  done
  $try || passed "$what"
}
sql_true() { [[ $(q -d "${DB:-postgres}" -c "$1") == t ]]; }
prints_t() { [[ $("$@" 2>/dev/null) == t ]]; }
log_mark() { stat -c %s "$1"; }
log_count() { tail -c +"$(($2 + 1))" "$1" | grep -c -- "$3" || true; }
stop_servers() { :; }

case ${1:-none} in
  cluster)
    q() { cluster_psql "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" -d postgres -qAt "$@"; }
    stop_servers() { cluster_stop "${CLUSTER_DATA:-}"; }
    on_fail 'echo "--- server log"; tail -n 40 "${CLUSTER_LOG:-/dev/null}"'
    ;;
  test_cluster)
    PGBIN=${PGBIN:-$(pg_config --bindir)}
    OWN_DATABASES=()
    q() { "$PGBIN/psql" -X -v ON_ERROR_STOP=1 -qAt -d "${DB:-postgres}" "$@"; }
    own_database() {
      q -d postgres -c "SET client_min_messages = warning" \
        -c "DROP DATABASE IF EXISTS $1 WITH (FORCE)" -c "CREATE DATABASE $1"
      OWN_DATABASES+=("$1")
    }
    drop_own_databases() {
      local db
      for db in "${OWN_DATABASES[@]}"; do
        q -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
      done
    }
    on_exit drop_own_databases
    ;;
  two_servers)
    NEW_PGBIN=${NEW_PGBIN:-$PGBIN}
    on_new() { local PGBIN=$NEW_PGBIN; "$@"; }
    stop_servers() {
      on_new cluster_stop "$NEW_DATA" || true
      cluster_stop "$OLD_DATA"
    }
    # shellcheck disable=SC2034 # read by the on_fail hooks below
    ROUTINE_LINES="idempotency: \(created\|dropped\|purged\)"
    on_fail 'echo "--- old server log"; grep -v "$ROUTINE_LINES" "$OLD_LOG" | tail -n 20'
    on_fail 'echo "--- new server log"; grep -v "$ROUTINE_LINES" "$NEW_LOG" | tail -n 30'
    ;;
  none) ;;
  *)
    echo "prelude.sh: unknown kind '$1' (cluster, test_cluster, two_servers, none)" >&2
    exit 2
    ;;
esac
