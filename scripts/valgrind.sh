#!/usr/bin/env bash
# Runs the pg_regress suite (sql/*.sql) once against a throwaway cluster whose postmaster, and
# so every backend and background worker it forks, runs under valgrind memcheck; then reports
# the errors whose stack goes through the idempotency library. Not part of scripts/test.sh
# (it takes minutes); run it after changing the glue:
#   bash scripts/valgrind.sh                     # whole regress suite
#   REGRESS="lifecycle bad_input" bash scripts/valgrind.sh
#   VALGRIND_BUILD=0 ...   (test what is installed, without make && make install)
# Exit status 0 when the suite ran and no valgrind report is ours (see below); failed tests
# are listed (at valgrind's speed, tests that depend on timing may differ).
# Logs: build/valgrind/ (one valgrind.<pid>.log per process, regression.diffs if any).
# Debian's postgres is not built with USE_VALGRIND: palloc chunks are not tracked one by one
# (an overrun inside a memory context block goes unseen), but malloc/new (all C++ objects),
# uninitialised values and invalid reads/writes outside blocks are. PostgreSQL itself reports
# a few "uninitialised bytes" in writes of padded structs (WAL, relcache init file); those are
# counted but not failed: only reports with a frame of ours (in the error's stack or in the
# origin of the uninitialised value) fail the run.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$IDEM_ROOT"
command -v valgrind >/dev/null || die "valgrind is not installed (apt-get install valgrind)"
cluster_setup test-cluster/valgrind "${VALGRIND_PORT:-54445}"
OUT=$IDEM_ROOT/build/valgrind
POSTMASTER=

stop() {
  if [[ -n $POSTMASTER ]]; then
    as_pg "$PGBIN/pg_ctl" -D "$CLUSTER_DATA" -m fast -w -t 300 stop >/dev/null 2>&1 ||
      as_pg "$PGBIN/pg_ctl" -D "$CLUSTER_DATA" -m immediate -w stop >/dev/null 2>&1 || true
    wait "$POSTMASTER" 2>/dev/null || true
  fi
}
trap stop EXIT

rm -rf "$OUT"
mkdir -p "$OUT"
chmod 777 "$OUT"
[[ ${VALGRIND_BUILD:-1} == 1 ]] && build_and_install
cluster_init "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" "max_connections = 20"
# The library as loaded, to resolve addresses even if it is reinstalled meanwhile:
#   addr2line -f -C -i -e build/valgrind/idempotency.so <address - load base>
cp "$("$PG_CONFIG" --pkglibdir)/idempotency.so" "$OUT/"
log "starting postgres under valgrind (slow)"
as_pg valgrind --quiet --trace-children=yes --track-origins=yes --read-var-info=no \
  --num-callers=30 --error-limit=no --leak-check=no \
  --log-file="$OUT/valgrind.%p.log" \
  "$PGBIN/postgres" -D "$CLUSTER_DATA" >"$OUT/server.log" 2>&1 &
POSTMASTER=$!
for _ in $(seq 240); do
  "$PGBIN/pg_isready" -q -h "$CLUSTER_SOCK" -p "$CLUSTER_PORT" && break
  sleep 0.5
done
"$PGBIN/pg_isready" -q -h "$CLUSTER_SOCK" -p "$CLUSTER_PORT" || die "postgres did not start under valgrind"

log "running the regress suite"
rc=0
make installcheck PG_CONFIG="$PG_CONFIG" PGHOST="$CLUSTER_SOCK" PGPORT="$CLUSTER_PORT" \
  PGUSER=postgres ISOLATION= ${REGRESS:+REGRESS="$REGRESS"} 2>&1 | tee "$OUT/installcheck.log" || rc=$?
[[ -f regression.diffs ]] && cp regression.diffs "$OUT/"
stop
POSTMASTER=

# A valgrind error block starts with "==pid== <message>" and ends at an empty "==pid== " line.
# It is ours when one of the first three frames of the error, or any frame of the origin of an
# uninitialised value, is our code: with -g our frames show "(file.cpp:line)" (PostgreSQL's are
# stripped, libc's are .c). PostgreSQL's own padding reports (WAL written at our XLogFlush, the
# padding of LogLogicalMessage's record, seen through its PLT stub) are therefore not ours.
errors=$(cat "$OUT"/valgrind.*.log 2>/dev/null | grep -cE '^==[0-9]+== [A-Z][a-z]+ ' || true)
ours=$(awk '
  function flush() { if (mine) { n++; printf "%s\n", block > "/dev/stderr" } block = ""; frames = 0; origin = 0; mine = 0 }
  /^==[0-9]+== $/ { flush(); next }
  {
    block = block $0 "\n"
    if ($0 ~ /created by|Address 0x/) origin = 1
    if ($0 ~ /^==[0-9]+== +(at|by) 0x/) {
      frames++
      if ((origin || frames <= 3) && $0 ~ /\.(cpp|hpp):[0-9]+\)/) mine = 1
    }
  }
  END { flush(); print n + 0 }
' "$OUT"/valgrind.*.log 2>"$OUT/ours.txt")
passed=$(grep -cE '^(test +| +)[^ ]+ +\.\.\. +ok' "$OUT/installcheck.log" || true)
failed=$(grep -E '^(test +| +)[^ ]+ +\.\.\. +FAILED' "$OUT/installcheck.log" | awk '{print $2}' | xargs || true)
echo "valgrind: $(ls "$OUT"/valgrind.*.log | wc -l) processes, $errors error reports, $ours of them ours (see $OUT/ours.txt)"
note=
[[ -n $failed ]] && note=", failed: $failed (diffs in $OUT/regression.diffs; tests that depend on timing, such as lapsing leases, can differ under valgrind)"
echo "regress under valgrind: $passed passed$note"
# Fails on a report of ours, or if the suite did not run at all.
[[ $ours -eq 0 && $((passed)) -gt 0 ]]
