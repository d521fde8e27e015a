#!/usr/bin/env bash
# Storm on a Citus cluster: CLIENTS (16) pgbench clients through the coordinator for DURATION
# (20) s over 50 hot keys (5 per tenant, 10 tenants spread over both workers), each request
# BEGIN; reserve; if new: business INSERT + complete; COMMIT. Pass: no client error, no
# deadlock on any node, exactly one business row per completed key and none without one, no
# prepared transaction left on any node.
# Then the fault: the same load split by worker, and the worker of tenants B stopped with
# -m immediate in the middle. Its clients fail cleanly (an error, no hang); the other worker's
# clients finish with no error; once the worker is back nothing is doubled or lost and its
# tenants work again.
set -euo pipefail
CITUS_NAME=citus-storm CITUS_PORT=54463
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
CLIENTS=${CLIENTS:-16}
DURATION=${DURATION:-20}
KEYS_PER_TENANT=5
WORK=$(mktemp -d /tmp/idem-citus-storm.XXXXXX)
citus_setup "deadlock_timeout = 100ms"

tenants_on() { # tenants_on NODE: quoted, comma-separated tenants of that worker
  local t list=()
  for t in $(seq 0 9); do [[ $(node_of "tenant-$t") == "$1" ]] && list+=("'tenant-$t'"); done
  (IFS=,; echo "${list[*]}")
}
T1=$(tenants_on w1)
T2=$(tenants_on w2)
[[ -n $T1 && -n $T2 ]] || fail "the 10 tenants are not spread over both workers ($T1 / $T2)"
echo "tenants on w1: $T1; on w2: $T2"

# script FILE TENANTS: the request, over the given tenants.
script() {
  local n
  n=$(echo "$2" | tr ',' '\n' | wc -l)
  cat >"$1" <<SQL
\\set ti random(1, $n)
\\set k random(1, $KEYS_PER_TENANT)
SELECT (ARRAY[$2])[:ti] AS scope,
       'g' || (extract(epoch FROM clock_timestamp()))::bigint % 100000000 || '-k' || :k AS key \\gset
BEGIN;
SELECT (outcome = 'new')::int AS is_new, coalesce(attempt, 0) AS attempt
  FROM idempotency.reserve(':scope', ':key', wait => '20 milliseconds') \\gset
\\if :is_new
INSERT INTO orders (tenant, key, amount) VALUES (':scope', ':key', :attempt);
SELECT idempotency.complete(':scope', ':key', 201, '{"ok": true}', :attempt);
\\endif
COMMIT;
SQL
}
bench() { # bench LOG CLIENTS SECONDS SCRIPT
  "$PGBIN/pgbench" -n -h "$COORD_SOCK" -p "$COORD_PORT" -U postgres -c "$2" -j 2 -T "$3" \
    -f "$4" postgres >"$1" 2>&1
}
deadlocks() {
  local n total=0 c
  for n in coord w1 w2; do
    c=$(citus_node "$n" -qAt -c "SELECT coalesce(sum(deadlocks), 0) FROM pg_stat_database")
    total=$((total + c))
  done
  echo "$total"
}

# --- the storm ------------------------------------------------------------------------------
script "$WORK/all.pgbench" "$T1,$T2"
echo "storm: $CLIENTS clients, 50 keys over 10 tenants, $DURATION s"
rc=0
bench "$WORK/storm.log" "$CLIENTS" "$DURATION" "$WORK/all.pgbench" || rc=$?
grep -E "^(number of|latency average|tps)" "$WORK/storm.log" || true
if [[ $rc -ne 0 ]] || grep -qE "aborted|ERROR" "$WORK/storm.log"; then
  grep -E "aborted|ERROR" "$WORK/storm.log" | head -n 20
  fail "pgbench exited $rc: a client got an error"
