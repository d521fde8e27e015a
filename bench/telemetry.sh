#!/usr/bin/env bash
# The Node client's telemetry cost on the statement form (clients/node/bench/telemetry.mjs):
# ROUNDS rounds (default 5) of the four modes (absent: no @opentelemetry/api; api: the API, no
# SDK; sdk-off: an SDK registered, the helpers not observed; sdk: an SDK registered, the
# helpers observed; sdk-entered: sdk-off with one context entered before the calls, as a
# traced HTTP server enters one per request), the order rotated each round, SECONDS_EACH seconds each
# (default 3), against the database of the PG* environment (it needs the extension). Prints
# each run with the 1-minute load average when it ended, then per mode the median throughput
# and client CPU per call, the ratio of those medians to `absent`'s, and the median of the
# per-round ratios (each mode against `absent` of the same round, run minutes apart at most:
# the figure least moved by a machine whose load changes during the run); last, sdk against
# sdk-off, the instrumentation's own cost with an SDK, and sdk against sdk-entered, its cost
# once the context manager's promise hooks are on anyway.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../clients/node"
rounds=${ROUNDS:-5}
secs=${SECONDS_EACH:-3}
modes=(absent api sdk-off sdk-entered sdk)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 0; r < rounds; r++)); do
  for ((i = 0; i < ${#modes[@]}; i++)); do
    m=${modes[$(((i + r) % ${#modes[@]}))]}
    if [[ $m == absent ]]; then
      line=$(node --import ./bench/hide-otel.mjs bench/telemetry.mjs "$m" "$secs")
    else
      line=$(node bench/telemetry.mjs "$m" "$secs")
    fi
    echo "$r $line $(cut -d' ' -f1 /proc/loadavg)"
  done
done | tee "$out"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out" <<'PY'
import statistics, sys
runs, cpu, rounds = {}, {}, {}
for line in open(sys.argv[1]):
    r, mode, rate, us, _load = line.split()
    runs.setdefault(mode, []).append(float(rate))
    cpu.setdefault(mode, []).append(float(us))
    rounds.setdefault(r, {})[mode] = (float(rate), float(us))
base = statistics.median(runs["absent"])
base_cpu = statistics.median(cpu["absent"])
def per_round(mode, against, i):
    return statistics.median(x[mode][i] / x[against][i] for x in rounds.values())
for mode in ("absent", "api", "sdk-off", "sdk-entered", "sdk"):
    m, c = statistics.median(runs[mode]), statistics.median(cpu[mode])
    print(f"{mode:11} median {m:8.0f} calls/s ({m / base:5.3f} of absent; per round "
          f"{per_round(mode, 'absent', 0):5.3f}), client CPU {c:6.1f} us/call "
          f"({c / base_cpu:5.3f}; per round {per_round(mode, 'absent', 1):5.3f})")
print(f"sdk against sdk-off: calls/s per round {per_round('sdk', 'sdk-off', 0):5.3f}, "
      f"client CPU per round {per_round('sdk', 'sdk-off', 1):5.3f}, CPU per call "
      f"{statistics.median(cpu['sdk']) - statistics.median(cpu['sdk-off']):+.1f} us (medians)")
print(f"sdk against sdk-entered: calls/s per round {per_round('sdk', 'sdk-entered', 0):5.3f}, "
      f"client CPU per round {per_round('sdk', 'sdk-entered', 1):5.3f}, CPU per call "
      f"{statistics.median(cpu['sdk']) - statistics.median(cpu['sdk-entered']):+.1f} us (medians)")
print(f"sdk-entered against sdk-off: calls/s per round "
      f"{per_round('sdk-entered', 'sdk-off', 0):5.3f}, client CPU per round "
      f"{per_round('sdk-entered', 'sdk-off', 1):5.3f}")
PY
