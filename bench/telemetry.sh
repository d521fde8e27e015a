#!/usr/bin/env bash
# The Node client's telemetry cost on the statement form (clients/node/bench/telemetry.mjs):
# ROUNDS rounds (default 5) of the three modes, the order rotated each round, SECONDS each
# (default 3), against the database of the PG* environment (it needs the extension); prints
# each run, then the median of each mode and its ratio to `absent`, with the load average.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../clients/node"
rounds=${ROUNDS:-5}
secs=${SECONDS_EACH:-3}
modes=(absent api sdk)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 0; r < rounds; r++)); do
  for ((i = 0; i < 3; i++)); do
    m=${modes[$(((i + r) % 3))]}
    if [[ $m == absent ]]; then
      node --import ./bench/hide-otel.mjs bench/telemetry.mjs "$m" "$secs"
    else
      node bench/telemetry.mjs "$m" "$secs"
    fi
  done
done | tee "$out"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    mode, rate = line.split()
    runs.setdefault(mode, []).append(float(rate))
base = statistics.median(runs["absent"])
for mode in ("absent", "api", "sdk"):
    m = statistics.median(runs[mode])
    print(f"{mode:7} median {m:8.0f} calls/s  {m / base:6.3f} of absent  runs {runs[mode]}")
PY
