#!/usr/bin/env bash
# Storage benchmark, on a throwaway cluster of its own (port 54464):
#  1. reserve (new keys, 24h retention) throughput and latency with SMALL and LARGE keys
#     stored in the live partitions of idempotency.keys: reserve's cost must not grow with
#     the number of keys (target: within 1.2x);
#  2. pruning PRUNE expired keys: maintain() dropping their partitions against
#     DELETE ... WHERE expires_at < now() on an unpartitioned copy of the same rows (time, and
#     table size afterwards).
#   bash bench/storage.sh                      (SMALL=1000000 LARGE=20000000 PRUNE=10000000)
#   SMALL=100000 LARGE=1000000 PRUNE=1000000 SECONDS_PER_RUN=5 bash bench/storage.sh
# Rows are generated with INSERT ... SELECT straight into the tables, as superuser.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"

SMALL=${SMALL:-1000000}
LARGE=${LARGE:-20000000}
PRUNE=${PRUNE:-10000000}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-20}
CLIENTS=${CLIENTS:-2}
# Sized so that the live partitions' indexes stay in memory at LARGE keys, as a server holding
# that many keys would be configured.
SHARED_BUFFERS=${SHARED_BUFFERS:-4GB}

cluster_setup bench-storage 54464
WORK=$(mktemp -d /tmp/idem-bench-storage.XXXXXX)
chmod 777 "$WORK"
cleanup() { cluster_stop "$CLUSTER_DATA" || true; rm -rf "$WORK" "$(dirname "$CLUSTER_DATA")"; }
trap cleanup EXIT
cluster_init "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" \
  "shared_buffers = '$SHARED_BUFFERS'" "max_wal_size = '8GB'" "checkpoint_timeout = '30min'" \
  "synchronous_commit = off" "autovacuum = off" "maintenance_work_mem = '512MB'" \
  "idempotency.partition_width = '1d'" "idempotency.premake = 3"
cluster_start "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK"
q() { cluster_psql "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" -qAt -d postgres "$@"; }
secs() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

q -c "CREATE EXTENSION idempotency" -c "SELECT count(*) FROM idempotency.maintain()" >/dev/null

# load FROM TO: live keys, expiring between 1 hour and 3 days from now (the live partitions).
load() {
  q -c "INSERT INTO idempotency.keys (scope, key, state, attempt, request_hash, status_code,
          response, first_seen_at, completed_at, expires_at)
        SELECT 'bench', md5(i::text), 'completed', 1, '\\x00', 200, '{\"ok\": true}', now(), now(),
               now() + interval '1 hour' + (i % 1000) * interval '3 minutes 32 seconds'
        FROM generate_series($1, $2) AS i" -c "ANALYZE idempotency.keys"
}

cat >"$WORK/reserve.sql" <<'SQL'
\set r random(1, 2000000000)
SELECT (idempotency.reserve('bench-new', :client_id || '-' || :r)).outcome;
SQL
# pgbench_reserve: prints "tps avg_ms p99_ms"
pgbench_reserve() {
  local name=$1
  rm -f "$WORK/$name".*
  (cd "$WORK" && "$PGBIN/pgbench" -h "$CLUSTER_SOCK" -p "$CLUSTER_PORT" -U postgres -n \
    -c "$CLIENTS" -j "$CLIENTS" -T "$SECONDS_PER_RUN" -f reserve.sql -l --log-prefix="$name" \
    postgres >"$WORK/$name.out" 2>&1)
  local tps
  tps=$(sed -nE 's/^tps = ([0-9.]+).*/\1/p' "$WORK/$name.out" | head -n1)
  cat "$WORK/$name".[0-9]* | awk '{print $3}' | sort -n | awk -v tps="$tps" '
    { v[NR] = $1; s += $1 } END { printf "%.0f %.3f %.3f\n", tps, s / NR / 1000, v[int(NR * 0.99)] / 1000 }'
}

