#!/usr/bin/env bash
# Where the time goes on Citus: perf (Debian's linux-perf; the cpu-clock event,
# which needs no hardware counters) on the backends of the coordinator and of the workers
# while pgbench (-M extended, 8 clients, through the coordinator) runs one workload, for the
# extension and the hand-written pattern:
#   ext_new / hand_new        a new request (see bench/citus.sh)
#   ext_replay / hand_select  a replay / an unlocked single-shard SELECT of the stored answer
# Prints per side (coordinator, workers) a table of CPU ms per request by area (each sample
# goes to the innermost function on its stack that names an area, see AREAS below), then per
# workload and side the split by shared object and the functions with the largest inclusive
# share. The perf data stay in BENCH_PROFILE_DIR (default: a new directory under /tmp) for
# perf report. BENCH_PROFILE_SECONDS (8) of perf per workload, BENCH_PROFILE_SYMBOLS (25).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
command -v perf >/dev/null || apt_install linux-perf >&2 || die "perf is not available"
why=$(ensure_citus) || die "Citus is not available: $why"
OUT=${BENCH_PROFILE_DIR:-$(mktemp -d /tmp/idem-citus-profile.XXXXXX)}
mkdir -p "$OUT"
SECONDS_PROFILED=${BENCH_PROFILE_SECONDS:-8}
SYMBOLS=${BENCH_PROFILE_SYMBOLS:-25}
WORKLOADS=(ext_new hand_new ext_replay hand_select)
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
citus_cluster_setup bench-citus-profile 54487
trap citus_cluster_stop EXIT
coord() { citus_node coord -qAt "$@"; }
citus_cluster_start
coord -c "CREATE TABLE orders (tenant text NOT NULL, id bigserial, key text NOT NULL, amount int,
                                PRIMARY KEY (tenant, id))" \
  -c "SELECT create_distributed_table('orders', 'tenant')" \
  -c "SELECT count(*) FROM idempotency.maintain()" -c "SELECT idempotency.distribute('orders')" \
  -c "CREATE TABLE fortress (tenant text NOT NULL, key text NOT NULL, status text NOT NULL,
                             request_hash bytea, response jsonb, PRIMARY KEY (tenant, key))" \
  -c "SELECT create_distributed_table('fortress', 'tenant', colocate_with => 'orders')" \
  -c "INSERT INTO fortress SELECT t::text, k::text, 'completed', '\\x01', '{\"ok\": true}'
      FROM generate_series(0, 9) t, generate_series(0, 99) k" >/dev/null
