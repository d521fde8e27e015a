#!/usr/bin/env bash
# Decoding throughput of the outbox: N messages written by idempotency.emit (in transactions
# of M messages), decoded from the same WAL in the same run by
#   - wal2json, format-version 2 with include-lsn (and its default B/C lines),
#   - the output plugin idempotency, framing off, and framing on (BEGIN/COMMIT lines).
# Each of ROUNDS rounds runs every decoder (in a rotating order) once through
# pg_logical_slot_get_changes, on a slot of its own created before the messages were written,
# and once through pg_logical_slot_peek_changes. Measures elapsed time and the backend's CPU
# time (user + system, from /proc/self/stat: less disturbed by other load on a shared machine)
# and keeps each decoder's best. Prints messages/s and the ratios to wal2json.
#   bash bench/decode.sh                       (1M messages, 20000 transactions of 50)
#   IDEM_BENCH_MESSAGES=100000 IDEM_BENCH_ROUNDS=1 bash bench/decode.sh
# Starts a throwaway cluster of its own (port IDEM_BENCH_PORT, default 54422).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"

MESSAGES=${IDEM_BENCH_MESSAGES:-1000000}
PER_TXN=${IDEM_BENCH_PER_TXN:-50}
ROUNDS=${IDEM_BENCH_ROUNDS:-3}
PORT=${IDEM_BENCH_PORT:-54422}
TXNS=$((MESSAGES / PER_TXN))
MESSAGES=$((TXNS * PER_TXN))

NAMES=(wal2json idempotency idempotency+framing)
declare -A PLUGIN=([wal2json]=wal2json [idempotency]=idempotency [idempotency+framing]=idempotency)
declare -A OPTIONS=([wal2json]=",'format-version','2','include-lsn','1'" [idempotency]=""
  [idempotency+framing]=",'framing','on'")
declare -A ROWS=([wal2json]=$((MESSAGES + 2 * TXNS)) [idempotency]=$MESSAGES
  [idempotency+framing]=$((MESSAGES + 2 * TXNS)))

cluster_setup bench-decode "$PORT"
trap 'cluster_stop "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" || true' EXIT
cluster_init "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" \
  "shared_buffers = 512MB" "max_wal_size = 8GB" "work_mem = 64MB" "fsync = off" \
  "autovacuum = off" "max_replication_slots = $((3 * ROUNDS + 5))"
cluster_start "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK"
calc() { awk "BEGIN { print $* }"; }
bsql() { cluster_psql "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" -q -At -d postgres "$@"; }
slot() { echo "bench_${1//+/_}_$2"; }  # slot NAME ROUND

bsql <<'SQL'
CREATE EXTENSION idempotency;
CREATE PROCEDURE produce(txns int, per int) LANGUAGE plpgsql AS $$
BEGIN
    FOR t IN 0..txns - 1 LOOP
        PERFORM idempotency.emit('orders', jsonb_build_object(
            'order_id', t::bigint * per + m, 'customer', 'c-' || (t % 977),
            'amount', (t * 31 + m) % 10000, 'currency', 'EUR', 'status', 'paid'))
        FROM generate_series(1, per) m;
        COMMIT;
    END LOOP;
END $$;
-- CPU time of this backend (user + system, in clock ticks), from /proc/self/stat
CREATE FUNCTION cpu_ticks() RETURNS bigint LANGUAGE sql AS $$
    SELECT f[12]::bigint + f[13]::bigint  -- utime and stime: fields 14 and 15
    FROM (SELECT string_to_array(split_part(pg_read_file('/proc/self/stat'), ') ', 2), ' ')) s(f)
$$;
-- rows, elapsed and CPU seconds of one decoding call
CREATE FUNCTION decode(slot name, consume boolean, ticks_per_s int,
                       VARIADIC options text[] DEFAULT '{}')
RETURNS TABLE (rows bigint, seconds float8, cpu_seconds float8) LANGUAGE plpgsql AS $$
DECLARE
    started timestamptz := clock_timestamp();
    cpu_started bigint := cpu_ticks();
