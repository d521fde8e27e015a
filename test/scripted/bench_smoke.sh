#!/usr/bin/env bash
# Keeps the benchmark commands working: bench/run.sh --smoke (a few seconds, its own cluster,
# report under bench/out/smoke/) must run every workload and print every target line;
# bench/clients.sh --smoke must measure both clients with both bodies (its own checks: each
# client's fingerprint equals the server's, every key is new and completed).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=$(BENCH_BUILD=0 bash bench/run.sh --smoke 2>&1) || { echo "$out"; exit 1; }
echo "$out" | tail -40
for workload in "W0 baseline insert" "W1 hand-written pattern" "W2 extension" "W3 replay" \
  "W4 mixed" "W5 floor"; do
  grep -q "$workload" <<<"$out" || { echo "missing workload: $workload"; exit 1; }
done
[[ $(grep -c '^target ' <<<"$out") -eq 5 ]] || { echo "expected 5 target lines"; exit 1; }
[[ $(grep -c '^reference ' <<<"$out") -eq 3 ]] || { echo "expected 3 reference lines"; exit 1; }

out=$(bash bench/clients.sh --smoke 2>&1) || { echo "$out"; exit 1; }
report=bench/out/clients-smoke/clients.md
for client in python node; do
  # one row per body in each of the two tables
  [[ $(grep -cE "^\| $client \| [0-9,]+ B \|" "$report") -eq 4 ]] ||
    { echo "$out"; echo "clients.md: expected 4 rows of $client"; exit 1; }
done

# bench/peers.sh --smoke (issue 23): every strategy in every speed table (with the count of keys
# that got more than one order) and in the round-trip table, every fault run, the chart. No
# figure is checked, only that the harness ran.
out=$(bash bench/peers.sh --smoke 2>&1) || { echo "$out"; exit 1; }
report=bench/out/peers-smoke/results.md
for strategy in "(1) middleware" "(2) runExternal" "(3) fortress SQL" "(4) Redis SET NX + Lua" \
  "(5) hybrid Redis + SQL" "(6) Powertools, Redis" "(7) express-idempotency, Redis"; do
  # 5 speed rows ending in "doubled / keys", 1 round-trip row of 6 numbers
  [[ $(awk -v row="| $strategy | " 'index($0, row) == 1' "$report" |
    grep -cE '\| [0-9]+ / [0-9]+ \| [0-9]+ / [0-9]+ \|$') -eq 5 ]] ||
    { echo "$out"; echo "results.md: expected 5 speed rows of $strategy"; exit 1; }
  [[ $(awk -v row="| $strategy | " 'index($0, row) == 1' "$report" |
    grep -cE '^(\| [^|]+ )(\| [0-9.]+ ){6}\|$') -eq 1 ]] ||
    { echo "$out"; echo "results.md: expected 1 round-trip row of $strategy"; exit 1; }
done
# faults: 3 PostgreSQL-only strategies x 2 faults, 4 Redis ones x 3 faults (the smoke run
# takes Redis's defaults only)
[[ $(grep -cE '^\| default \| ' "$report") -eq 18 ]] ||
  { echo "$out"; echo "results.md: expected 18 fault rows"; exit 1; }
[[ -s bench/out/peers-smoke/results.png ]] || { echo "no chart"; exit 1; }
echo "bench smoke: ok"
