#!/usr/bin/env bash
# Citus overhead, in one run on this machine: the same requests against a single server and
# through the coordinator of a three-node Citus cluster (scripts/lib.sh; all on this host).
#   W2     BEGIN; reserve; business insert; complete; COMMIT    (one tenant: one shard)
#   W3     reserve of a completed key (replay), autocommit
#   W2x2   W2 whose business row belongs to a tenant on the other worker (two shards: 2PC)
#   W2nc   W2 into a table distributed by tenant but NOT co-located with the keys
# BENCH_CLIENTS (8) pgbench clients, BENCH_DURATION (10) s per run, BENCH_ROUNDS (2) rounds
# with the order rotated; the median TPS per target and workload is printed as a markdown
# table (bench/README.md, "Citus").
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
CLIENTS=${BENCH_CLIENTS:-8}
DURATION=${BENCH_DURATION:-10}
ROUNDS=${BENCH_ROUNDS:-2}
why=$(ensure_citus) || die "Citus is not available: $why"
WORK=$(mktemp -d /tmp/idem-bench-citus.XXXXXX)
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