BEGIN
    IF consume THEN
        SELECT count(*) INTO rows FROM pg_logical_slot_get_changes(slot, NULL, NULL, VARIADIC options);
    ELSE
        SELECT count(*) INTO rows FROM pg_logical_slot_peek_changes(slot, NULL, NULL, VARIADIC options);
    END IF;
    seconds := extract(epoch FROM clock_timestamp() - started);
    cpu_seconds := (cpu_ticks() - cpu_started)::float8 / ticks_per_s;
    RETURN NEXT;
END $$;
SQL
# The slots last: they see the emitted transactions only.
for ((r = 1; r <= ROUNDS; r++)); do
  for name in "${NAMES[@]}"; do
    bsql -c "SELECT FROM pg_create_logical_replication_slot('$(slot "$name" "$r")', '${PLUGIN[$name]}')"
  done
done

log "emitting $MESSAGES messages in $TXNS transactions"
start_lsn=$(bsql -c "SELECT pg_current_wal_lsn()")
t0=$(date +%s.%N)
bsql -c "CALL produce($TXNS, $PER_TXN)"
t1=$(date +%s.%N)
wal=$(bsql -c "SELECT pg_size_pretty(pg_current_wal_lsn() - '$start_lsn'::pg_lsn)")
printf 'emit: %d messages in %.1f s (%.0f msgs/s), %s of WAL\n' "$MESSAGES" \
  "$(calc "$t1 - $t0")" "$(calc "$MESSAGES / ($t1 - $t0)")" "$wal"

TICKS=$(getconf CLK_TCK)
declare -A BEST=()  # "NAME get|peek wall|cpu" -> seconds
keep_best() {  # keep_best KEY SECONDS
  if [[ -z ${BEST[$1]:-} ]] || (($(calc "$2 < ${BEST[$1]}"))); then BEST[$1]=$2; fi
}
run() {  # run NAME ROUND get|peek
  local name=$1 round=$2 how=$3 n s cpu
  read -r n s cpu <<<"$(bsql -F ' ' -c "SELECT * FROM decode('$(slot "$name" "$round")', \
    $([[ $how == get ]] && echo true || echo false), $TICKS${OPTIONS[$name]})")"
  [[ $n -eq ${ROWS[$name]} ]] || die "$name decoded $n rows, not ${ROWS[$name]}"
  printf '  %-20s %-4s %8d rows %6.2f s %6.2f s CPU %9.0f msgs/s %9.0f msgs/CPU-s\n' "$name" \
    "$how" "$n" "$s" "$cpu" "$(calc "$MESSAGES / $s")" "$(calc "$MESSAGES / $cpu")"
  keep_best "$name $how wall" "$s"
  keep_best "$name $how cpu" "$cpu"
}
for ((r = 1; r <= ROUNDS; r++)); do
  log "round $r of $ROUNDS"
  for ((i = 0; i < ${#NAMES[@]}; i++)); do
    name=${NAMES[$(((i + r) % ${#NAMES[@]}))]}
    run "$name" "$ROUNDS" peek  # the last round's slot, consumed after its last peek
    run "$name" "$r" get
  done
done

echo
printf '%-24s %12s %12s %14s %14s\n' "best of $ROUNDS, $MESSAGES msgs" "get msgs/s" "peek msgs/s" \
  "get msgs/CPU-s" "peek msgs/CPU-s"
for name in "${NAMES[@]}"; do
  printf '%-24s %12.0f %12.0f %14.0f %14.0f\n' "$name" \
    "$(calc "$MESSAGES / ${BEST["$name get wall"]}")" "$(calc "$MESSAGES / ${BEST["$name peek wall"]}")" \
    "$(calc "$MESSAGES / ${BEST["$name get cpu"]}")" "$(calc "$MESSAGES / ${BEST["$name peek cpu"]}")"
done
for name in idempotency idempotency+framing; do
  printf 'ratio %s / wal2json: elapsed get %.2f, peek %.2f; CPU get %.2f, peek %.2f\n' "$name" \
    "$(calc "${BEST["wal2json get wall"]} / ${BEST["$name get wall"]}")" \
    "$(calc "${BEST["wal2json peek wall"]} / ${BEST["$name peek wall"]}")" \
    "$(calc "${BEST["wal2json get cpu"]} / ${BEST["$name get cpu"]}")" \
    "$(calc "${BEST["wal2json peek cpu"]} / ${BEST["$name peek cpu"]}")"
done
