#!/usr/bin/env bash
# Instructions the server backend executes per transaction, for W0-W3 (and any other workload
# of bench/workloads), counted by callgrind: robust against a loaded machine, unlike TPS.
#
#   PG_CONFIG=/path/to/pg_config bash bench/instructions.sh      (or IDEM_PG=18, as run.sh)
#
# Method: a cluster of its own (cluster_setup bench-instructions 54465, so IDEM_PORT_OFFSET
# applies; the settings of scripts/lib.sh, autovacuum off) is loaded with bench/setup.sql and
# vacuumed, then restarted with the postmaster under `valgrind --tool=callgrind`, which follows
# the forked backends and writes one profile per process, counting from PostgresMain on. The
# benchmark's tables and indexes are read into shared buffers first (pg_prewarm). Per workload,
# one pgbench client (-M prepared, plain) runs LOW transactions on one connection and HIGH on
# another; the backends' totals give (I(HIGH) - I(LOW)) / (HIGH - LOW) instructions per
# transaction, so connection start-up and the first transactions' catalog loading cancel out.
#
# Knobs (environment):
#   BENCH_WORKLOADS="w0 w1 w2 w3"   workloads (keys of run.sh: w0..w5, w2s)
#   BENCH_LOW=100 BENCH_HIGH=600    transactions of the two runs
#   BENCH_W3_KEYS=20000             completed keys W3 replays (setup.sql)
#   BENCH_BUILD=1                   build and install the extension first (0: installed one)
#   BENCH_OUT=bench/out/instructions-MAJOR   output: table.tsv and the callgrind profiles
#                                   (HIGH-run profile per workload: w2.high.callgrind, for
#                                   callgrind_annotate)
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
BENCH=$IDEM_ROOT/bench

WORKLOADS=${BENCH_WORKLOADS:-w0 w1 w2 w3}
LOW=${BENCH_LOW:-100}
HIGH=${BENCH_HIGH:-600}
W3_KEYS=${BENCH_W3_KEYS:-20000}
[[ $HIGH -gt $LOW ]] || die "BENCH_HIGH ($HIGH) must be greater than BENCH_LOW ($LOW)"
command -v valgrind >/dev/null || install_missing valgrind
command -v valgrind >/dev/null || die "valgrind is needed (Debian package valgrind)"

declare -A SCRIPT=([w0]=w0_baseline [w1]=w1_handwritten [w2]=w2_extension [w3]=w3_replay
  [w4]=w4_mixed [w5]=w5_floor [w2s]=w2_extension)
declare -A LABEL=([w0]="W0 baseline insert" [w1]="W1 hand-written pattern" [w2]="W2 extension"
  [w3]="W3 replay" [w4]="W4 mixed, 10% repeats" [w5]="W5 floor, W2 as bare SQL"
  [w2s]="W2 via SPI")
for w in $WORKLOADS; do [[ -n ${SCRIPT[$w]:-} ]] || die "unknown workload: $w"; done

if [[ ! -x $PG_CONFIG && ${IDEM_PG:-15} != 15 ]]; then build_pg_major "$IDEM_PG"; fi
[[ ${BENCH_BUILD:-1} == 1 ]] && IDEM_WERROR=1 build_and_install >&2
VERSION=$("$PG_CONFIG" --version | awk '{ print $2 }')
MAJOR=${VERSION%%.*}
OUT=${BENCH_OUT:-$BENCH/out/instructions-$MAJOR}

cluster_setup bench-instructions 54465
DATA=$CLUSTER_DATA PORT=$CLUSTER_PORT SOCK=$CLUSTER_SOCK
PROFILES=$(dirname "$DATA")/callgrind
VG_PID=""
cleanup() {
  cluster_stop "$DATA" || true
  # The valgrind'ed postmaster, if pg_ctl could not stop it.
  if [[ -n $VG_PID ]]; then kill "$VG_PID" 2>/dev/null || true; fi
}
trap cleanup EXIT

log "PostgreSQL $VERSION: cluster on port $PORT ($DATA)"
cluster_init "$DATA" "$PORT" "$SOCK" "autovacuum = off" "log_connections = on" \
  "log_line_prefix = '%p '"
