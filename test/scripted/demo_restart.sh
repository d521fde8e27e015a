#!/usr/bin/env bash
# scripts/demo.sh: `stop` keeps the cluster's data and `start` starts it again with that data;
# a plain run says that it starts afresh (and how to keep the data), and does. On a demo
# cluster of its own (IDEM_DEMO_CLUSTER, IDEM_DEMO_PORT), never the reader's .cluster.
# idem: same on every major (the demo script, not the extension)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"

export IDEM_DEMO_CLUSTER=test-cluster/demo IDEM_DEMO_PORT=54497
cluster_setup "$IDEM_DEMO_CLUSTER" "$IDEM_DEMO_PORT"
source "$(dirname "${BASH_SOURCE[0]}")/lib/prelude.sh" cluster
out=$(mktemp)
on_exit 'rm -f "$out"'
demo() { bash "$IDEM_ROOT/scripts/demo.sh" "$@" >"$out" 2>&1 || fail "demo.sh $*: $(cat "$out")"; }

demo
grep -q "== 2. replay" "$out" || fail "the demo did not run: $(cat "$out")"
passed "demo.sh ran the demo"
q -c "CREATE TABLE kept (n int)" -c "INSERT INTO kept VALUES (42)"

demo stop
grep -q "demo.sh start" "$out" || fail "stop does not say how to start with the data: $(cat "$out")"
! cluster_running "$CLUSTER_DATA" || fail "the demo cluster still runs after stop"
passed "stop stops the cluster and says how to start it with its data"
demo start
expect "the stopped cluster's data, after start" "$(q -c "SELECT n FROM kept")" 42
demo stop

demo
grep -q "starting afresh" "$out" || fail "a plain run does not say that it starts afresh"
grep -q "to keep it instead: bash scripts/demo.sh start" "$out" ||
  fail "a plain run does not say how to keep the data"
passed "a plain run says that it starts afresh, and how to keep the data"
expect "no table of the earlier cluster after a fresh start" \
  "$(q -c "SELECT count(*) FROM pg_class WHERE relname = 'kept'")" 0
demo stop
echo "demo_restart: $CHECKS checks passed"
