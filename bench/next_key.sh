#!/usr/bin/env bash
# next_key against the usual monotonic allocators, 1 and 8 clients, in the same run:
#   nextval   SELECT nextval() of a plain sequence (CACHE 1)
#   next_key  SELECT idempotency.next_key() (block 1000, served from shared memory)
#   counter   BEGIN; pg_advisory_xact_lock; UPDATE counter SET v = v + 1 RETURNING v; COMMIT
#             (the naive allocator: one durable commit per value, callers serialised)
# Each call is its own (autocommit) transaction, synchronous_commit on. Configurations are
# interleaved over rounds and the best tps of each is kept. Prints tps and ratios.
#   bash bench/next_key.sh
#   BENCH_DURATION=5 BENCH_ROUNDS=1 bash bench/next_key.sh
# Starts a throwaway cluster of its own (port BENCH_NEXT_KEY_PORT, default 54426).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"

DURATION=${BENCH_DURATION:-10}
ROUNDS=${BENCH_ROUNDS:-3}
CLIENTS=${BENCH_CLIENTS:-1 8}
PORT=${BENCH_NEXT_KEY_PORT:-54426}
WORK=$(mktemp -d /tmp/bench-next-key.XXXXXX)

cluster_setup bench-next-key "$PORT"
trap 'cluster_stop "$CLUSTER_DATA" || true; rm -rf "$WORK"' EXIT
cluster_init "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" "shared_buffers = 256MB" \
  "max_wal_size = 4GB" "autovacuum = off"
cluster_start "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK"
bsql() { cluster_psql "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" -q -At -d postgres "$@"; }
bsql -c "CREATE EXTENSION idempotency" \
  -c "SELECT idempotency.create_stream('bench', 1000)" \
  -c "CREATE SEQUENCE bench_seq CACHE 1" \
  -c "CREATE TABLE bench_counter (id int PRIMARY KEY, v bigint NOT NULL)" \
  -c "INSERT INTO bench_counter VALUES (1, 0)"

echo "SELECT nextval('bench_seq');" >"$WORK/nextval.sql"
echo "SELECT idempotency.next_key('bench');" >"$WORK/next_key.sql"
cat >"$WORK/counter.sql" <<'SQL'
BEGIN;
SELECT pg_advisory_xact_lock(42);
UPDATE bench_counter SET v = v + 1 WHERE id = 1 RETURNING v;
COMMIT;
SQL

NAMES=(nextval next_key counter)
declare -A BEST
for round in $(seq "$ROUNDS"); do
  for c in $CLIENTS; do
    for name in "${NAMES[@]}"; do
      tps=$("$PGBIN/pgbench" -n -h "$CLUSTER_SOCK" -p "$CLUSTER_PORT" -U postgres -c "$c" \
        -j "$c" -T "$DURATION" -f "$WORK/$name.sql" postgres 2>/dev/null |
        sed -nE 's/^tps = ([0-9.]+).*/\1/p')
      key="$name/$c"
      if [[ -z ${BEST[$key]:-} ]] || awk "BEGIN { exit !($tps > ${BEST[$key]}) }"; then
        BEST[$key]=$tps
      fi
      printf 'round %d  %-8s %d clients  %10.0f tps\n' "$round" "$name" "$c" "$tps" >&2
    done
  done
done

echo
echo "next_key benchmark: best of $ROUNDS rounds of ${DURATION}s, autocommit, synchronous_commit on"
printf '%-8s %14s %14s %14s %12s %12s\n' clients nextval next_key counter \
  "vs nextval" "vs counter"
for c in $CLIENTS; do
  printf '%-8s %14.0f %14.0f %14.0f %11.2fx %11.2fx\n' "$c" "${BEST[nextval/$c]}" \
    "${BEST[next_key/$c]}" "${BEST[counter/$c]}" \
    "$(awk "BEGIN { print ${BEST[next_key/$c]} / ${BEST[nextval/$c]} }")" \
    "$(awk "BEGIN { print ${BEST[next_key/$c]} / ${BEST[counter/$c]} }")"
done
echo "stream bound after the run: $(bsql -c "SELECT reserved_up_to FROM idempotency.streams WHERE stream = 'bench'")"