echo "== reserve with stored keys (clients $CLIENTS, ${SECONDS_PER_RUN}s per run)"
t0=$(secs); load 1 "$SMALL"; t1=$(secs)
echo "loaded $SMALL keys in $(elapsed "$t0" "$t1") s"
read -r s_tps s_avg s_p99 < <(pgbench_reserve small)
echo "$SMALL keys: $s_tps tps, avg $s_avg ms, p99 $s_p99 ms"
t0=$(secs); load $((SMALL + 1)) "$LARGE"; t1=$(secs)
echo "loaded up to $LARGE keys in $(elapsed "$t0" "$t1") s ($(q -c "SELECT pg_size_pretty(pg_total_relation_size('idempotency.keys'::regclass) + (SELECT sum(pg_total_relation_size(inhrelid)) FROM pg_inherits WHERE inhparent = 'idempotency.keys'::regclass))"))"
read -r l_tps l_avg l_p99 < <(pgbench_reserve large)
echo "$LARGE keys: $l_tps tps, avg $l_avg ms, p99 $l_p99 ms"
echo "ratio ${LARGE} / ${SMALL} keys: throughput $(awk -v a="$l_tps" -v b="$s_tps" 'BEGIN { printf "%.2f", a / b }')x, avg latency $(awk -v a="$l_avg" -v b="$s_avg" 'BEGIN { printf "%.2f", a / b }')x (target: within 1.2x)"

echo "== pruning $PRUNE expired keys"
q -c "TRUNCATE idempotency.keys" -c "CHECKPOINT"
# Expired keys over 10 past days, in day partitions made by hand (as maintain() would have).
for d in $(seq 1 10); do
  q -c "CREATE TABLE idempotency.keys_p2020_01_$(printf %02d "$d") PARTITION OF idempotency.keys
        FOR VALUES FROM ('2020-01-$(printf %02d "$d") 00:00+00') TO ('2020-01-$(printf %02d "$d") 00:00+00'::timestamptz + interval '1 day')"
done
q -c "CREATE TABLE bench_unpartitioned (LIKE idempotency.keys INCLUDING ALL)"
t0=$(secs)
q -c "INSERT INTO bench_unpartitioned (scope, key, state, attempt, request_hash, status_code,
        response, first_seen_at, completed_at, expires_at)
      SELECT 'bench', md5(i::text), 'completed', 1, '\\x00', 200, '{\"ok\": true}',
             '2019-12-31', '2019-12-31',
             '2020-01-01 00:00+00'::timestamptz + (i % 864000) * interval '1 second'
      FROM generate_series(1, $PRUNE) AS i" \
  -c "INSERT INTO idempotency.keys SELECT * FROM bench_unpartitioned" -c "VACUUM ANALYZE" -c "CHECKPOINT"
t1=$(secs)
echo "loaded $PRUNE expired keys twice in $(elapsed "$t0" "$t1") s"
size() { q -c "SELECT pg_size_pretty($1)"; }
part_size="coalesce((SELECT sum(pg_total_relation_size(inhrelid)) FROM pg_inherits WHERE inhparent = 'idempotency.keys'::regclass), 0)"
echo "before: partitioned $(size "$part_size"), unpartitioned $(size "pg_total_relation_size('bench_unpartitioned')")"
t0=$(secs); dropped=$(q -c "SELECT count(*) FROM idempotency.maintain() WHERE action = 'dropped'"); t1=$(secs)
m_time=$(elapsed "$t0" "$t1")
t0=$(secs); q -c "DELETE FROM bench_unpartitioned WHERE expires_at < now()"; t1=$(secs)
d_time=$(elapsed "$t0" "$t1")
t0=$(secs); q -c "VACUUM bench_unpartitioned"; t1=$(secs)
v_time=$(elapsed "$t0" "$t1")
echo "maintain(): dropped $dropped partitions in $m_time s; afterwards $(size "$part_size")"
echo "DELETE: $d_time s (+ VACUUM $v_time s); afterwards $(size "pg_total_relation_size('bench_unpartitioned')") (space kept by the table until VACUUM FULL)"
echo "ratio DELETE / maintain(): $(awk -v a="$d_time" -v b="$m_time" 'BEGIN { printf "%.0f", a / b }')x"
