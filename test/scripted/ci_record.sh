#!/usr/bin/env bash
# idem: same on every major (scripts/test.sh's summary lines; the IDEM_PG=15 run runs it, see .ci/run)
# The rule of scripts/record.sh: a suite that ran no test fails the run, a suite left to another
# run does not, and the counts add up.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/record.sh"

fail() { echo "FAIL: $*" >&2; exit 1; }

record ran 3 0 >/dev/null
[[ $PASSED -eq 3 && $FAILED -eq 0 ]] || fail "3 passed: PASSED=$PASSED FAILED=$FAILED"

record empty 0 0 "managed said nothing" >/dev/null
[[ $PASSED -eq 3 && $FAILED -eq 1 ]] || fail "a suite with no test did not fail: FAILED=$FAILED"
[[ ${RESULTS[-1]} == "empty "*" 0 passed, 1 failed "*"(ran no test; managed said nothing)" ]] ||
  fail "the line does not say why: ${RESULTS[-1]}"

record_elsewhere citus "left to the runs of PostgreSQL 14 to 16" >/dev/null
[[ $PASSED -eq 3 && $FAILED -eq 1 ]] || fail "a suite left to another run counted: FAILED=$FAILED"
[[ ${RESULTS[-1]} == "citus "*" 0 passed, 0 failed "*"(left to the runs of PostgreSQL 14 to 16)" ]] ||
  fail "the line does not name the other run: ${RESULTS[-1]}"

record broken 2 1 >/dev/null
[[ $PASSED -eq 5 && $FAILED -eq 2 && ${#RESULTS[@]} -eq 4 ]] ||
  fail "the counts do not add up: PASSED=$PASSED FAILED=$FAILED lines=${#RESULTS[@]}"
echo "ok: the summary's rule holds"
