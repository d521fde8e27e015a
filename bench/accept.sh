#!/usr/bin/env bash
# accept against storing every key: MESSAGES messages with increasing positions, spread over
# CLIENTS partitions (one pgbench client per partition, one message per transaction):
#   accept     SELECT idempotency.accept('bench', partition, position)
#   seen_keys  INSERT INTO seen_keys VALUES ('bench', partition, position) ON CONFLICT DO NOTHING
#              (primary key (consumer, partition, position): the store-every-key approach)
# Prints throughput, the ratio, and the size of each table (with indexes) after the run.
# synchronous_commit is off by default, so that a commit's fsync does not hide the cost of
# the deduplication itself (BENCH_SYNC=on to measure with it).
#   bash bench/accept.sh
#   BENCH_MESSAGES=100000 bash bench/accept.sh
# Starts a throwaway cluster of its own (port BENCH_ACCEPT_PORT, default 54427).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"

MESSAGES=${BENCH_MESSAGES:-1000000}
CLIENTS=${BENCH_CLIENTS:-4}
SYNC=${BENCH_SYNC:-off}
PORT=${BENCH_ACCEPT_PORT:-54427}
PER_CLIENT=$((MESSAGES / CLIENTS))
MESSAGES=$((PER_CLIENT * CLIENTS))
WORK=$(mktemp -d /tmp/bench-accept.XXXXXX)

cluster_setup bench-accept "$PORT"
trap 'cluster_stop "$CLUSTER_DATA" || true; rm -rf "$WORK"' EXIT
cluster_init "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" "shared_buffers = 512MB" \
  "max_wal_size = 8GB" "synchronous_commit = $SYNC"
cluster_start "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK"
bsql() { cluster_psql "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" -q -At -d postgres "$@"; }
bsql -c "CREATE EXTENSION idempotency" \
  -c "CREATE TABLE seen_keys (consumer text, partition text, position bigint,
        PRIMARY KEY (consumer, partition, position))"

cat >"$WORK/accept.sql" <<'SQL'
\set n :n + 1
SELECT idempotency.accept('bench', 'p' || :client_id, :n);
SQL
cat >"$WORK/seen_keys.sql" <<'SQL'
\set n :n + 1
INSERT INTO seen_keys VALUES ('bench', 'p' || :client_id, :n) ON CONFLICT DO NOTHING;
SQL

declare -A TPS
run() {
  TPS[$1]=$("$PGBIN/pgbench" -n -h "$CLUSTER_SOCK" -p "$CLUSTER_PORT" -U postgres -D n=0 \
    -c "$CLIENTS" -j "$CLIENTS" -t "$PER_CLIENT" -f "$WORK/$1.sql" postgres 2>/dev/null |
    sed -nE 's/^tps = ([0-9.]+).*/\1/p')
  echo "$1: ${TPS[$1]} tps" >&2
}
run seen_keys
run accept

accepted=$(bsql -c "SELECT sum(watermark) FROM idempotency.watermarks WHERE consumer = 'bench'")
[[ $accepted == "$MESSAGES" ]] || echo "warning: watermarks sum to $accepted, expected $MESSAGES" >&2
size() { bsql -c "SELECT pg_size_pretty(pg_total_relation_size('$1'))"; }
rows() { bsql -c "SELECT count(*) FROM $1"; }
bsql -c "VACUUM idempotency.consumer_positions, seen_keys"

echo
echo "accept benchmark: $MESSAGES messages, $CLIENTS clients/partitions, synchronous_commit $SYNC"
printf '%-10s %12s %8s %16s %10s\n' approach "msgs/s" ratio "table+indexes" rows
printf '%-10s %12.0f %7.2fx %16s %10s\n' seen_keys "${TPS[seen_keys]}" 1 \
  "$(size seen_keys)" "$(rows seen_keys)"
printf '%-10s %12.0f %7.2fx %16s %10s\n' accept "${TPS[accept]}" \
  "$(awk "BEGIN { print ${TPS[accept]} / ${TPS[seen_keys]} }")" \
  "$(size idempotency.consumer_positions)" "$(rows idempotency.consumer_positions)"
