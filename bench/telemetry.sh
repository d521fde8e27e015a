#!/usr/bin/env bash
# The Node client's telemetry cost on the statement form (clients/node/bench/telemetry.mjs):
# ROUNDS rounds (default 5) of the modes (absent: no @opentelemetry/api; api: the API, no SDK;
# sdk-off: an SDK registered, the helpers not observed; sdk: an SDK registered, the helpers
# observed; sdk-entered: sdk-off with one context entered before the calls, as a traced HTTP
# server enters one per request; sdk-app-span: sdk-off, the application making one active span
# of its own per call), the order rotated each round, SECONDS_EACH seconds each (default 3)
# after WARMUP seconds (default 2) of warm-up in the same process, against the database of the
# PG* environment (it needs the extension). Prints each run (calls/s, the process's CPU and the
# main thread's per call) with the 1-minute load average when it ended, then per mode the
# median throughput and client CPU per call, the ratio of those medians to `absent`'s, and the
# median of the per-round ratios (each mode against `absent` of the same round, run minutes
# apart at most: the figure least moved by a machine whose load changes during the run); last,
# sdk against sdk-off (the instrumentation's cost with an SDK), against sdk-entered (once the
# context manager's promise hooks are on anyway) and against sdk-app-span (beyond the SDK's
# own cost of one active span per call, which any instrumented library pays).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../clients/node"
rounds=${ROUNDS:-5}
secs=${SECONDS_EACH:-3}
modes=(absent api sdk-off sdk-entered sdk-app-span sdk)
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
runs, cpu, main, rounds = {}, {}, {}, {}
for line in open(sys.argv[1]):
    r, mode, rate, us, main_us, _load = line.split()
    runs.setdefault(mode, []).append(float(rate))
    cpu.setdefault(mode, []).append(float(us))
    main.setdefault(mode, []).append(float(main_us))
    rounds.setdefault(r, {})[mode] = (float(rate), float(us), float(main_us))
base = statistics.median(runs["absent"])
base_cpu = statistics.median(cpu["absent"])
def per_round(mode, against, i):
    return statistics.median(x[mode][i] / x[against][i] for x in rounds.values())
for mode in ("absent", "api", "sdk-off", "sdk-entered", "sdk-app-span", "sdk"):
    m, c = statistics.median(runs[mode]), statistics.median(cpu[mode])
    print(f"{mode:12} median {m:8.0f} calls/s ({m / base:5.3f} of absent; per round "
          f"{per_round(mode, 'absent', 0):5.3f}), client CPU {c:6.1f} us/call "
          f"({c / base_cpu:5.3f}; per round {per_round(mode, 'absent', 1):5.3f}), main thread "
          f"{statistics.median(main[mode]):6.1f} us/call")
def against(mode, other):
    diff = statistics.median(x[mode][1] - x[other][1] for x in rounds.values())
    diff_main = statistics.median(x[mode][2] - x[other][2] for x in rounds.values())
    print(f"{mode} against {other}: calls/s per round {per_round(mode, other, 0):5.3f}, "
          f"client CPU per round {per_round(mode, other, 1):5.3f}, CPU per call {diff:+.1f} us, "
          f"main thread {diff_main:+.1f} us (medians of the per-round differences)")
against("sdk", "sdk-off")
against("sdk", "sdk-entered")
against("sdk", "sdk-app-span")
against("sdk-app-span", "sdk-off")
against("sdk-entered", "sdk-off")
PY
