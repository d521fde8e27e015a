#!/usr/bin/env bash
# Citus overhead, in one run on this machine: the same requests against a single server and
# through the coordinator of a three-node Citus cluster (scripts/lib.sh; all on this host).
#   W2     BEGIN; reserve; business insert; complete; COMMIT    (one tenant: one shard)
#   W3     reserve of a completed key (replay), autocommit
#   W2x2   W2 whose business row belongs to a tenant on the other worker (two shards: 2PC)
#   W2nc   W2 into a table distributed by tenant but NOT co-located with the keys
# Then the extension against the hand-written pattern it replaces, on the same cluster, with
# the tenant and key as bound parameters (pgbench -M extended, as drivers send them):
#   new      BEGIN; reserve; insert; complete; COMMIT  against  BEGIN; INSERT INTO fortress
#            ... ON CONFLICT DO NOTHING; insert; UPDATE fortress; COMMIT
#   replay   reserve of a completed key  against  the locked replay (INSERT ... ON CONFLICT DO
#            NOTHING; SELECT ... FOR UPDATE) and an unlocked SELECT of the stored answer
#   storm    16 clients on 50 hot keys, both patterns: one business row per key
# each through the coordinator and with the clients connected to their tenant's worker
# directly (one pgbench per worker, over the tenants whose shards it holds), with the CPU per
# request spent by each cluster's processes (from /proc).
# BENCH_CLIENTS (8) pgbench clients, BENCH_DURATION (10) s per run, BENCH_ROUNDS (2) rounds
# with the order rotated (BENCH_VS_ROUNDS, 3, for the comparison), BENCH_STORM_DURATION (10)
# s per storm; the median TPS per target and workload is printed as markdown tables, then
# each round's ratios (bench/pages/citus-pattern.md).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
CLIENTS=${BENCH_CLIENTS:-8}
DURATION=${BENCH_DURATION:-10}
ROUNDS=${BENCH_ROUNDS:-2}
VS_ROUNDS=${BENCH_VS_ROUNDS:-3}
STORM_DURATION=${BENCH_STORM_DURATION:-10}
why=$(ensure_citus) || die "Citus is not available: $why"
WORK=$(mktemp -d /tmp/idem-bench-citus.XXXXXX)
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
cluster_setup bench-citus/single 54480
S_DATA=$CLUSTER_DATA S_PORT=$CLUSTER_PORT S_SOCK=$CLUSTER_SOCK
citus_cluster_setup bench-citus 54481
trap 'citus_cluster_stop; cluster_stop "$S_DATA" >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT
single() { cluster_psql "$S_DATA" "$S_PORT" "$S_SOCK" -d postgres -qAt "$@"; }
coord() { citus_node coord -qAt "$@"; }

cluster_init "$S_DATA" "$S_PORT" "$S_SOCK" "max_connections = 200"
cluster_start "$S_DATA"
citus_cluster_start
SCHEMA="CREATE TABLE orders (tenant text NOT NULL, id bigserial, key text NOT NULL, amount int,
                              PRIMARY KEY (tenant, id));"
single -c "CREATE EXTENSION idempotency" -c "$SCHEMA" -c "SELECT count(*) FROM idempotency.maintain()" >/dev/null
coord -c "$SCHEMA" -c "SELECT create_distributed_table('orders', 'tenant')" \
  -c "SELECT count(*) FROM idempotency.maintain()" \
  -c "SELECT idempotency.distribute('orders')" \
  -c "CREATE TABLE orders_nc (LIKE orders INCLUDING DEFAULTS)" \
  -c "SELECT create_distributed_table('orders_nc', 'tenant', colocate_with => 'none', shard_count => 7)" \
  >/dev/null
W3_SQL="SELECT count(*) FROM (SELECT idempotency.reserve('tenant-' || i % 10, 'w3-' || i),
          idempotency.complete('tenant-' || i % 10, 'w3-' || i, 200, '{}') FROM generate_series(0, 999) i) s"
single -c "$W3_SQL" >/dev/null
# Through the coordinator each call is delegated on its own (autocommit): one per key.
for i in $(seq 0 999); do
  echo "SELECT outcome FROM idempotency.reserve('tenant-$((i % 10))', 'w3-$i');"
  echo "SELECT idempotency.complete('tenant-$((i % 10))', 'w3-$i', 200, '{}');"
