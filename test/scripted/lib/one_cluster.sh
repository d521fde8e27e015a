# shellcheck shell=bash
# For a test on one cluster of its own: cluster_setup NAME PORT (scripts/lib.sh), then source
# this. It gives
#   q ARGS...      psql on the cluster (database postgres unless -d says another; -qAt)
#   fail MESSAGE   prints it and the server log's tail, and exits 1
#   on_exit CMD    runs CMD (eval'd) at exit, before the cluster stops
#   on_fail CMD    runs CMD (eval'd) in fail, after the server log (more to show)
#   BG+=(PID)      background processes killed at exit
# and the checks of checks.sh. At exit it stops the cluster (and removes $WORK, if the test
# set one).
WORK=
BG=()
EXIT_HOOKS=()
FAIL_HOOKS=()
on_exit() { EXIT_HOOKS+=("$1"); }
on_fail() { FAIL_HOOKS+=("$1"); }
cleanup() {
  local p h
  for p in "${BG[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for h in "${EXIT_HOOKS[@]}"; do eval "$h" || true; done
  cluster_stop "${CLUSTER_DATA:-}" >/dev/null 2>&1 || true
  if [[ -n $WORK ]]; then rm -rf "$WORK"; fi
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  echo "--- server log"; tail -n 40 "$CLUSTER_LOG" || true
  local h
  for h in "${FAIL_HOOKS[@]}"; do eval "$h" || true; done
  exit 1
}
q() { cluster_psql "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" -d postgres -qAt "$@"; }
source "$(dirname "${BASH_SOURCE[0]}")/checks.sh"
