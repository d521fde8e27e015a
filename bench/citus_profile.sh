#!/usr/bin/env bash
# Where the time goes on Citus (issue 28): perf (Debian's linux-perf) on the backends of the
# coordinator and of the workers while pgbench (-M extended, 8 clients, through the
# coordinator) runs one workload, for the extension and the hand-written pattern:
#   ext_new / hand_new        a new request (see bench/citus.sh)
#   ext_replay / hand_select  a replay / an unlocked single-shard SELECT of the stored answer
# Prints per workload and side the CPU ms per request (perf's cpu-clock samples at 4000 Hz),
# the split by shared object and the functions with the largest inclusive share. The perf
# data stay in BENCH_PROFILE_DIR (default: a new directory under /tmp) for perf report.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
command -v perf >/dev/null || apt_install linux-perf >&2 || die "perf is not available"
why=$(ensure_citus) || die "Citus is not available: $why"
OUT=${BENCH_PROFILE_DIR:-$(mktemp -d /tmp/idem-citus-profile.XXXXXX)}
mkdir -p "$OUT"
SECONDS_PROFILED=${BENCH_PROFILE_SECONDS:-8}
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
for w in ext_new hand_new ext_replay hand_select; do vs_script "$w" $(seq 0 9) >"$OUT/$w.sql"; done
children() { # children DATA...: the PIDs of the clusters' backends, comma-separated
  local pms
  pms=$(for d in "$@"; do head -n 1 "$d/postmaster.pid"; done | paste -sd,)
  awk -v pms=",$pms," '{ s = $0; sub(/^.*\) /, "", s); split(s, f, " ")
      if (index(pms, "," f[2] ",")) print $1 }' /proc/[0-9]*/stat 2>/dev/null | paste -sd, ||
    true # awk exits 2 when a process ended between the glob and the read
}
for w in ext_new hand_new ext_replay hand_select; do
  "$PGBIN/pgbench" -n -M extended -h "$COORD_SOCK" -p "$COORD_PORT" -U postgres -c 8 -j 2 \
    -T $((SECONDS_PROFILED + 6)) -D base=0 -f "$OUT/$w.sql" postgres >"$OUT/$w.pgbench" 2>&1 &
  bench=$!
  sleep 3 # the clients connect
  perf record -q -g -o "$OUT/$w-coordinator.data" -p "$(children "$COORD_DATA")" \
    -- sleep "$SECONDS_PROFILED" >/dev/null 2>&1 &
  coordinator=$!
  perf record -q -g -o "$OUT/$w-workers.data" -p "$(children "$W1_DATA" "$W2_DATA")" \
    -- sleep "$SECONDS_PROFILED" >/dev/null 2>&1
  wait "$coordinator"
  wait "$bench" || { cat "$OUT/$w.pgbench" >&2; die "pgbench $w failed"; }
  tps=$(sed -nE 's/^tps = ([0-9.]+) .*/\1/p' "$OUT/$w.pgbench")
  for side in coordinator workers; do
    data=$OUT/$w-$side.data
    samples=$(perf report -i "$data" --stdio -g none 2>/dev/null |
      sed -nE 's/^# Samples: ([0-9.]+)([KM]?) .*/\1 \2/p' | head -n 1 |
      awk '{ print $1 * ($2 == "K" ? 1000 : $2 == "M" ? 1000000 : 1) }')
    echo
    echo "== $w, $side: $tps tps, $(awk -v s="$samples" -v t="$tps" -v d="$SECONDS_PROFILED" \
      'BEGIN { printf "%.3f", s / 4000 * 1000 / (t * d) }') CPU ms per request"
    perf report -i "$data" --no-children --sort dso --stdio -g none 2>/dev/null |
      grep -E '^ +[0-9]' | head -n 5 | awk '{ printf "%s %s; ", $1, $2 } END { print "" }'
    perf report -i "$data" --children --sort sym --stdio -g none 2>/dev/null |
      grep -E '^ +[0-9]' | grep -vE '0x0000|PostmasterMain|__libc_start|\] main$|PostgresMain' |
      head -n "${BENCH_PROFILE_SYMBOLS:-25}" | awk '{ $2 = ""; $3 = ""; print }'
  done
done
echo
echo "(perf data in $OUT; load average $(cut -d' ' -f1-3 /proc/loadavg))"
