#!/usr/bin/env bash
# Between a claim's write and its commit: a key reserved in a transaction that commits without
# completing it is written as 'processing' by the pre-commit callback. An error there turns
# the commit into a clean ERROR (rolled back: no claim, no lock left); a crash there (the
# backend killed while it waits at the point) loses nothing acknowledged either: after crash
# recovery the unacknowledged claim is gone and the key can be reserved anew.
set -euo pipefail
# shellcheck source=test/faults/lib.sh
source "$(dirname "$0")/lib.sh"
faults_cluster faults/claims 54392

q -c "SELECT idempotency.reserve('ack', 'k' || i), idempotency.complete('ack', 'k' || i, 200, '{}')
      FROM generate_series(1, 20) i" >/dev/null
q -c "SELECT idempotency.reserve('ack', 'held')" >/dev/null # a committed claim, acknowledged
acknowledged="SELECT count(*) FILTER (WHERE state = 'completed') || ' completed, '
  || count(*) FILTER (WHERE state = 'processing') || ' processing' FROM idempotency.keys"
expect "acknowledged keys" "$(q -c "$acknowledged")" "20 completed, 1 processing"

# An error in the pre-commit callback.
attach claim-pre-commit error
out=$(run_error "SELECT outcome FROM idempotency.reserve('new', 'e1')")
detach claim-pre-commit
[[ $out == *"XX000: error triggered for injection point idempotency-claim-pre-commit"* ]] ||
  fail "error at pre-commit: $out"
passed "an error at pre-commit is a clean ERROR of the commit"
expect "nothing of the failed commit is stored" "$(q -c "SELECT count(*) FROM idempotency.keys WHERE scope = 'new'")" 0
expect "the key is new again" "$(q -c "SELECT outcome FROM idempotency.reserve('new', 'e1')")" new
expect "acknowledged keys after the error" "$(q -c "$acknowledged")" "20 completed, 2 processing"
no_leftovers
no_restart

# A crash there: the backend waits at the point with the claim written, and is killed.
attach claim-pre-commit wait
q -c "SET application_name = 'doomed'" -c "SELECT idempotency.reserve('new', 'c1')" >/dev/null 2>&1 &
doomed=$!
poll 60 "the commit waits at the point" sql_true \
  "SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'doomed' AND $(waiting_at claim-pre-commit)"
pid=$(q -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'doomed'")
kill -KILL "$pid"
wait "$doomed" || true
# The postmaster restarts every backend after a crash: wait until it accepts connections again.
restarted() {
  [[ $(test_log | grep -c 'database system is ready to accept connections') -ge 2 ]] &&
    q -c "SELECT 1" >/dev/null 2>&1
}
poll --try 60 restarted || fail "the server does not accept connections after the crash"
test_log | grep 'terminated by signal 9: Killed' >/dev/null || fail "the backend was not killed"
passed "the backend was killed at the point (crash recovery ran)"
# Injection points live in shared memory, gone with the crash; the faults build's setting stays.
[[ $FAULT_MODE == injection_points ]] || detach claim-pre-commit
expect "the unacknowledged claim is gone" "$(q -c "SELECT count(*) FROM idempotency.keys WHERE key = 'c1'")" 0
expect "acknowledged keys after the crash" "$(q -c "$acknowledged")" "20 completed, 2 processing"
expect "the killed key is new again" "$(q -c "SELECT outcome FROM idempotency.reserve('new', 'c1')")" new
expect "an acknowledged key replays" "$(q -c "SELECT outcome FROM idempotency.reserve('ack', 'k7')")" replay
no_leftovers
echo "$CHECKS checks passed"