done | coord >/dev/null

# For W2x2: per tenant t, a tenant on the other worker.
node_port() {
  coord -c "SELECT n.nodeport FROM pg_dist_placement p JOIN pg_dist_node n USING (groupid)
            WHERE p.shardid = get_shard_id_for_distribution_column('idempotency.keys', '$1')"
}
partner_branches=""
for t in $(seq 0 9); do
  home=$(node_port "tenant-$t")
  for j in $(seq 0 9); do
    [[ $(node_port "tenant-$j") != "$home" ]] && break
  done
  partner_branches+="\\if :t = $t
\\set u $j
\\endif
"
done

w2() { # w2 TABLE [partner]
  local business_tenant="tenant-:t"
  echo "\\set t random(0, 9)"
  echo "\\set r random(1, 1000000000000)"
  [[ ${2:-} == partner ]] && { printf '%s' "$partner_branches"; business_tenant="tenant-:u"; }
  cat <<SQL
BEGIN;
SELECT outcome FROM idempotency.reserve('tenant-:t', 'k:client_id-:r', '\\x01'::bytea);
INSERT INTO $1 (tenant, key, amount) VALUES ('$business_tenant', 'k:client_id-:r', 1);
SELECT idempotency.complete('tenant-:t', 'k:client_id-:r', 201, '{"ok": true}');
COMMIT;
SQL
}
w2 orders >"$WORK/w2.sql"
w2 orders partner >"$WORK/w2x2.sql"
w2 orders_nc >"$WORK/w2nc.sql"
cat >"$WORK/w3.sql" <<'SQL'
\set i random(0, 999)
\set t :i % 10
SELECT outcome FROM idempotency.reserve('tenant-:t', 'w3-:i');
SQL

