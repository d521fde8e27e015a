# shellcheck shell=bash
# The summary lines of scripts/test.sh, sourced by it (and by test/scripted/ci_record.sh).
# A suite that ran no test fails the run: record SUITE 0 0 counts one failure. A suite that
# belongs to another run (another PostgreSQL major's, or a tool this major cannot have) says so
# with record_elsewhere, which counts nothing and never fails.
PASSED=0
FAILED=0
RESULTS=()
SUITE_STARTED=$SECONDS
SUITES_SECONDS=0

# record SUITE PASSED FAILED [NOTE]: with the seconds since the suite (or its last record)
# began.
record() {
  local failed=$3 note=${4:-}
  if [[ $2 -eq 0 && $3 -eq 0 ]]; then
    failed=1
    note="ran no test${note:+; $note}"
  fi
  record_line "$1" "$2" "$failed" "$note"
}

# record_elsewhere SUITE WHY: the suite is not this run's (WHY names the run that has it).
record_elsewhere() {
  record_line "$1" 0 0 "$2"
}

record_line() {
  local secs=$((SECONDS - SUITE_STARTED))
  SUITE_STARTED=$SECONDS
  SUITES_SECONDS=$((SUITES_SECONDS + secs))
  PASSED=$((PASSED + $2))
  FAILED=$((FAILED + $3))
  RESULTS+=("$(printf '%-18s %4d passed, %d failed %6ds%s' "$1" "$2" "$3" "$secs" "${4:+  ($4)}")")
  printf -- '--- %s\n' "${RESULTS[-1]}"
}
