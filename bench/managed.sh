#!/usr/bin/env bash
# The managed edition's benchmark: the key lifecycle of bench/run.sh (W0 baseline insert, W1
# hand-written advisory-lock pattern, W2 reserve + insert + complete, W3 replay), with pgbench,
# where W2 and W3 run both against the extension and against the managed edition
# (editions/managed, installed with psql -f by a role that is not a superuser, in a database
# of its own on the same server), plus the hand-written pattern's replay (W1R) and the floor
# (F2, F3: W2's and W3's scripts calling bench/managed_floor.sql's reserve_floor and
# complete_floor, what any SQL edition keeping the contract must do, in the edition's
# database). One run gives the ratios the managed edition is held to: against the floor (M2/F2,
# M3/F3: at least 0.85), against the hand-written pattern (new keys M2/W1, replays M3/W1R: at
# least 1.0) and against the extension (M2/W2, M3/W3: at least 0.6), each taken within a round
# and the median shown. Then where the edition's time goes: its functions' own time per call
# (track_functions), for M2 and M3.
#
#   bash bench/managed.sh            full run (defaults below: ~20 minutes on 2 cores)
#   bash bench/managed.sh --smoke    a few seconds a run; report under bench/out/managed-smoke
#   PG_CONFIG=/path/to/pg_config, IDEM_PG=18: as bench/run.sh
#
# Knobs (environment), as bench/run.sh's: BENCH_DURATION=6, BENCH_ROUNDS=5,
# BENCH_CLIENTS="8 1", BENCH_MODES="plain pipelined", BENCH_WORKLOADS="w0 w1 w2 m2 f2 w1r w3 m3 f3",
# BENCH_W3_KEYS=20000, BENCH_STATS_TXNS=2000 (the time-per-function runs), BENCH_BUILD=1,
# BENCH_PORT (default 54452 + IDEM_PORT_OFFSET), BENCH_OUT (default bench/out/managed-full),
# BENCH_REPORT (default bench/managed.md; the smoke's goes under BENCH_OUT), BENCH_KEEP=0.
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
WORKLOADS=${BENCH_WORKLOADS:-w0 w1 w2 m2 f2 w1r w3 m3 f3}
W3_KEYS=${BENCH_W3_KEYS:-20000}
STATS_TXNS=${BENCH_STATS_TXNS:-2000}
TXNS="" # smoke: a fixed number of transactions per run instead of a duration
if [[ $SMOKE == 1 ]]; then
  TXNS=40 ROUNDS=1 CLIENTS=2 W3_KEYS=1000 STATS_TXNS=100
fi
EXT_DB=idempotency_bench
MANAGED_DB=idempotency_bench_managed
MANAGED_ROLE=idempotency_bench_admin
PORT=${BENCH_PORT:-$((54452 + ${IDEM_PORT_OFFSET:-0}))}
OUT=${BENCH_OUT:-$BENCH/out/managed-$([[ $SMOKE == 1 ]] && echo smoke || echo full)}
REPORT=${BENCH_REPORT:-$BENCH/managed.md}
[[ $SMOKE == 1 ]] && REPORT=$OUT/managed.md

# The workload scripts (bench/workloads) and the database each runs against: the M ones are
# W2's and W3's very scripts, against the managed edition's database; the F ones the same
# scripts calling the floor's functions instead of reserve and complete.
declare -A SCRIPT=([w0]=w0_baseline [w1]=w1_handwritten [w2]=w2_extension [m2]=w2_extension
  [f2]=w2_extension [w1r]=w1r_handwritten_replay [w3]=w3_replay [m3]=w3_replay [f3]=w3_replay)
declare -A DBOF=([w0]=$EXT_DB [w1]=$EXT_DB [w2]=$EXT_DB [m2]=$MANAGED_DB [f2]=$MANAGED_DB
  [w1r]=$EXT_DB [w3]=$EXT_DB [m3]=$MANAGED_DB [f3]=$MANAGED_DB)
declare -A NAME=([w0]="W0 baseline insert" [w1]="W1 hand-written pattern"
  [w2]="W2 extension" [m2]="M2 managed edition (W2's statements)"
  [f2]="F2 the floor (managed_floor.sql, W2's statements)"
  [w1r]="W1R hand-written replay" [w3]="W3 replay, extension"
  [m3]="M3 replay, managed edition (W3's statement)"
  [f3]="F3 the floor's replay (managed_floor.sql, W3's statement)")
