# shellcheck shell=bash
# For a test with an old server (publisher) and a new one (subscriber). The test sets OLD_DATA,
# OLD_LOG, NEW_DATA, NEW_LOG, WORK and NEW_PGBIN (the new server's binaries; default: $PGBIN)
# before sourcing this. on_new COMMAND runs a lib.sh command with the new server's binaries;
# both servers stop (and $WORK goes) on exit; fail prints the message and both logs' tails
# (without the worker's routine partition lines), and exits 1.
NEW_PGBIN=${NEW_PGBIN:-$PGBIN}
on_new() { local PGBIN=$NEW_PGBIN; "$@"; }
cleanup() {
  on_new cluster_stop "$NEW_DATA" >/dev/null 2>&1 || true
  cluster_stop "$OLD_DATA" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
fail() {
  local routine="idempotency: \(created\|dropped\|purged\)"
  echo "FAIL: $*"
  echo "--- old server log"; grep -v "$routine" "$OLD_LOG" | tail -n 20 || true
  echo "--- new server log"; grep -v "$routine" "$NEW_LOG" | tail -n 30 || true
  exit 1
}
# wait_for WHAT SECONDS COMMAND...: until COMMAND prints t, polled; fails after SECONDS.
wait_for() {
  local what=$1 deadline=$((SECONDS + $2))
  shift 2
  until [[ $("$@" 2>/dev/null) == t ]]; do
    ((SECONDS < deadline)) || fail "timed out waiting for $what"
    sleep 0.5
  done
}
