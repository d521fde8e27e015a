#!/usr/bin/env bash
# idem: same on every major (the benchmark scripts; the IDEM_PG=15 run runs it, see .ci/run)
# Keeps the benchmark commands working: bench/run.sh --smoke (a few seconds, its own cluster,
# report under bench/out/smoke/) must run every workload and print every target line;
# bench/clients.sh --smoke must measure both clients with both bodies (its own checks: each
# client's fingerprint equals the server's, every key is new and completed) and the Python
# middleware both ways.
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
# the Python WSGI middleware, both ways of claiming (its own checks: the fallback variant never
# ran reserve_begin, every replay was one, every key is completed once)
for request in "new key" replay; do
  [[ $(grep -cE "^\| $request \| [0-9.,]+ \| [0-9.,]+ \| [0-9.]+ \| [0-9.,]+ / [0-9.,]+ \|" \
    "$report") -eq 1 ]] || { echo "$out"; echo "clients.md: expected 1 middleware row: $request"; exit 1; }
done

# bench/peers.sh --smoke: every strategy (the Fastify service's too) in every speed table (with
# the count of keys that got more than one order) and in the round-trip table, the loops
# without HTTP, every fault run, the Fastify-beside-Express table, the chart. No speed figure is checked, only that the harness ran; the round trips
# of (1s) are (one call of execute_once a request). peers.sh itself fails when one of the
# project's strategies ((1), (1s), (2)) doubled a key in a speed scenario or lost, doubled or
# answered wrong in a fault run.
out=$(bash bench/peers.sh --smoke 2>&1) || { echo "$out"; exit 1; }
report=bench/out/peers-smoke/results.md
# The rows of STRATEGY in the report's sections whose title starts with TITLE (## or ###).
rows_of() { awk -v title="$1" -v row="| $2 | " '/^##/ { on = index($0, title) > 0 }
  on && index($0, row) == 1' "$report"; }
for strategy in "(1) middleware" "(1s) the middleware's statement form" "(2) runExternal" \
  "(3) fortress SQL" "(4) Redis SET NX + Lua" "(5) hybrid Redis + SQL" "(6) Powertools, Redis" \
  "(7) express-idempotency, Redis" "(1) middleware, Fastify" "(1s) the statement form, Fastify" \
  "(4) Redis SET NX + Lua, Fastify"; do
  # 5 speed rows ending in "doubled / keys", 1 round-trip row of 6 numbers
  [[ $(rows_of "## " "$strategy" | grep -cE '\| [0-9]+ / [0-9]+ \| [0-9]+ / [0-9]+ \|$') -eq 5 ]] ||
    { echo "$out"; echo "results.md: expected 5 speed rows of $strategy"; exit 1; }
  [[ $(rows_of "## Round trips" "$strategy" |
    grep -cE '^(\| [^|]+ )(\| [0-9.]+ ){6}\|$') -eq 1 ]] ||
    { echo "$out"; echo "results.md: expected 1 round-trip row of $strategy"; exit 1; }
done
# (1s): one round trip (PostgreSQL's, no Redis) for a new key and for a replay, on both
# frameworks
for strategy in "(1s) the middleware's statement form" "(1s) the statement form, Fastify"; do
  [[ $(rows_of "## Round trips" "$strategy") == "| $strategy | 1 | 0 | 1 | 1 | 0 | 1 |" ]] ||
    { echo "$out"; echo "results.md: $strategy is not one round trip a request"; exit 1; }
done
# (0), the insert alone, on both frameworks: new keys at 8 and 32 connections only, no replays
for strategy in "(0) the insert alone (no idempotency)" "(0) the insert alone, Fastify"; do
  [[ $(rows_of "## new keys" "$strategy" |
    grep -cE '\| [0-9]+ / [0-9]+ \| [0-9]+ / [0-9]+ \|$') -eq 2 ]] ||
    { echo "$out"; echo "results.md: expected 2 speed rows of $strategy, new keys at 8 and 32"; exit 1; }
  [[ -z $(rows_of "## replays" "$strategy") ]] ||
    { echo "$out"; echo "results.md: $strategy has no replays"; exit 1; }
done
# Fastify beside Express: (1s) / (4) on both frameworks for each scenario, and (1s), (4), (1)
# and (0) on both for new keys at 8 and 32 connections
[[ $(rows_of "## Fastify beside Express" "new keys, 8 conn." |
  grep -cE '^\| new keys, 8 conn\. \| [0-9.]+ \| [0-9.]+ \|$') -eq 1 ]] ||
  { echo "$out"; echo "results.md: no (1s) / (4) row of new keys at 8 conn. on both frameworks"; exit 1; }
for sc in "new keys, 8 conn." "new keys, 32 conn."; do
  [[ $(rows_of "## Fastify beside Express" "$sc" |
    grep -cE '^\| [^|]+ \| \([0-9s]+\) \| [0-9,]+ \| [0-9,]+ \| [0-9.]+ \|') -eq 4 ]] ||
    { echo "$out"; echo "results.md: expected 4 Fastify-beside-Express rows of $sc"; exit 1; }
done
# without HTTP: (1), (1s), (3) and (4) for new keys and replays, (0) for new keys
for strategy in "(1) middleware" "(1s) the middleware's statement form" "(3) fortress SQL" \
  "(4) Redis SET NX + Lua" "(0) the insert alone (no idempotency)"; do
  for table in "### new keys" "### replays"; do
    [[ $strategy == "(0)"* && $table == *replays ]] && continue
    [[ $(rows_of "$table" "$strategy" | grep -cE '^(\| [^|]+ )(\| [0-9.,]+ ){6}\|$') -eq 1 ]] ||
      { echo "$out"; echo "results.md: expected 1 row of $strategy in $table"; exit 1; }
  done
done
# faults: 4 PostgreSQL-only strategies x 2 faults, the two (1s) and 5 Redis ones x 3 faults
# (the smoke run takes Redis's defaults only)
[[ $(grep -cE '^\| default \| ' "$report") -eq 29 ]] ||
  { echo "$out"; echo "results.md: expected 29 fault rows"; exit 1; }
[[ -s bench/out/peers-smoke/results.png ]] || { echo "no chart"; exit 1; }
echo "bench smoke: ok"