# numerator denominator minimum: the managed edition's targets.
TARGETS="m2 f2 0.85
m3 f3 0.85
m2 w1 1.0
m3 w1r 1.0
m2 w2 0.6
m3 w3 0.6"

# --- cluster: the extension built and preloaded (its database), the edition in another -------
if [[ ! -x $PG_CONFIG && ${IDEM_PG:-15} != 15 ]]; then build_pg_major "$IDEM_PG"; fi
log "PostgreSQL $("$PG_CONFIG" --version | awk '{ print $2 }') ($PG_CONFIG)"
[[ ${BENCH_BUILD:-1} == 1 ]] && IDEM_WERROR=1 build_and_install >&2
DATA=/tmp/idempotency-bench-managed-$PORT/data
SOCK=/tmp/idempotency-$PORT
stop_cluster() { [[ ${BENCH_KEEP:-0} != 1 ]] && cluster_stop "$DATA" || true; }
log "starting a throwaway cluster on port $PORT ($DATA)"
cluster_init "$DATA" "$PORT" "$SOCK"
trap stop_cluster EXIT
cluster_start "$DATA"
export PGHOST=$SOCK PGPORT=$PORT PGUSER=postgres
q() { "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 "$@"; }
for db in $EXT_DB $MANAGED_DB; do
  q -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
done
# The managed edition as on a managed database: its script run by the database's owner, a
# role that is not a superuser. The benchmark's own schema and seed keys: bench/setup.sql
# (without its CREATE EXTENSION), run by that role too.
q -d postgres -c "DROP ROLE IF EXISTS $MANAGED_ROLE" -c "CREATE ROLE $MANAGED_ROLE LOGIN NOSUPERUSER" \
  -c "ALTER DATABASE $MANAGED_DB OWNER TO $MANAGED_ROLE"
q -U "$MANAGED_ROLE" -d $MANAGED_DB -1 -f "$IDEM_ROOT/editions/managed/idempotency--0.4.0.sql"
q -U "$MANAGED_ROLE" -d $MANAGED_DB -f "$BENCH/managed_floor.sql"
log "setup (schema bench, $W3_KEYS completed keys for W3 and M3, in both databases)"
q -d $EXT_DB -c "CREATE EXTENSION idempotency"
# the time partitions, made ahead as the background worker (extension) or pg_cron (edition) does
q -d $EXT_DB -c "SELECT idempotency.maintain()" >/dev/null
q -U "$MANAGED_ROLE" -d $MANAGED_DB -c "SELECT idempotency.maintain()" >/dev/null
q -d $EXT_DB -v w3keys="$W3_KEYS" -f "$BENCH/setup.sql"
sed '/^CREATE EXTENSION/d' "$BENCH/setup.sql" | q -U "$MANAGED_ROLE" -d $MANAGED_DB -v w3keys="$W3_KEYS" -f -
[[ $(q -d $MANAGED_DB -c "SELECT edition FROM ($(python3 -c 'import json, sys
print(json.load(open(sys.argv[1]))["statements"]["edition"]["sql"])' "$IDEM_ROOT/test/vectors/statements.json")) AS e") == managed ]] ||
  die "$MANAGED_DB does not have the managed edition"
for db in $EXT_DB $MANAGED_DB; do
  [[ $(q -d $db -c "SELECT outcome FROM idempotency.reserve('bench-w3', '1',
          idempotency.fingerprint(jsonb_build_object('amount', 1)))") == replay ]] ||
    die "W3 keys do not replay in $db"
done

rm -rf "$OUT"
mkdir -p "$OUT/scripts" "$OUT/logs"
for w in $WORKLOADS; do
  f=$BENCH/workloads/${SCRIPT[$w]}.sql
  if [[ $w == f* ]]; then
    sed 's/idempotency\.reserve(/idempotency.reserve_floor(/; s/idempotency\.complete(/idempotency.complete_floor(/' \
      "$f" >"$OUT/scripts/$w.plain.sql"
  else
    cp "$f" "$OUT/scripts/$w.plain.sql"
  fi
  # Pipelined: every run of consecutive SQL lines goes into \startpipeline ... \endpipeline.
  awk '/^(\\|--)/ || /^$/ { if (g) { print "\\endpipeline"; g = 0 } print; next }
       { if (!g) { print "\\startpipeline"; g = 1 } print }
       END { if (g) print "\\endpipeline" }' "$OUT/scripts/$w.plain.sql" >"$OUT/scripts/$w.pipelined.sql"
done

RUN=0
# The CPU time of the server's backends that have ended (the postmaster's reaped children, in
# clock ticks): a run's backends end with pgbench, so the difference over a run is their CPU
# (and that of any autovacuum worker that ended meanwhile).
POSTMASTER=$(head -1 "$DATA/postmaster.pid")
TICKS=$(getconf CLK_TCK)
ended_backends_ticks() { awk '{ print $16 + $17 }' "/proc/$POSTMASTER/stat"; }
pgbench_gone() { # until pgbench's sessions have ended and been reaped
  for _ in $(seq 1 100); do
    [[ $(q -d postgres -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgbench'") == 0 ]] && return
    sleep 0.1
  done
}
# pgbench_run WORKLOAD MODE CLIENTS TAG [pgbench length args]: sets PGBENCH_OUT and
# BACKEND_TICKS (the CPU of the run's backends). Keys embed the run number, so each run's are new.
pgbench_run() {
  local w=$1 mode=$2 c=$3 tag=$4
  shift 4
  RUN=$((RUN + 1))
  local jobs=$((c < 2 ? c : 2)) out=$OUT/logs/$tag-pgbench.txt before
  local length=(-T "$DURATION")
  [[ -n $TXNS ]] && length=(-t "$TXNS")
  [[ $# -gt 0 ]] && length=("$@")
  before=$(ended_backends_ticks)
  "$PGBIN/pgbench" -n -M prepared -d "${DBOF[$w]}" -c "$c" -j "$jobs" "${length[@]}" \
    -D run="$RUN" -D n=0 -D w3keys="$W3_KEYS" -f "$OUT/scripts/$w.$mode.sql" >"$out" 2>&1 ||
    { cat "$out" >&2; die "pgbench failed: $tag"; }
  if grep -q "aborted" "$out"; then cat "$out" >&2; die "pgbench clients aborted: $tag"; fi
  pgbench_gone
  BACKEND_TICKS=$(($(ended_backends_ticks) - before))
  PGBENCH_OUT=$out
}

# --- rounds ----------------------------------------------------------------------------------
runs=$OUT/runs.tsv
printf 'round\tclients\tmode\tworkload\ttps\ttxns\tbackend_us\n' >"$runs"
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
        [[ -z $TXNS ]] && q -d postgres -c CHECKPOINT
        pgbench_run "$w" "$mode" "$c" "$tag"
        tps=$(sed -nE 's/^tps = ([0-9.]+) .*/\1/p' "$PGBENCH_OUT")
        txns=$(sed -nE 's/^number of transactions actually processed: ([0-9]+).*/\1/p' "$PGBENCH_OUT")
        backend_us=$((BACKEND_TICKS * 1000000 / TICKS / (txns > 0 ? txns : 1)))
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$c" "$mode" "$w" "$tps" "$txns" \
          "$backend_us" >>"$runs"
        printf '[%3d/%d] %-28s %10.1f tps %6d us backend CPU/txn\n' "$n" "$total" "$tag" "$tps" \
          "$backend_us" >&2
      done
    done
  done
done

# Sanity: every W2, M2 and F2 transaction completed a key in its database (M2's and F2's share
# the edition's).
for w in w2 m2; do
  [[ " $WORKLOADS " == *" $w "* ]] || continue
  want=$(awk -F'\t' -v w=$w '$4 == w || (w == "m2" && $4 == "f2") { s += $6 } END { print s + 0 }' "$runs")
  got=$(q -d "${DBOF[$w]}" -c "SELECT count(*) FROM idempotency.keys WHERE scope = 'bench-w2' AND state = 'completed'")
  [[ $got == "$want" ]] || die "$w: $got completed keys for $want transactions"
done

# --- where the managed edition's time goes ----------------------------------------------------
# Each function's calls and time (total: with what it calls; self: its own), per transaction,
# from pg_stat_user_functions with track_functions = 'all' (PL/pgSQL and SQL functions that
# are not inlined), over STATS_TXNS transactions of one client, plain.
profile=$OUT/functions.tsv
printf 'workload\tfunction\tcalls_per_txn\ttotal_us_per_txn\tself_us_per_txn\n' >"$profile"
for w in m2 m3; do
  [[ " $WORKLOADS " == *" $w "* ]] || continue
  pgbench_run "$w" plain 1 "profile-warm-$w" -t $((STATS_TXNS / 4 + 1))
  q -d $MANAGED_DB -c "SELECT pg_stat_reset()"
  PGOPTIONS="-c track_functions=all" pgbench_run "$w" plain 1 "profile-$w" -t "$STATS_TXNS"
  # (pgbench_run waited for pgbench's sessions to end, which flushes their statistics)
  q -d $MANAGED_DB -F $'\t' -c "SELECT '$w', p.oid::regprocedure,
      round(s.calls::numeric / $STATS_TXNS, 2),
      round((s.total_time * 1000 / $STATS_TXNS)::numeric, 1),
      round((s.self_time * 1000 / $STATS_TXNS)::numeric, 1)
    FROM pg_stat_user_functions s JOIN pg_proc p ON p.oid = s.funcid
    WHERE s.schemaname = 'idempotency' AND s.calls > 0 ORDER BY s.self_time DESC" >>"$profile"
done

# --- report ----------------------------------------------------------------------------------
python3 - "$runs" "$profile" "$REPORT" "$LENGTH" "$ROUNDS" <<PY
import csv, statistics, sys, datetime, platform
runs_path, profile_path, report_path, length, rounds = sys.argv[1:]
names = {$(for w in "${!NAME[@]}"; do printf '"%s": "%s", ' "$w" "${NAME[$w]}"; done)}
targets = [(a, b, float(m)) for a, b, m in (l.split() for l in """$TARGETS""".splitlines())]
rows = list(csv.DictReader(open(runs_path), delimiter="\t"))
tps, cpu = {}, {}
for r in rows:
    tps.setdefault((r["clients"], r["mode"], r["workload"]), {})[r["round"]] = float(r["tps"])
    cpu.setdefault((r["clients"], r["mode"], r["workload"]), []).append(int(r["backend_us"]))
out = [f"# The managed edition against the extension and the hand-written pattern",
       "",
       f"{datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC, {platform.node()}; {length} per run, "
       f"{rounds} round(s), pgbench -M prepared. TPS: median over rounds; a ratio is taken within "
       "each round and the median shown.", "",
       "Backend CPU: the CPU time of the run's server processes (the postmaster's ended "
       "children) per transaction, median over rounds.", "",
       "| clients | mode | workload | tps | backend CPU µs/txn |", "|---|---|---|---|---|"]
for (c, mode, w), by_round in sorted(tps.items(), key=lambda kv: (-int(kv[0][0]), kv[0][1])):
    out.append(f"| {c} | {mode} | {names.get(w, w)} | {statistics.median(by_round.values()):.1f} "
               f"| {statistics.median(cpu[(c, mode, w)]):.0f} |")
out += ["", "| ratio | clients | mode | median | target | met |", "|---|---|---|---|---|---|"]
verdicts = []
for c, mode in sorted({(k[0], k[1]) for k in tps}, key=lambda k: (-int(k[0]), k[1])):
    for a, b, minimum in targets:
        if (c, mode, a) not in tps or (c, mode, b) not in tps:
            continue
        ra, rb = tps[(c, mode, a)], tps[(c, mode, b)]
        ratio = statistics.median(ra[r] / rb[r] for r in ra if r in rb and rb[r] > 0)
        met = "yes" if ratio >= minimum else "no"
        verdicts.append(met)
        out.append(f"| {a.upper()}/{b.upper()} | {c} | {mode} | {ratio:.2f} | {minimum:.2f} | {met} |")
prof = list(csv.DictReader(open(profile_path), delimiter="\t"))
if prof:
    out += ["", "Where the managed edition's time goes (one client, plain; per transaction; "
            "total: with what the function calls, self: its own):", "",
            "| workload | function | calls | total µs | self µs |", "|---|---|---|---|---|"]
    for p in prof:
        out.append(f"| {p['workload'].upper()} | \`{p['function']}\` | {p['calls_per_txn']} | "
                   f"{p['total_us_per_txn']} | {p['self_us_per_txn']} |")
text = "\n".join(out) + "\n"
open(report_path, "w").write(text)
print(text)
print(f"{verdicts.count('yes')} of {len(verdicts)} ratios meet their target")
PY
log "report: $REPORT"