source "$(dirname "${BASH_SOURCE[0]}")/citus_workloads.sh"
replay_keys $(seq 0 9) | coord >/dev/null
for w in "${WORKLOADS[@]}"; do vs_script "$w" $(seq 0 9) >"$OUT/$w.sql"; done
children() { # children DATA...: the PIDs of the clusters' backends, comma-separated
  local pms
  pms=$(for d in "$@"; do head -n 1 "$d/postmaster.pid"; done | paste -sd,)
  awk -v pms=",$pms," '{ s = $0; sub(/^.*\) /, "", s); split(s, f, " ")
      if (index(pms, "," f[2] ",")) print $1 }' /proc/[0-9]*/stat 2>/dev/null | paste -sd, ||
    true # awk exits 2 when a process ended between the glob and the read
}
# The areas, innermost first: a sample counts for the first area, walking its stack from the
# sampled function outwards, one of whose functions it meets (a regular expression on the
# symbol; the rest is "other": the protocol loop, transaction start, snapshots, ...).
AREAS=(
  "the extension's own code (C++ and the storage calls it makes)|^idem(_|::)"
  "deparse (Citus: the query text sent to a worker)|^(get_query_def|deparse_shard_query|pg_get_query_def|set_deparse_for_query|SetTaskQueryIfShouldLazyDeparse)"
  "function call delegation (Citus: TryToDelegateFunctionCall, less deparse)|^TryToDelegateFunctionCall$"
  "fast-path router planning (Citus)|^(FastPathRouterQuery|FastPathPlanner|PlanFastPathDistributedStmt|FastPathRouterPlan)"
  "other planning (PostgreSQL's planner, distributed_planner)|^(pg_plan_queries|pg_plan_query|planner|standard_planner|distributed_planner)$"
  "parse and analyze|^(pg_parse_query|raw_parser|pg_analyze_and_rewrite|parse_analyze|pg_rewrite_query)"
  "commit (remote COMMIT on the coordinator, WAL flush on the workers)|^(CommitTransactionCommand|CommitTransaction|PrepareTransaction)$"
  "Citus remote execution (connections, send, receive, wait)|^(AdaptiveExecutor|CitusExecScan|RunDistributedExecution|ConnectionStateMachine)$"
  "executor, other|^(standard_ExecutorRun|standard_ExecutorStart|standard_ExecutorEnd|standard_ExecutorFinish|PortalRun|PortalStart|ExecutorRun|ExecutorStart)$"
  "client protocol (read from and write to pgbench)|^(pq_getbyte|pq_getmessage|pq_getbytes|socket_flush|internal_flush|secure_read|secure_write|pq_flush|ReadyForQuery)$"
)
# areas DATA: "area-index samples" per area (index ${#AREAS[@]}: other), from perf script.
areas() {
  local patterns
  patterns=$(printf '%s\n' "${AREAS[@]}" | cut -d'|' -f2- | paste -sd'\t')
  perf script -i "$1" -F ip,sym 2>/dev/null | awk -v patterns="$patterns" '
    BEGIN { n = split(patterns, p, "\t") }
    function flush(   i, a) {
      if (depth == 0) return
      for (i = 1; i <= depth; i++)
        for (a = 1; a <= n; a++) if (frame[i] ~ p[a]) { count[a - 1]++; depth = 0; return }
      count[n]++; depth = 0
    }
    NF == 0 { flush(); next }
    { frame[++depth] = $2 }
    END { flush(); for (a = 0; a <= n; a++) print a, count[a] + 0 }'
}
# cpu_ms DATA: the CPU ms the samples stand for (cpu-clock counts nanoseconds).
cpu_ms() {
  perf report -i "$1" --stdio -g none --sort dso 2>/dev/null |
    awk '/^# Event count \(approx\.\): / { print $NF / 1e6; exit }'
}
declare -A tps=() ms=()
for w in "${WORKLOADS[@]}"; do
  "$PGBIN/pgbench" -n -M extended -h "$COORD_SOCK" -p "$COORD_PORT" -U postgres -c 8 -j 2 \
    -T $((SECONDS_PROFILED + 6)) -D base=0 -f "$OUT/$w.sql" postgres >"$OUT/$w.pgbench" 2>&1 &
  bench=$!
  sleep 3 # the clients connect (and so do the coordinator's connections to the workers)
  perf record -e cpu-clock -F 4000 -q -g -o "$OUT/$w-coordinator.data" \
    -p "$(children "$COORD_DATA")" -- sleep "$SECONDS_PROFILED" >/dev/null 2>&1 &
  coordinator=$!
  perf record -e cpu-clock -F 4000 -q -g -o "$OUT/$w-workers.data" \
    -p "$(children "$W1_DATA" "$W2_DATA")" -- sleep "$SECONDS_PROFILED" >/dev/null 2>&1
  wait "$coordinator"
  wait "$bench" || { cat "$OUT/$w.pgbench" >&2; die "pgbench $w failed"; }
  grep -q "number of failed transactions: 0 " "$OUT/$w.pgbench" || die "$w: failed transactions"
  tps[$w]=$(sed -nE 's/^tps = ([0-9.]+) .*/\1/p' "$OUT/$w.pgbench")
  for side in coordinator workers; do
    data=$OUT/$w-$side.data
    # CPU ms per request: the samples' CPU time over the requests of the profiled seconds.
    ms[$w-$side]=$(awk -v c="$(cpu_ms "$data")" -v t="${tps[$w]}" -v d="$SECONDS_PROFILED" \
      'BEGIN { printf "%.3f", c / (t * d) }')
    areas "$data" >"$OUT/$w-$side.areas"
    perf report -i "$data" --no-children --sort dso --stdio -g none 2>/dev/null |
      grep -E '^ +[0-9]' >"$OUT/$w-$side.dso" || true
    perf report -i "$data" --children --sort sym --stdio -g none 2>/dev/null |
      grep -E '^ +[0-9]' >"$OUT/$w-$side.symbols" || true
  done
  log "$w: ${tps[$w]} tps"
done
# One table per side: CPU ms per request by area (share of the side's CPU in parentheses).
for side in coordinator workers; do
  echo
  echo "$side, CPU ms per request (share):"
  echo
  printf '| area |'
  printf ' %s |' "${WORKLOADS[@]}"
  echo
  printf '|---|'
  printf -- '---|%.0s' "${WORKLOADS[@]}"
  echo
  for a in $(seq 0 ${#AREAS[@]}); do
    if [[ $a -lt ${#AREAS[@]} ]]; then label=${AREAS[$a]%%|*}; else label="other"; fi
    printf '| %s |' "$label"
    for w in "${WORKLOADS[@]}"; do
      awk -v a="$a" -v m="${ms[$w-$side]}" '{ total += $2; if ($1 == a) mine = $2 }
        END { printf " %.3f (%.0f%%) |", total ? m * mine / total : 0, total ? 100 * mine / total : 0 }' \
        "$OUT/$w-$side.areas"
    done
    echo
  done
  printf '| **total** |'
  for w in "${WORKLOADS[@]}"; do printf ' **%s** |' "${ms[$w-$side]}"; done
  echo
done
echo
printf 'TPS under perf:'
for w in "${WORKLOADS[@]}"; do printf ' %s %s;' "$w" "${tps[$w]}"; done
echo
for w in "${WORKLOADS[@]}"; do
  for side in coordinator workers; do
    echo
    echo "== $w, $side: ${tps[$w]} tps, ${ms[$w-$side]} CPU ms per request"
    sed -n 1,5p "$OUT/$w-$side.dso" | awk '{ printf "%s %s; ", $1, $2 } END { print "" }'
    grep -vE '0x0000|PostmasterMain|__libc_start|\] main$|PostgresMain' "$OUT/$w-$side.symbols" |
      sed -n "1,${SYMBOLS}p" | awk '{ $2 = ""; $3 = ""; print }'
  done
done
echo
echo "(perf data in $OUT; $SECONDS_PROFILED s per workload; load average before: $LOAD_BEFORE," \
  "after: $(cut -d' ' -f1-3 /proc/loadavg))"
