# shellcheck shell=bash
# For a test on one cluster of its own: cluster_setup NAME PORT (scripts/lib.sh), then source
# this. It stops the cluster (and removes $WORK, if the test set one) on exit; fail prints
# the message and the server log's tail, and exits 1.
WORK=
cleanup() {
  cluster_stop "$CLUSTER_DATA" >/dev/null 2>&1 || true
  if [[ -n $WORK ]]; then rm -rf "$WORK"; fi
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  echo "--- server log"; tail -n 20 "$CLUSTER_LOG" || true
  exit 1
}
