#!/usr/bin/env bash
# idem: same on every major (the benchmark script; the IDEM_PG=15 run runs it, see .ci/run)
# Keeps bench/scale.sh working: its smoke size (two tiny sizes, a fixed number of transactions,
# its own cluster, report under bench/out/scale-smoke/) must load both tables, run every
# workload on both, and report every figure: throughput and latency, the curve, the targets,
# bytes per key (as loaded, as written into the loaded and into empty tables), WAL per new key,
# autovacuum, and the maintenance timeline with what was waited on (its own checks:
# every loaded key replays on both tables, maintain() dropped the expired partition). No speed
# figure is checked, only that each is there and is a number.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=$(BENCH_BUILD=0 bash bench/scale.sh --smoke 2>&1) || { echo "$out"; exit 1; }
report=bench/out/scale-smoke/scale.md
fail() { echo "$out" | tail -n 60; echo "scale.md: $1"; exit 1; }
num='[0-9][0-9,]*(\.[0-9]+)?'
# 2 sizes x 3 workloads, every figure a number
for workload in "new keys" "replays, as retries arrive" "replays, uniform \\(cold\\)"; do
  [[ $(grep -cE "^\| $num \| 2 \| $workload \| $num \| $num \| $num \| $num \| $num \| $num \| $num \| " \
    "$report") -eq 2 ]] || fail "expected 2 rows of $workload with every figure"
  [[ $(grep -cE "^\| 2 \| $workload \| $num \| $num \|$" "$report") -eq 1 ]] ||
    fail "expected 1 curve row of $workload"
done
[[ $(grep -cE "^target (new|recent) keys at 9,000 / 3,000, 2 clients: $num+x \(>= 0.9: (met|not met)\)$" \
  "$report") -eq 2 ]] || fail "expected 2 curve target lines"
grep -qE "^target uniform replays at 9,000, 2 clients: extension / hand-written $num+x" "$report" ||
  fail "expected the uniform replay target line"
for table in extension hand-written; do
  [[ $(grep -cE "^\| $num \| $table \| ([0-9]+ \| ){5}[0-9]+ \| " "$report") -eq 2 ]] ||
    fail "expected 2 bytes-per-key rows of $table"
  [[ $(grep -cE "^\| $num \| $table \| [0-9]+ \| $num \| [0-9]+ \| $num \| [0-9]+ \| $num \| [0-9,]+ \([0-9,]+\) \|$" \
    "$report") -eq 2 ]] || fail "expected 2 autovacuum rows of $table"
done
[[ $(grep -cE "^\| $num \| 2 \| $num \| $num \| $num \| $num \| $num \|$" "$report") -eq 2 ]] ||
  fail "expected 2 WAL rows"
grep -qE "^maintain\(\) dropped an expired partition of 9,000 keys \($num MB\) and created [0-9]+ partitions in $num ms" \
  "$report" || fail "expected the maintenance line"
grep -qE "^target no key call waits more than 50 ms on maintenance: slowest overlapping call $num ms" \
  "$report" || fail "expected the maintenance target line"
grep -qE "^ *-?[0-9]+\.[0-9] s +[0-9]+ calls  max +$num ms$" "$report" || fail "expected a timeline"
grep -qxF "| kind | wait / lock | samples | backends | first s | last s |" "$report" ||
  fail "expected the wait samples' table"
grep -qE "^log_lock_waits lines \(waits past 10 ms\) during the step: [0-9]+$" "$report" ||
  fail "expected the count of logged lock waits"
for table in extension hand-written; do
  [[ $(grep -cE "^\| into ($num loaded|empty) \| $num \| $table \| ([0-9]+ \| ){4}[0-9]+ \|$" "$report") -eq 3 ]] ||
    fail "expected 3 rows of bytes per key as written of $table"
done
grep -qE "^target bytes per key as written into empty tables: extension [0-9]+, hand-written [0-9]+ \((met|not met)\)$" \
  "$report" || fail "expected the bytes-as-written target line"
echo "bench scale smoke: ok"