run() { # run TARGET WORKLOAD: prints the TPS
  local sock port
  if [[ $1 == single ]]; then sock=$S_SOCK port=$S_PORT; else sock=$COORD_SOCK port=$COORD_PORT; fi
  "$PGBIN/pgbench" -n -h "$sock" -p "$port" -U postgres -c "$CLIENTS" -j 2 -T "$DURATION" \
    -f "$WORK/$2.sql" postgres >"$WORK/$1-$2.log" 2>&1 || { cat "$WORK/$1-$2.log" >&2; die "pgbench $1 $2 failed"; }
  grep -q "number of failed transactions: 0 " "$WORK/$1-$2.log" || die "$1 $2: failed transactions"
  sed -nE 's/^tps = ([0-9.]+) .*/\1/p' "$WORK/$1-$2.log"
}
runs=("single w2" "single w3" "citus w2" "citus w3" "citus w2x2" "citus w2nc")
declare -A tps
for round in $(seq 1 "$ROUNDS"); do
  n=${#runs[@]}
  for k in $(seq 0 $((n - 1))); do
    read -r target w <<<"${runs[$(((k + round - 1) % n))]}"
    v=$(run "$target" "$w")
    log "round $round: $target $w $v tps"
    tps[$target-$w]="${tps[$target-$w]:-} $v"
  done
done
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
# 2PC share of W2nc: requests whose business shard is not on the key's worker.
nc_2pc=$(coord -c "SELECT round(100.0 * count(*) FILTER (WHERE pk.groupid <> po.groupid) / count(*))
  FROM generate_series(0, 9) g, LATERAL (SELECT 'tenant-' || g AS s) x,
  pg_dist_placement pk, pg_dist_placement po
  WHERE pk.shardid = get_shard_id_for_distribution_column('idempotency.keys', s)
    AND po.shardid = get_shard_id_for_distribution_column('orders_nc', s)")
s2=$(echo "${tps[single-w2]}" | median); s3=$(echo "${tps[single-w3]}" | median)
c2=$(echo "${tps[citus-w2]}" | median); c3=$(echo "${tps[citus-w3]}" | median)
x2=$(echo "${tps[citus-w2x2]}" | median); nc=$(echo "${tps[citus-w2nc]}" | median)
per_req() { awk -v c="$CLIENTS" -v t="$1" 'BEGIN { printf "%.2f", c * 1000 / t }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
echo
echo "| workload | single server TPS | coordinator TPS | coordinator / single | latency single (ms) | latency coordinator (ms) |"
echo "|---|---|---|---|---|---|"
echo "| W2 one shard | $s2 | $c2 | $(ratio "$c2" "$s2") | $(per_req "$s2") | $(per_req "$c2") |"
echo "| W3 replay | $s3 | $c3 | $(ratio "$c3" "$s3") | $(per_req "$s3") | $(per_req "$c3") |"
echo
echo "| coordinator variant | TPS | / W2 one shard |"
echo "|---|---|---|"
echo "| W2 one shard (co-located) | $c2 | 1.00 |"
echo "| W2x2 business row on the other worker (2PC) | $x2 | $(ratio "$x2" "$c2") |"
echo "| W2nc orders not co-located ($nc_2pc% of tenants' shards on the other worker) | $nc | $(ratio "$nc" "$c2") |"
echo
echo "($CLIENTS clients, $DURATION s per run, median of $ROUNDS rounds; all servers and pgbench on this host)"

# --- the extension against the hand-written pattern, same cluster ---------------------------
log "the extension against the hand-written pattern (pgbench -M extended)"
coord -c "CREATE TABLE fortress (tenant text NOT NULL, key text NOT NULL, status text NOT NULL,
                                request_hash bytea, response jsonb, PRIMARY KEY (tenant, key))" \
  -c "SELECT create_distributed_table('fortress', 'tenant', colocate_with => 'orders')" >/dev/null
# Tenants 0..39 as text; per worker the first five whose shard it holds.
declare -A on_node=()
for t in $(seq 0 39); do
  p=$(node_port "$t")
  if [[ $p == "$W1_PORT" ]]; then on_node[w1]+=" $t"; else on_node[w2]+=" $t"; fi
done
read -ra T1 <<<"${on_node[w1]}"; read -ra T2 <<<"${on_node[w2]}"
T1=("${T1[@]:0:5}"); T2=("${T2[@]:0:5}")
[[ ${#T1[@]} -eq 5 && ${#T2[@]} -eq 5 ]] || die "fewer than 5 of 40 tenants on a worker"
# Replays: keys 0..99 of each tenant, completed with both patterns.
all_tenants=$(IFS=,; echo "${T1[*]},${T2[*]}")
coord -c "INSERT INTO fortress SELECT t::text, k::text, 'completed', '\\x01', '{\"ok\": true}'
          FROM unnest('{$all_tenants}'::int[]) t, generate_series(0, 99) k" >/dev/null
source "$(dirname "${BASH_SOURCE[0]}")/citus_workloads.sh"
replay_keys "${T1[@]}" "${T2[@]}" | coord >/dev/null
VS_WORKLOADS=(ext_new hand_new ext_replay hand_locked hand_select)
for w in "${VS_WORKLOADS[@]}" ext_storm hand_storm; do
  vs_script "$w" "${T1[@]}" "${T2[@]}" >"$WORK/coord-$w.sql"
  vs_script "$w" "${T1[@]}" >"$WORK/w1-$w.sql"
  vs_script "$w" "${T2[@]}" >"$WORK/w2-$w.sql"
done
TICK_MS=$((1000 / $(getconf CLK_TCK)))
# cpu_ticks DATA: CPU ticks of the cluster's processes, ended (reaped) ones included: the live
# children first, then the postmaster's own and its reaped children's (a child that exits in
# between is counted twice rather than not at all).
cpu_ticks() {
  local pm live
  pm=$(head -n 1 "$1/postmaster.pid")
  live=$(awk -v pm="$pm" '{ s = $0; sub(/^.*\) /, "", s); split(s, f, " ")
      if (f[2] == pm) t += f[12] + f[13] } END { print t + 0 }' /proc/[0-9]*/stat 2>/dev/null ||
    true) # awk exits 2 when a process ended between the glob and the read; its sum stands
  awk -v live="$live" '{ s = $0; sub(/^.*\) /, "", s); split(s, f, " ")
      print live + f[12] + f[13] + f[14] + f[15] }' "/proc/$pm/stat"
}
cpu_all() { echo "$(cpu_ticks "$COORD_DATA") $(cpu_ticks "$W1_DATA") $(cpu_ticks "$W2_DATA")"; }
# settle: waits (10 s at most) until the backends of the last run have exited and been reaped
# (a zombie's CPU shows nowhere until its postmaster reaps it): no zombie child, and the same
# number of children in three polls in a row.
settle() {
  local pms last="" now same=0 i
  pms=$(for d in "$COORD_DATA" "$W1_DATA" "$W2_DATA"; do head -n 1 "$d/postmaster.pid"; done | paste -sd,)
  for i in $(seq 1 100); do
    now=$(awk -v pms=",$pms," '{ s = $0; sub(/^.*\) /, "", s); split(s, f, " ")
        if (index(pms, "," f[2] ",")) { n++; if (f[1] == "Z") z++ } }
      END { print (z > 0) ? "zombie" : n + 0 }' /proc/[0-9]*/stat 2>/dev/null || true)
    if [[ $now != zombie && $now == "$last" ]]; then same=$((same + 1)); else same=0; fi
    [[ $same -ge 2 ]] && return
    last=$now
    sleep 0.1
  done
}
vs_pgbench() { # vs_pgbench LOG SOCK PORT CLIENTS SCRIPT BASE [SECONDS]
  "$PGBIN/pgbench" -n -M extended -h "$2" -p "$3" -U postgres -c "$4" -j 2 -T "${7:-$DURATION}" \
    -D base="$6" -f "$5" postgres >"$1" 2>&1 || { cat "$1" >&2; die "pgbench $5 failed"; }
  grep -q "number of failed transactions: 0 " "$1" || die "$5: failed transactions"
}
processed() { sed -nE 's/^number of transactions actually processed: ([0-9]+).*/\1/p' "$1"; }
# vs_run TARGET WORKLOAD: prints "TPS coordinator-ms worker-ms" (CPU ms per request).
vs_run() {
  local before n c0 c1 c2 d0 d1 d2 half=$((CLIENTS / 2))
  settle
  read -r c0 c1 c2 <<<"$(cpu_all)"
  if [[ $1 == coord ]]; then
    vs_pgbench "$WORK/vs.log" "$COORD_SOCK" "$COORD_PORT" "$CLIENTS" "$WORK/coord-$2.sql" 0 "${3:-}"
    n=$(processed "$WORK/vs.log")
  else # half the clients on each worker, over that worker's tenants
    vs_pgbench "$WORK/vs1.log" "$W1_SOCK" "$W1_PORT" "$half" "$WORK/w1-$2.sql" 0 "${3:-}" &
    before=$!
    vs_pgbench "$WORK/vs2.log" "$W2_SOCK" "$W2_PORT" "$half" "$WORK/w2-$2.sql" \
      1000000000000000 "${3:-}" || die "pgbench on w2 failed"
    wait "$before" || die "pgbench on w1 failed"
    n=$(($(processed "$WORK/vs1.log") + $(processed "$WORK/vs2.log")))
  fi
  settle
  read -r d0 d1 d2 <<<"$(cpu_all)"
  awk -v n="$n" -v s="${3:-$DURATION}" -v tick="$TICK_MS" -v c="$((d0 - c0))" -v w="$((d1 - c1 + d2 - c2))" \
    'BEGIN { printf "%.0f %.2f %.2f\n", n / s, c * tick / n, w * tick / n }'
}
declare -A vs_tps=() vs_cpu_c=() vs_cpu_w=()
runs=()
for target in coord workers; do for w in "${VS_WORKLOADS[@]}"; do runs+=("$target $w"); done; done
for round in $(seq 1 "$VS_ROUNDS"); do
  n=${#runs[@]}
  for k in $(seq 0 $((n - 1))); do
    read -r target w <<<"${runs[$(((k + (round - 1) * 3) % n))]}"
    read -r t cc cw <<<"$(vs_run "$target" "$w")"
    log "round $round: $target $w $t tps, CPU/request: coordinator $cc ms, workers $cw ms"
    vs_tps[$target-$w]+=" $t"; vs_cpu_c[$target-$w]+=" $cc"; vs_cpu_w[$target-$w]+=" $cw"
  done
done
# The storms: 16 clients, 50 hot keys (5 per tenant); one business row per completed key.
for target in coord workers; do
  for w in ext_storm hand_storm; do
    CLIENTS=16 vs_run "$target" "$w" "$STORM_DURATION" >"$WORK/storm-$target-$w"
    log "storm $target $w: $(cat "$WORK/storm-$target-$w")"
  done
done
doubled=$(coord -c "SELECT count(*) FROM (SELECT tenant, key FROM orders WHERE key ~ '^[sh]'
                    GROUP BY 1, 2 HAVING count(*) > 1) d")
[[ $doubled == 0 ]] || die "storm: $doubled keys with two business rows"
storm_keys=$(coord -c "SELECT count(DISTINCT (tenant, key)) FROM orders WHERE key ~ '^[sh]'")
vs_row() { # vs_row TARGET WORKLOAD BASELINE LABEL
  local t b
  t=$(echo "${vs_tps[$1-$2]}" | median); b=$(echo "${vs_tps[$1-$3]}" | median)
  echo "| $4 | $t | $(echo "${vs_cpu_c[$1-$2]}" | median) | $(echo "${vs_cpu_w[$1-$2]}" | median) | $(ratio "$t" "$b") |"
}
echo
for target in coord workers; do
  if [[ $target == coord ]]; then
    echo "Through the coordinator ($CLIENTS clients):"
  else
    echo "Clients on their tenant's worker ($((CLIENTS / 2)) clients on each worker):"
  fi
  echo
  echo "| workload | TPS | coordinator CPU ms/request | workers CPU ms/request | ratio |"
  echo "|---|---|---|---|---|"
  vs_row "$target" ext_new hand_new "new: the extension (/ hand-written)"
  vs_row "$target" hand_new hand_new "new: hand-written"
  vs_row "$target" ext_replay hand_select "replay: the extension (/ unlocked SELECT)"
  vs_row "$target" hand_locked hand_select "replay: hand-written, locked (/ unlocked SELECT)"
  vs_row "$target" hand_select hand_select "replay: unlocked SELECT"
  echo
done
# Per round: the ratios of that round's runs (TPS, and CPU per request coordinator + workers).
per_round() { # per_round TARGET WORKLOAD BASELINE tps|cpu: "r1, r2, ..." in round order
  local -a a b ac aw bc bw
  read -ra a <<<"${vs_tps[$1-$2]}"
  read -ra b <<<"${vs_tps[$1-$3]}"
  read -ra ac <<<"${vs_cpu_c[$1-$2]}"
  read -ra aw <<<"${vs_cpu_w[$1-$2]}"
  read -ra bc <<<"${vs_cpu_c[$1-$3]}"
  read -ra bw <<<"${vs_cpu_w[$1-$3]}"
  local i out=()
  for i in "${!a[@]}"; do
    if [[ $4 == tps ]]; then
      out+=("$(ratio "${a[$i]}" "${b[$i]}")")
    else
      out+=("$(awk -v x="${ac[$i]}" -v y="${aw[$i]}" -v u="${bc[$i]}" -v v="${bw[$i]}" \
        'BEGIN { printf "%.2f", (x + y) / (u + v) }')")
    fi
  done
  (IFS=,; echo "${out[*]}" | sed 's/,/, /g')
}
echo "| per round | new: TPS the extension / hand-written | new: CPU per request, the extension / hand-written | replay: TPS the extension / unlocked SELECT | replay: CPU per request, the extension / unlocked SELECT |"
echo "|---|---|---|---|---|"
for target in coord workers; do
  echo "| $target | $(per_round "$target" ext_new hand_new tps) | $(per_round "$target" ext_new hand_new cpu)" \
    "| $(per_round "$target" ext_replay hand_select tps) | $(per_round "$target" ext_replay hand_select cpu) |"
done
echo
echo "| storm (16 clients, $STORM_DURATION s, 50 hot keys) | TPS | coordinator CPU ms/request | workers CPU ms/request |"
echo "|---|---|---|---|"
for target in coord workers; do
  for w in ext_storm hand_storm; do
    read -r t cc cw <"$WORK/storm-$target-$w"
    echo "| $target, ${w%_storm} | $t | $cc | $cw |"
  done
done
echo
echo "(storms: $storm_keys keys with a business row, none with two; median of $VS_ROUNDS rounds," \
  "$DURATION s per run; load average before: $LOAD_BEFORE, after: $(cut -d' ' -f1-3 /proc/loadavg))"