cluster_start "$DATA" "$PORT" "$SOCK"
export PGHOST=$SOCK PGPORT=$PORT PGUSER=postgres PGDATABASE=idempotency_bench
q() { "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 "$@"; }
q -d postgres -c "CREATE DATABASE idempotency_bench"
log "setup (schema bench, $W3_KEYS completed keys for W3), before valgrind"
q -v w3keys="$W3_KEYS" -f "$BENCH/setup.sql"
# Steady state: hint bits set now (with data checksums, PostgreSQL 18's initdb default, the
# first hint bit set on a page after a checkpoint writes a full-page image), and every table
# and index read into shared buffers after the restart (pg_prewarm), so the measured backends
# neither read (nor verify the checksums of) pages nor set hint bits on the W3 keys.
q -c "CREATE EXTENSION IF NOT EXISTS pg_prewarm" -c "VACUUM" -c CHECKPOINT
cluster_stop "$DATA"

log "restarting the cluster under valgrind --tool=callgrind (slow)"
rm -rf "$PROFILES"
mkdir -p "$PROFILES"
is_root && chown postgres: "$PROFILES"
# The postmaster forks its backends without exec: callgrind follows them, one file per pid.
# Counting starts in PostgresMain, so a backend's profile does not include the postmaster's
# instructions before the fork (which would grow with every connection).
SERVER_LOG=$(dirname "$DATA")/valgrind.log
as_pg valgrind --tool=callgrind --callgrind-out-file="$PROFILES/callgrind.out.%p" \
  --toggle-collect=PostgresMain \
  "$PGBIN/postgres" -D "$DATA" >"$SERVER_LOG" 2>&1 &
VG_PID=$!
ready=0
for _ in $(seq 1 600); do
  # -t: a connection to a server under valgrind can take longer than pg_isready's 3 s.
  if "$PGBIN/pg_isready" -q -t 60 -h "$SOCK" -p "$PORT"; then ready=1 && break; fi
  kill -0 "$VG_PID" 2>/dev/null || { tail -n 30 "$SERVER_LOG" >&2; die "the server under valgrind exited"; }
  sleep 0.5
done
[[ $ready == 1 ]] || die "the server under valgrind did not start"
q -c "SELECT count(pg_prewarm(c.oid)) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname IN ('bench', 'idempotency') AND c.relkind IN ('r', 'i', 't')" >/dev/null

# A finished profile ends with its totals line; prints the instruction count.
profile_total() { sed -nE 's/^(totals|summary): ([0-9]+).*/\2/p' "$1" | tail -n1; }

RUN=0
# measure WORKLOAD TXNS (run in a subshell; the caller counts RUN, which keys embed): runs one
# pgbench client for TXNS transactions and prints the instructions of its backend. pgbench
# opens more than one connection (the others do next to nothing): the server log names the
# backends of the run (log_connections, with the pid), and once each has written its profile
# (when it exits, after pgbench has gone), the largest is the client's.
measure() {
  local w=$1 txns=$2 new f best=0 total done_=0 logged
  # Profiles are named by pid, and pids wrap around (pid_max may be 32768): start empty.
  rm -f "$PROFILES"/callgrind.out.*
  logged=$(stat -c %s "$SERVER_LOG")
  "$PGBIN/pgbench" -n -M prepared -c 1 -j 1 -t "$txns" -D run="$RUN" -D n=0 \
    -D w3keys="$W3_KEYS" -f "$BENCH/workloads/${SCRIPT[$w]}.sql" \
    >"$OUT/$w.$txns.pgbench.txt" 2>&1 ||
    { cat "$OUT/$w.$txns.pgbench.txt" >&2; die "pgbench failed: $w, $txns transactions"; }
  grep -q "actually processed: $txns/$txns" "$OUT/$w.$txns.pgbench.txt" ||
    { cat "$OUT/$w.$txns.pgbench.txt" >&2; die "pgbench did not run $txns transactions: $w"; }
  new=$(tail -c +$((logged + 1)) "$SERVER_LOG" |
    sed -nE 's/^([0-9]+) LOG: +connection received.*/callgrind.out.\1/p')
  [[ -n $new ]] || die "no connection of the $w run in $SERVER_LOG"
  for _ in $(seq 1 1200); do
    done_=1
    for f in $new; do [[ -n $(profile_total "$PROFILES/$f" 2>/dev/null) ]] || done_=0; done
    [[ $done_ == 1 ]] && break
    sleep 0.5
  done
  [[ $done_ == 1 ]] || die "the backends of the $w run did not write their profiles ($new)"
  for f in $new; do
    total=$(profile_total "$PROFILES/$f")
    if [[ $total -gt $best ]]; then
      best=$total
      [[ $txns != "$HIGH" ]] || cp "$PROFILES/$f" "$OUT/$w.high.callgrind"
    fi
  done
  [[ $best -gt 0 ]] || die "no profile of the $w backend"
  echo "$best"
}

rm -rf "$OUT"
mkdir -p "$OUT"
table=$OUT/table.tsv
printf 'workload\tinstructions_%s\tinstructions_%s\tper_txn\n' "$LOW" "$HIGH" >"$table"
for w in $WORKLOADS; do
  log "$w: $LOW and $HIGH transactions"
  RUN=$((RUN + 1))
  low=$(measure "$w" "$LOW")
  RUN=$((RUN + 1))
  high=$(measure "$w" "$HIGH")
  [[ $high -gt $low ]] || die "$w: $HIGH transactions counted $high instructions, $LOW counted $low"
  printf '%s\t%s\t%s\t%s\n' "$w" "$low" "$high" $(((high - low) / (HIGH - LOW))) >>"$table"
done
cluster_stop "$DATA"
wait "$VG_PID" 2>/dev/null || true
VG_PID=""

# --- table -----------------------------------------------------------------------------------
base=$(awk -F'\t' '$1 == "w0" { print $4 }' "$table")
w1=$(awk -F'\t' '$1 == "w1" { print $4 }' "$table")
echo "PostgreSQL $VERSION: server instructions per transaction (callgrind, 1 client, plain," \
  "-M prepared; ($HIGH - $LOW) / $((HIGH - LOW)) transactions)"
printf '%-26s %14s %7s %7s\n' workload "instr/txn" "vs W0" "vs W1"
printf '%-26s %14s %7s %7s\n' -------- --------- ----- -----
while IFS=$'\t' read -r w _ _ per; do
  [[ $w == workload ]] && continue
  printf '%-26s %14s %7s %7s\n' "${LABEL[$w]}" "$(awk -v n="$per" 'BEGIN { printf "%.1fk", n / 1000 }')" \
    "$([[ -n $base ]] && awk -v a="$per" -v b="$base" 'BEGIN { printf "%.2f", a / b }' || echo -)" \
    "$([[ -n $w1 ]] && awk -v a="$per" -v b="$w1" 'BEGIN { printf "%.2f", a / b }' || echo -)"
done <"$table"
echo "(profiles of the $HIGH-transaction runs: $OUT/*.high.callgrind; raw counts: $table)"
