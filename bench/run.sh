#!/usr/bin/env bash
# The key-lifecycle benchmark: W0 baseline insert, W1 hand-written advisory-lock pattern,
# W2 extension, W3 replay, W4 mixed (10% repeats); plain and pipelined; several client
# counts; interleaved over rounds. Prints a table and writes bench/results.md + results.png.
#
#   bash bench/run.sh            full run (defaults below: ~12 minutes on 2 cores)
#   bash bench/run.sh --smoke    a few seconds; writes its report under bench/out/ only
#   PG_CONFIG=/path/to/pg_config bash bench/run.sh    against that server (15, 17 or 18);
#   IDEM_PG=18 bash bench/run.sh                      the same with the test command's cache build
#
# Knobs (environment):
#   BENCH_DURATION=6         seconds per pgbench run
#   BENCH_ROUNDS=5           rounds; each round runs every configuration once
#   BENCH_CLIENTS="8 1"      client counts
#   BENCH_MODES="plain pipelined"
#   BENCH_WORKLOADS="w0 w1 w2 w3 w4 w5"   (w5: W2's reads and writes as plain SQL, a floor;
#                            also w2s: W2 with idempotency.direct_storage off, i.e. through SPI
#                            as before the optimisation)
#   BENCH_W3_KEYS=20000      completed keys W3 replays
#   BENCH_STATS_TXNS=2000    transactions of the WAL / row-version measurement
#   BENCH_PGHOST, BENCH_PGPORT   reuse this running cluster (superuser postgres) instead of
#                            starting a throwaway one on BENCH_PORT (54450)
#   BENCH_DB=idempotency_bench   database (created if missing; schema bench is recreated)
#   BENCH_BUILD=1            build and install the extension first (0: use the installed one)
#   BENCH_OUT=bench/out/full     working folder (logs, runs.tsv); emptied first
#   BENCH_REPORT_DIR=bench   where results.md and results.png go (a noisy run: say $BENCH_OUT)
#   BENCH_KEEP=0             1: leave the throwaway cluster running
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
BENCH=$IDEM_ROOT/bench

SMOKE=0
[[ ${1:-} == --smoke ]] && SMOKE=1
DURATION=${BENCH_DURATION:-6}
ROUNDS=${BENCH_ROUNDS:-5}
CLIENTS=${BENCH_CLIENTS:-8 1}
MODES=${BENCH_MODES:-plain pipelined}
WORKLOADS=${BENCH_WORKLOADS:-w0 w1 w2 w3 w4 w5}
W3_KEYS=${BENCH_W3_KEYS:-20000}
STATS_TXNS=${BENCH_STATS_TXNS:-2000}
TXNS=""   # smoke: a fixed number of transactions per run instead of a duration
if [[ $SMOKE == 1 ]]; then
  TXNS=40 ROUNDS=1 CLIENTS=2 W3_KEYS=1000 STATS_TXNS=100
fi
DB=${BENCH_DB:-idempotency_bench}
PORT=${BENCH_PORT:-$((54450 + ${IDEM_PORT_OFFSET:-0}))}
OUT=${BENCH_OUT:-$BENCH/out/$([[ $SMOKE == 1 ]] && echo smoke || echo full)}
REPORT_DIR=${BENCH_REPORT_DIR:-$BENCH}
[[ $SMOKE == 1 ]] && REPORT_DIR=$OUT

declare -A SCRIPT=([w0]=w0_baseline [w1]=w1_handwritten [w2]=w2_extension [w3]=w3_replay
  [w4]=w4_mixed [w5]=w5_floor [w2s]=w2_extension)

# --- cluster ---------------------------------------------------------------------------------
# IDEM_PG=17/18 without PG_CONFIG: that major's cache build (scripts/majors.sh), made on first use.
if [[ ! -x $PG_CONFIG && ${IDEM_PG:-15} != 15 ]]; then build_pg_major "$IDEM_PG"; fi
log "PostgreSQL $("$PG_CONFIG" --version | awk '{ print $2 }') ($PG_CONFIG)"
DATA=""
stop_cluster() { [[ -n $DATA && ${BENCH_KEEP:-0} != 1 ]] && cluster_stop "$DATA" || true; }
if [[ -n ${BENCH_PGHOST:-} ]]; then
  export PGHOST=$BENCH_PGHOST PGPORT=${BENCH_PGPORT:-5432}
else
  [[ ${BENCH_BUILD:-1} == 1 ]] && IDEM_WERROR=1 build_and_install >&2
  DATA=/tmp/idempotency-bench-$PORT/data
  log "starting a throwaway cluster on port $PORT ($DATA)"
  cluster_init "$DATA" "$PORT" "/tmp/idempotency-$PORT"
  trap stop_cluster EXIT
  cluster_start "$DATA" "$PORT" "/tmp/idempotency-$PORT"
  export PGHOST=/tmp/idempotency-$PORT PGPORT=$PORT
