#!/usr/bin/env bash
# The Node client's telemetry cost on the statement form (clients/node/bench/telemetry.mjs):
# ROUNDS rounds (default 5) of the three modes, the order rotated each round, SECONDS each
# (default 3), against the database of the PG* environment (it needs the extension); prints
# each run, then the median of each mode's throughput and of the client's CPU per call, and
# their ratios to `absent`, with the load average.
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
runs, cpu = {}, {}
for line in open(sys.argv[1]):
    mode, rate, us = line.split()
    runs.setdefault(mode, []).append(float(rate))
    cpu.setdefault(mode, []).append(float(us))
base = statistics.median(runs["absent"])
base_cpu = statistics.median(cpu["absent"])
for mode in ("absent", "api", "sdk"):
    m, c = statistics.median(runs[mode]), statistics.median(cpu[mode])
    print(f"{mode:7} median {m:8.0f} calls/s ({m / base:5.3f} of absent), "
          f"client CPU {c:6.1f} us/call ({c / base_cpu:5.3f}); runs {runs[mode]}, {cpu[mode]}")
PY