fi
expect "storm: no client error" ok ok
tx=$(sed -nE 's/^number of transactions actually processed: ([0-9]+).*/\1/p' "$WORK/storm.log")
[[ ${tx:-0} -gt 50 ]] || fail "only ${tx:-0} transactions ran"
completed=$(coord -c "SELECT count(*) FROM idempotency.keys WHERE state = 'completed'")
[[ $completed -gt 0 ]] || fail "no key completed"
echo "$tx requests, $completed keys completed"
c1=$(coord -c "SELECT count(*) FROM idempotency.keys WHERE state = 'completed' AND scope IN ($T1)")
c2=$(coord -c "SELECT count(*) FROM idempotency.keys WHERE state = 'completed' AND scope IN ($T2)")
echo "completed keys: $c1 on w1, $c2 on w2"
[[ $c1 -gt 0 && $c2 -gt 0 ]] || fail "keys were not completed on both workers ($c1 / $c2)"
expect "storm: keys completed on both workers" ok ok
check_books "storm"
expect "storm: no deadlock on any node" "$(deadlocks)" "0"
expect "storm: no prepared transaction on any node" "$(prepared_xacts)" "0"
for n in coord w1 w2; do expect "storm: shell tables empty on $n" "$(shell_bytes "$n")" "0"; done

# --- a worker stopped with -m immediate mid-storm -------------------------------------------
script "$WORK/w1.pgbench" "$T1"
script "$WORK/w2.pgbench" "$T2"
half=$((CLIENTS / 2))
rc1=0 rc2=0
orders0=$(coord -c "SELECT count(*) FROM orders")
bench "$WORK/fault-w1.log" "$half" "$DURATION" "$WORK/w1.pgbench" & p1=$!
bench "$WORK/fault-w2.log" "$half" "$DURATION" "$WORK/w2.pgbench" & p2=$!
# The crash comes once the load is under way: every client connected, business rows written.
load_running() {
  [[ $(coord -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgbench'") == $((2 * half)) &&
     $(coord -c "SELECT count(*) FROM orders") -ge $((orders0 + 20)) ]]
}
poll --try "$DURATION" load_running || fail "the load did not get going within $DURATION s"
kill -0 "$p2" 2>/dev/null || fail "worker 2's clients ended before the crash"
cluster_crash "$W2_DATA"
echo "worker 2 stopped with -m immediate"
start=$(date +%s)
wait "$p2" || rc2=$?
wait "$p1" || rc1=$?
grep -E "^(number of|tps)" "$WORK/fault-w1.log" || true
if [[ $rc1 -ne 0 ]] || grep -qE "aborted|ERROR" "$WORK/fault-w1.log"; then
  grep -E "aborted|ERROR" "$WORK/fault-w1.log" | head -n 20
  fail "a client of worker 1's tenants got an error while worker 2 was down"
fi
expect "fault: worker 1's tenants kept working without error" ok ok
[[ $rc2 -ne 0 ]] || fail "worker 2's clients saw no error although it was stopped"
grep -E "ERROR|aborted|connection" "$WORK/fault-w2.log" | head -n 3 | sed 's/^/    /'
expect "fault: worker 2's requests failed with an error" ok ok
tx1=$(sed -nE 's/^number of transactions actually processed: ([0-9]+).*/\1/p' "$WORK/fault-w1.log")
[[ ${tx1:-0} -gt 0 ]] || fail "worker 1's clients processed nothing"
cluster_start "$W2_DATA" || fail "worker 2 did not restart"
# The coordinator reconnects; tenant requests on worker 2 work again.
t2=$(echo "$T2" | cut -d, -f1 | tr -d "'")
w2_tenant_answers() { coord -c "SELECT count(*) FROM idempotency.lookup('$t2', 'probe')" >/dev/null 2>&1; }
poll --try 60 w2_tenant_answers || true
expect "fault: worker 2's tenant works again" "$(coord -c "BEGIN" \
  -c "SELECT outcome FROM idempotency.reserve('$t2', 'after-restart')" \
  -c "INSERT INTO orders (tenant, key, amount) VALUES ('$t2', 'after-restart', 1)" \
  -c "SELECT idempotency.complete('$t2', 'after-restart', 201, '{}')" -c "COMMIT" | head -n 1)" "new"
check_books "after the fault"
# Claims cut off by the crash were never committed (one-shard requests: no in-doubt state).
expect "after the fault: no claim left processing" \
  "$(coord -c "SELECT count(*) FROM idempotency.keys WHERE state = 'processing'")" "0"
expect "after the fault: no prepared transaction on any node" "$(prepared_xacts)" "0"
echo "$CHECKS checks passed"