fi
export PGUSER=postgres
q() { "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 "$@"; }
q -d postgres -c "SELECT 1 FROM pg_database WHERE datname = '$DB'" | grep -q 1 ||
  q -d postgres -c "CREATE DATABASE $DB"
export PGDATABASE=$DB

# CPU time of exited backends accumulates in the postmaster's cutime + cstime (ticks); readable
# only when the cluster runs on this machine.
PM_STAT=/proc/$(head -n1 "$(q -c 'SHOW data_directory')/postmaster.pid" 2>/dev/null || echo 0)/stat
TICK=$(getconf CLK_TCK)
child_ticks() { [[ -r $1 ]] && awk '{ print $16 + $17 }' "$1" || echo -1; }
# CPU ticks the hypervisor gave to other guests ("steal"), and all ticks, of this machine.
cpu_ticks() { awk '/^cpu / { print $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat; }

rm -rf "$OUT"
mkdir -p "$OUT/scripts" "$OUT/logs"
for w in $WORKLOADS; do
  f=$BENCH/workloads/${SCRIPT[$w]}.sql
  cp "$f" "$OUT/scripts/$w.plain.sql"
  # Pipelined: every run of consecutive SQL lines goes into \startpipeline ... \endpipeline.
  awk '/^(\\|--)/ || /^$/ { if (g) { print "\\endpipeline"; g = 0 } print; next }
       { if (!g) { print "\\startpipeline"; g = 1 } print }
       END { if (g) print "\\endpipeline" }' "$f" >"$OUT/scripts/$w.pipelined.sql"
done

log "setup (schema bench, $W3_KEYS completed keys for W3)"
q -v w3keys="$W3_KEYS" -f "$BENCH/setup.sql"
# Sanity: W3 keys replay, a fresh key is new (rolled back).
[[ $(q -c "SELECT outcome FROM idempotency.reserve('bench-w3', '1',
        idempotency.fingerprint(jsonb_build_object('amount', 1)))") == replay ]] ||
  die "W3 keys do not replay"

RUN=0
# pgbench_run WORKLOAD MODE CLIENTS TAG [pgbench length args]: sets PGBENCH_OUT (its output;
# the transaction logs are $OUT/logs/TAG.*). Keys embed the run number, so each run's are new.
pgbench_run() {
  local w=$1 mode=$2 c=$3 tag=$4
  shift 4
  RUN=$((RUN + 1))
  local jobs=$((c < 2 ? c : 2)) out=$OUT/logs/$tag-pgbench.txt
  local length=(-T "$DURATION")
  [[ -n $TXNS ]] && length=(-t "$TXNS")
  [[ $# -gt 0 ]] && length=("$@")
  # bash -c: its cutime + cstime after the wait are pgbench's CPU time.
  local options=${PGOPTIONS:-}
  [[ $w == w2s ]] && options="$options -c idempotency.direct_storage=off"
  PGOPTIONS=$options bash -c '"$@" >"$0" 2>&1; awk "{ print \$16 + \$17 }" /proc/$$/stat >"$0.cpu"' "$out" \
    "$PGBIN/pgbench" -n -M prepared -c "$c" -j "$jobs" "${length[@]}" -D run="$RUN" -D n=0 \
    -D w3keys="$W3_KEYS" -l --log-prefix="$OUT/logs/$tag" -f "$OUT/scripts/$w.$mode.sql" ||
    { cat "$out" >&2; die "pgbench failed: $tag"; }
  if grep -q "aborted" "$out"; then cat "$out" >&2; die "pgbench clients aborted: $tag"; fi
  PGBENCH_OUT=$out
}

# Waits until the benchmark's backends are gone (their CPU time and statistics are then in).
wait_backends() {
  local i
  for i in $(seq 1 50); do
    [[ $(q -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgbench'") == 0 ]] &&
      return 0
    sleep 0.1
  done
}

# --- rounds ----------------------------------------------------------------------------------
runs=$OUT/runs.tsv
printf 'round\tclients\tmode\tworkload\ttps\ttxns\tserver_cpu_s\tclient_cpu_s\tsteal_pct\tlogs\n' >"$runs"
read -ra wl <<<"$WORKLOADS"
total=$((ROUNDS * $(wc -w <<<"$CLIENTS") * $(wc -w <<<"$MODES") * ${#wl[@]}))
LENGTH="${DURATION} s"
[[ -n $TXNS ]] && LENGTH="$TXNS transactions"
log "$total runs of $LENGTH"
n=0
for round in $(seq 1 "$ROUNDS"); do
  # Rotate the workload order each round, so no workload always follows the same one.
  order=("${wl[@]:$(((round - 1) % ${#wl[@]}))}" "${wl[@]:0:$(((round - 1) % ${#wl[@]}))}")
  for c in $CLIENTS; do
    for mode in $MODES; do
      for w in "${order[@]}"; do
        n=$((n + 1))
        tag=r$round-c$c-$mode-$w
        [[ -z $TXNS ]] && q -c CHECKPOINT
        before=$(child_ticks "$PM_STAT")
        read -r steal0 all0 <<<"$(cpu_ticks)"
        pgbench_run "$w" "$mode" "$c" "$tag"
        read -r steal1 all1 <<<"$(cpu_ticks)"
        out=$PGBENCH_OUT
        wait_backends
        after=$(child_ticks "$PM_STAT")
        tps=$(sed -nE 's/^tps = ([0-9.]+) .*/\1/p' "$out")
        txns=$(sed -nE 's/^number of transactions actually processed: ([0-9]+).*/\1/p' "$out")
        server=-1
        [[ $before -ge 0 ]] && server=$(awk -v t=$((after - before)) -v k="$TICK" 'BEGIN { print t / k }')
        client=$(awk -v k="$TICK" '{ print $1 / k }' "$out.cpu")
        steal=$(awk -v s=$((steal1 - steal0)) -v a=$((all1 - all0)) \
          'BEGIN { printf "%.1f", (a > 0 ? 100 * s / a : 0) }')
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$c" "$mode" "$w" "$tps" \
          "$txns" "$server" "$client" "$steal" "$OUT/logs/$tag" >>"$runs"
        printf '[%3d/%d] %-28s %10.1f tps  steal %5s%%\n' "$n" "$total" "$tag" "$tps" "$steal" >&2
      done
    done
  done
done

# --- WAL bytes and row versions per request ----------------------------------------------------
stats=$OUT/writes.tsv
WARM_TXNS=$((STATS_TXNS / 4 + 1))
printf 'workload\ttxns\twal_bytes\twal_records\twal_fpi\tins\tupd\tdel\thot_upd\n' >"$stats"
snapshot() {
  q -F $'\t' -c "SELECT w.wal_bytes, w.wal_records, w.wal_fpi, t.ins, t.upd, t.del, t.hot
    FROM pg_stat_wal w, (SELECT sum(n_tup_ins) ins, sum(n_tup_upd) upd, sum(n_tup_del) del,
      sum(n_tup_hot_upd) hot FROM pg_stat_user_tables
      WHERE schemaname IN ('bench', 'idempotency')) t"
}
for w in w0 w1 w2 w5; do
  [[ " $WORKLOADS " == *" $w "* ]] || continue
  # Warm up first, so the measured run writes few full-page images.
  pgbench_run "$w" plain 1 "writes-warm-$w" -t "$WARM_TXNS"
  wait_backends
  IFS=$'\t' read -ra a <<<"$(snapshot)"
  pgbench_run "$w" plain 1 "writes-$w" -t "$STATS_TXNS"
  wait_backends
  IFS=$'\t' read -ra b <<<"$(snapshot)"
  printf '%s\t%s' "$w" "$STATS_TXNS" >>"$stats"
  for i in 0 1 2 3 4 5 6; do printf '\t%s' $((b[i] - a[i])) >>"$stats"; done
  printf '\n' >>"$stats"
done

# Sanity: every W2 (and W2 via SPI) transaction completed a key.
w2_txns=$(awk -F'\t' '$4 == "w2" || $4 == "w2s" { s += $6 } END { print s + 0 }' "$runs")
w2_keys=$(q -c "SELECT count(*) FROM idempotency.keys WHERE scope = 'bench-w2' AND state = 'completed'")
w2_txns=$((w2_txns + WARM_TXNS + STATS_TXNS))
[[ " $WORKLOADS " != *" w2 "* || $w2_keys == "$w2_txns" ]] ||
  log "warning: $w2_keys completed W2 keys for $w2_txns W2 transactions"

# --- report ----------------------------------------------------------------------------------
q -F $'\t' -c "SELECT name, current_setting(name) FROM pg_settings WHERE name IN
  ('server_version', 'synchronous_commit', 'fsync', 'wal_sync_method', 'shared_buffers',
   'wal_level', 'max_wal_size', 'checkpoint_timeout', 'full_page_writes', 'wal_compression',
   'shared_preload_libraries', 'autovacuum') ORDER BY name" >"$OUT/settings.tsv"
{
  echo "date	$(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "cpu	$(lscpu | sed -nE 's/^Model name: +//p' | head -1), $(nproc) cores"
  echo "memory	$(free -g | awk '/^Mem:/ { print $2 " GiB" }')"
  echo "os	$(. /etc/os-release && echo "$PRETTY_NAME"), kernel $(uname -r)"
  echo "disk	$(df -h "$(q -c 'SHOW data_directory')" 2>/dev/null | awk 'NR == 2 { print $1 }')"
  echo "run	$LENGTH per run, $ROUNDS rounds, clients: $CLIENTS, pgbench -M prepared, CHECKPOINT before each run"
} >"$OUT/machine.tsv"
python3 "$BENCH/report.py" --runs "$runs" --writes "$stats" --settings "$OUT/settings.tsv" \
  --machine "$OUT/machine.tsv" --markdown "$REPORT_DIR/results.md" \
  --chart "$REPORT_DIR/results.png" --workdir "$OUT"
