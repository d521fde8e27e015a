#!/usr/bin/env bash
# maintain() creating and dropping partitions while pgbench runs reserves: no reserve fails,
# partitions are really dropped meanwhile, and the reserve stall (max and p99 latency) is
# reported against a run without maintenance. 1-second partitions, 1-second leases, 2-second
# retention (counted from the end of the lease).
# On a loaded machine maintain() may skip a drop (lock_timeout) while the load runs: the
# maintained load goes on (up to 4 rounds) until a partition was dropped under it, and once
# the load stops the next maintain() must leave no expired partition.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"

SECONDS_PER_RUN=${IDEM_LOAD_SECONDS:-8}
cluster_setup test-cluster/maintain-load 54463
source "$(dirname "${BASH_SOURCE[0]}")/lib/prelude.sh" cluster
WORK=$(mktemp -d /tmp/idem-maintain-load.XXXXXX)
chmod 777 "$WORK"
cluster_init "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" \
  "idempotency.partition_width = '1s'" "idempotency.premake = 2" \
  "idempotency.maintenance_lock_timeout = '100ms'" "fsync = off" "synchronous_commit = off"
cluster_start "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK"

q -c "CREATE EXTENSION idempotency" -c "SELECT count(*) FROM idempotency.maintain()" >/dev/null
cat >"$WORK/reserve.sql" <<'SQL'
\set r random(1, 1000000000)
SELECT (idempotency.reserve('load', :client_id || '-' || :r, NULL, '1 s', '2 s')).outcome;
SQL

# run_pgbench NAME: 4 clients; writes "tps p99_ms max_ms" to $WORK/NAME.stats and fails on
# any aborted client.
run_pgbench() {
  local name=$1 rc=0
  (cd "$WORK" && "$PGBIN/pgbench" -h "$CLUSTER_SOCK" -p "$CLUSTER_PORT" -U postgres -n \
    -c 4 -j 2 -T "$SECONDS_PER_RUN" -f reserve.sql -l --log-prefix="$name" postgres \
    >"$WORK/$name.out" 2>&1) || rc=$?
  if [[ $rc -ne 0 ]] || grep -qi "aborted\|error" "$WORK/$name.out"; then
    cat "$WORK/$name.out"
    fail "pgbench ($name) had errors"
  fi
  local tps
  tps=$(sed -nE 's/^tps = ([0-9.]+).*/\1/p' "$WORK/$name.out" | head -n1)
  # log lines: client_id transaction_no latency_us script_no epoch epoch_us
  cat "$WORK/$name".[0-9]* | awk '{print $3}' | sort -n | awk -v tps="$tps" '
    { v[NR] = $1 } END { printf "%s %.2f %.2f\n", tps, v[int(NR * 0.99)] / 1000, v[NR] / 1000 }' \
    >"$WORK/$name.stats"
}

run_pgbench baseline
read -r base_tps base_p99 base_max <"$WORK/baseline.stats"

# Without maintenance the baseline's later keys went to the default partition: catch up
# first (that move runs under the exclusive lock), so the run below measures steady state.
catchup_ms=$(
  start=$(date +%s%N); q -c "SELECT count(*) FROM idempotency.maintain()" >/dev/null
  echo $((($(date +%s%N) - start) / 1000000)))
default_rows=$(q -c "SELECT count(*) FROM ONLY idempotency.keys_default")

# The same load with maintain() every 0.3 s (a pace, not a wait), until a drop happened.
(
  while [[ ! -f $WORK/stop ]]; do
    q -c "SELECT action FROM idempotency.maintain()" >>"$WORK/actions" 2>>"$WORK/maintain.err" || true
    [[ -n ${IDEM_LOAD_DEBUG:-} ]] && date +%s.%N >>"$WORK/ticks"
    sleep 0.3
  done
) &
loop=$!
BG+=("$loop")
for round in 1 2 3 4; do
  run_pgbench "maintained$round"
  read -r tps p99 max <"$WORK/maintained$round.stats"
  grep -q '^dropped$' "$WORK/actions" && break
done
touch "$WORK/stop"
wait "$loop"

[[ -n ${IDEM_LOAD_DEBUG:-} ]] && { cat "$WORK"/maintained*.[0-9]* | sort -k3 -n | tail -5; cat "$WORK/ticks" | tail -40; }
[[ -s $WORK/maintain.err ]] && { cat "$WORK/maintain.err"; fail "maintain() raised errors"; }
dropped=$(grep -c '^dropped$' "$WORK/actions" || true)
created=$(grep -c '^created$' "$WORK/actions" || true)
skipped=$(grep -c '^skipped$' "$WORK/actions" || true)
failed=$(grep -c '^failed$' "$WORK/actions" || true)
[[ $failed -eq 0 ]] || fail "$failed maintain() steps failed"
[[ $dropped -gt 0 ]] || fail "maintain() dropped no partition during the run"
piled=$(q -c "SELECT count(*) FROM idempotency.partitions WHERE due_to_drop")
# Expired as of a time taken before maintain() reads its clock: with 1-second partitions,
# due_to_drop (now() of a later statement) also counts one that ended since. maintain() runs
# again while it skipped a step (lock_timeout: say an autovacuum of a partition), 5 times at
# most.
cutoff=$(q -c "SELECT clock_timestamp()")
for _ in 1 2 3 4 5; do
  actions=$(q -c "SELECT action FROM idempotency.maintain()")
  grep -qx skipped <<<"$actions" || break
done
[[ $(q -c "SELECT count(*) FROM idempotency.partitions
  WHERE NOT is_default AND range_end <= '$cutoff'") == 0 ]] ||
  fail "once the load stopped, maintain() left expired partitions"

echo "reserves without maintain(): $base_tps tps, p99 $base_p99 ms, max $base_max ms"
echo "reserves with maintain():    $tps tps, p99 $p99 ms, max $max ms (round $round)"
echo "maintain(): $created partitions created, $dropped dropped, $skipped steps skipped (lock_timeout); $piled expired partitions when the load stopped"
echo "reserve stall (max latency with maintain() minus without): $(awk -v a="$max" -v b="$base_max" 'BEGIN { printf "%.2f", a - b }') ms"
echo "catch-up maintain() after the unmaintained baseline: $catchup_ms ms (default partition left with $default_rows rows)"
echo "PASS: no reserve failed"
