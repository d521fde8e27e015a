#!/usr/bin/env bash
# idem: same on every major (the IDEM_PG=15 run runs it; see scripts/test.sh)
# libFuzzer targets of the core parsers (fuzz/*.cpp): build them with clang
# (-fsanitize=fuzzer,address,undefined), replay every kept regression input
# (fuzz/regressions/<target>/), then fuzz each target for FUZZ_SECONDS (default 10) from its
# seeds (fuzz/corpus/<target>/). Fails on a build error, a regression input that crashes, or a
# new crash (its input is left in build/fuzz/artifacts/; copy it to fuzz/regressions/<target>/
# once fixed).
#   bash test/scripted/fuzz.sh                   # the bounded run of the test command
#   FUZZ_SECONDS=600 bash test/scripted/fuzz.sh  # longer, on demand
#   FUZZ_TARGETS=fuzz_lsn_key bash test/scripted/fuzz.sh
set -euo pipefail
ROOT=${IDEM_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
SECONDS_PER_TARGET=${FUZZ_SECONDS:-10}
OUT=$ROOT/build/fuzz
CXX=${FUZZ_CXX:-$(command -v clang++-14 || command -v clang++ || true)}
[[ -n $CXX ]] || { echo "FAIL: clang++ not found (apt-get install clang libclang-rt-14-dev)"; exit 1; }
FLAGS=(-std=c++17 -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined
  -fno-sanitize-recover=undefined -I"$ROOT/src")

cd "$ROOT"
mkdir -p "$OUT/obj" "$OUT/artifacts" "$OUT/work"
targets=(${FUZZ_TARGETS:-$(for f in fuzz/fuzz_*.cpp; do basename "$f" .cpp; done)})

# The core, instrumented for coverage (fuzzer-no-link) and the sanitizers.
objs=()
for src in src/core/*.cpp; do
  obj=$OUT/obj/$(basename "$src" .cpp).o
  if [[ ! -f $obj || $src -nt $obj || -n $(find src/core -name '*.hpp' -newer "$obj") ]]; then
    "$CXX" "${FLAGS[@]}" -fsanitize=fuzzer-no-link -c "$src" -o "$obj"
  fi
  objs+=("$obj")
done

total_execs=0
summary=()
for t in "${targets[@]}"; do
  "$CXX" "${FLAGS[@]}" -fsanitize=fuzzer "fuzz/$t.cpp" "${objs[@]}" -lcrypto -o "$OUT/$t"

  # Kept crash inputs must stay fixed: running the binary on files replays each once.
  regressions=(fuzz/regressions/"$t"/*)
  replayed=0
  if [[ -e ${regressions[0]} ]]; then
    "$OUT/$t" "${regressions[@]}" >"$OUT/$t.replay.log" 2>&1 || {
      cat "$OUT/$t.replay.log"
      echo "FAIL: $t crashes on a kept regression input"
      exit 1
    }
    replayed=${#regressions[@]}
  fi

  # The repository's seeds are read-only input; new corpus entries go to a scratch dir.
  rm -rf "$OUT/work/$t"
  mkdir -p "$OUT/work/$t"
  log=$OUT/$t.log
  if ! "$OUT/$t" -max_total_time="$SECONDS_PER_TARGET" -max_len=8192 -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$OUT/artifacts/$t-" \
    "$OUT/work/$t" "fuzz/corpus/$t" >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "FAIL: $t found a crash; input saved under $OUT/artifacts/"
    exit 1
  fi
  execs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+).*/\1/p' "$log" | tail -n1)
  execs=${execs:-0}
  [[ $execs -gt 0 ]] || { tail -n 20 "$log"; echo "FAIL: $t executed nothing"; exit 1; }
  corpus=$(find "$OUT/work/$t" -type f | wc -l)
  total_execs=$((total_execs + execs))
  summary+=("$(printf '%-22s %10d executions in %ss, %d new corpus entries, %d regression inputs replayed' \
    "$t" "$execs" "$SECONDS_PER_TARGET" "$corpus" "$replayed")")
done

printf '%s\n' "${summary[@]}"
echo "fuzz: ${#targets[@]} targets, $total_execs executions, no crash"
