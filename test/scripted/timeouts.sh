#!/usr/bin/env bash
# Timeouts and disconnects around a waiting reserve (wait > 0). After each case: no stuck claim
# and no leaked advisory lock (pg_locks: locktype advisory, objsubid 478 = 0x1DE, the key
# lifecycle's lock class).
# Durations are measured around psql: the bounds say "long before the 10 s wait", loosely
# enough for a loaded machine.
#  1. statement_timeout fires while reserve waits for an uncommitted holder -> 57014.
#  2. statement_timeout fires while reserve waits for a committed claim -> 57014; the claim
#     is untouched and its holder completes it.
#  3. reserve(wait) behind an uncommitted holder answers in_progress after `wait`, or after
#     lock_timeout if that is shorter (not an error); complete / fail / forget -> 55P03.
#  4. lock_timeout and statement_timeout inside reserve while it holds the key's advisory lock
#     (the key table is locked by someone else) -> 55P03 / 57014, the advisory lock goes away.
#  5. the client disconnects (SIGKILL of psql) while reserve waits, with
#     client_connection_check_interval: the backend ends long before `wait`, no claim.
#  6. same without client_connection_check_interval: the orphan backend finishes its wait and
#     gets the key once the holder rolls back; reserve then finds its client gone and ends the
#     session (no claim). (Were a claim committed, it would lapse at lock_ttl and be taken
#     over with attempt 2: checked if it happens.)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
cluster_setup test-cluster/timeouts 54444
source "$(dirname "${BASH_SOURCE[0]}")/lib/prelude.sh" cluster
pass() { passed "$@"; }
expect() { [[ $2 == "$3" ]] || fail "$1: got '$2', want '$3'"; pass "$1 ($2)"; }
now_ms() { local t=${EPOCHREALTIME/./}; echo $((t / 1000)); }
# bg NAME SQL: a session running SQL in the background, application_name NAME.
# $! is psql itself (a simple command), so killing it is a client dying.
bg() {
  PGAPPNAME=$1 "$PGBIN/psql" -X -h "$CLUSTER_SOCK" -p "$CLUSTER_PORT" -U postgres -d postgres \
    -c "$2" >/dev/null 2>&1 &
  LAST_BG=$!
  BG+=("$LAST_BG")
}
backend_of() { q -c "SELECT pid FROM pg_stat_activity WHERE application_name = '$1'"; }
wait_sql() { poll --try "${2:-60}" sql_true "SELECT ($1)"; } # wait_sql SQL-condition [seconds, 60 unless given]
waiting_for_key() { # waiting_for_key NAME: NAME's session waits for a key lock held by another
  wait_sql "EXISTS (SELECT FROM pg_locks l JOIN pg_stat_activity a USING (pid)
            WHERE a.application_name = '$1' AND l.locktype = 'advisory' AND l.objsubid = 478
              AND NOT l.granted)"
}
end_session() { # terminate the backend of application NAME and wait until it is gone
  q -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '$1'" >/dev/null
  wait_sql "NOT EXISTS (SELECT FROM pg_stat_activity WHERE application_name = '$1')"
}
key_locks() { q -c "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 478 ${1:-}"; }
state_of() { q -c "SELECT coalesce((SELECT state || '/' || attempt FROM idempotency.lookup('to', '$1')), 'none')"; }
holding() { # holding NAME KEY: NAME's session claimed KEY and keeps its transaction open
  bg "$1" "BEGIN; SELECT idempotency.reserve('to', '$2'); SELECT pg_sleep(60); ROLLBACK;"
  wait_sql "EXISTS (SELECT FROM pg_locks l JOIN pg_stat_activity a USING (pid)
            WHERE a.application_name = '$1' AND l.locktype = 'advisory' AND l.objsubid = 478)" ||
    fail "$1 did not get the key lock"
}

cluster_init "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK"
cluster_start "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK"
q -c "CREATE EXTENSION idempotency"

echo "--- 1. statement_timeout while waiting for an uncommitted holder"
holding h1 k1
t0=$(now_ms)
out=$(q -c "SET statement_timeout = '300ms'" \
  -c "SELECT outcome FROM idempotency.reserve('to', 'k1', wait => '10 seconds')" 2>&1 || true)
t=$(($(now_ms) - t0))
[[ $out == *"canceling statement due to statement timeout"* ]] || fail "no statement timeout: $out"
((t >= 250 && t < 8000)) || fail "statement timeout after $t ms"
pass "reserve(wait 10 s) is cancelled by statement_timeout 300 ms after $t ms"
expect "the waiter left no lock; the holder keeps its one" "$(key_locks)" "1"
out=$(q -c "SET statement_timeout = '300ms'" -c "DO \$\$BEGIN
  BEGIN PERFORM idempotency.reserve('to', 'k1', wait => '10 seconds');
  EXCEPTION WHEN query_canceled THEN NULL; END; END\$\$" \
  -c "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 478 AND pid = pg_backend_pid()" \
  -c "SELECT outcome FROM idempotency.reserve('to', 'k1-other')" 2>&1)
expect "a timeout caught in a savepoint releases the key lock; the session goes on" \
  "$(echo "$out" | tr '\n' ' ')" "0 new "
end_session h1
expect "the holder's rollback leaves no claim" "$(state_of k1)" "none"
expect "no key lock left" "$(key_locks)" "0"

echo "--- 2. statement_timeout while waiting for a committed claim"
q -c "SELECT outcome FROM idempotency.reserve('to', 'k2', lock_ttl => '1 minute')" >/dev/null
out=$(q -c "SET statement_timeout = '300ms'" \
  -c "SELECT outcome FROM idempotency.reserve('to', 'k2', wait => '10 seconds')" 2>&1 || true)
[[ $out == *"statement timeout"* ]] || fail "no statement timeout: $out"
pass "reserve(wait 10 s) behind a committed claim is cancelled by statement_timeout"
expect "the committed claim is untouched" "$(state_of k2)" "processing/1"
q -c "SELECT idempotency.complete('to', 'k2', 200, '{}', 1)" >/dev/null
expect "its holder completes it" "$(state_of k2)" "completed/1"
expect "no key lock left" "$(key_locks)" "0"

echo "--- 3. lock_timeout: reserve answers in_progress, complete / fail / forget fail with 55P03"
holding h3 k3
t0=$(now_ms)
out=$(q -c "SELECT outcome FROM idempotency.reserve('to', 'k3', wait => '1 second')" 2>&1)
t=$(($(now_ms) - t0))
[[ $out == in_progress ]] || fail "reserve(wait 1 s): $out"
((t >= 900 && t < 8000)) || fail "reserve(wait 1 s) answered after $t ms"
pass "reserve(wait 1 s) behind an uncommitted holder answers in_progress after $t ms"
t0=$(now_ms)
out=$(q -c "SET lock_timeout = '200ms'" \
  -c "SELECT outcome FROM idempotency.reserve('to', 'k3', wait => '10 seconds')" 2>&1)
t=$(($(now_ms) - t0))
[[ $out == in_progress ]] || fail "reserve under lock_timeout: $out"
((t >= 150 && t < 8000)) || fail "reserve(wait 10 s) under lock_timeout 200 ms answered after $t ms"
pass "lock_timeout 200 ms shortens reserve(wait 10 s): in_progress (not an error) after $t ms"
for call in "complete('to', 'k3', 200, NULL)" "fail('to', 'k3')" "forget('to', 'k3')"; do
  out=$(q -c "SET lock_timeout = '200ms'" -c "SELECT idempotency.$call" 2>&1 || true)
  [[ $out == *"canceling statement due to lock timeout"* ]] || fail "$call under lock_timeout: $out"
  pass "$call on a key held by another transaction ends with lock_timeout"
done
expect "no lock left but the holder's" "$(key_locks)" "1"
end_session h3
expect "no claim left" "$(state_of k3)" "none"

echo "--- 4. timeouts inside reserve while it holds the key lock"
bg h4 "BEGIN; LOCK TABLE idempotency.keys IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(60); ROLLBACK;"
wait_sql "EXISTS (SELECT FROM pg_locks WHERE relation = 'idempotency.keys'::regclass AND mode = 'AccessExclusiveLock' AND granted)" ||
  fail "h4 did not lock the table"
bg w4 "SELECT idempotency.reserve('to', 'k4', wait => '10 seconds')"
wait_sql "EXISTS (SELECT FROM pg_locks l JOIN pg_stat_activity a USING (pid)
          WHERE a.application_name = 'w4' AND l.locktype = 'advisory' AND l.objsubid = 478 AND l.granted)
          AND EXISTS (SELECT FROM pg_stat_activity WHERE application_name = 'w4' AND wait_event_type = 'Lock')" ||
  fail "the waiter does not hold the key lock while it waits for the table"
pass "reserve holds the key lock while it waits for the key table"
end_session w4
expect "a terminated waiter leaves no key lock" "$(key_locks)" "0"
for setting in "lock_timeout = '200ms'" "statement_timeout = '200ms'"; do
  out=$(q -c "SET $setting" -c "SELECT outcome FROM idempotency.reserve('to', 'k4', wait => '10 seconds')" 2>&1 || true)
  [[ $out == *"canceling statement due to"* ]] || fail "reserve under $setting: $out"
  pass "reserve blocked on the key table ends with ${setting%% =*}"
  expect "and releases its key lock" "$(key_locks)" "0"
done
end_session h4
expect "no claim left" "$(state_of k4)" "none"

echo "--- 5. the client disconnects while waiting (client_connection_check_interval = 100ms)"
holding h5 k5
PGOPTIONS="-c client_connection_check_interval=100ms" bg w5 \
  "SELECT idempotency.reserve('to', 'k5', wait => '20 seconds')"
client=$LAST_BG
waiting_for_key w5 || fail "w5 is not waiting"
kill -9 "$client"
wait "$client" 2>/dev/null || true
t0=$(now_ms)
wait_sql "NOT EXISTS (SELECT FROM pg_stat_activity WHERE application_name = 'w5')" 15 ||
  fail "the waiting backend outlived its client by 15 s"
pass "the waiting backend ended $(($(now_ms) - t0)) ms after its client died (wait was 20 s)"
expect "only the holder's key lock is left" "$(key_locks)" "1"
end_session h5
expect "no claim left" "$(state_of k5)" "none"
expect "no key lock left" "$(key_locks)" "0"
expect "the key is free" "$(q -c "SELECT outcome FROM idempotency.reserve('to', 'k5')")" "new"

echo "--- 6. the client disconnects while waiting (no connection check)"
bg h6 "BEGIN; SELECT idempotency.reserve('to', 'k6'); SELECT pg_sleep(60); ROLLBACK;"
wait_sql "EXISTS (SELECT FROM pg_locks l JOIN pg_stat_activity a USING (pid)
          WHERE a.application_name = 'h6' AND l.locktype = 'advisory' AND l.objsubid = 478)" ||
  fail "h6 did not get the key lock"
bg w6 "SELECT idempotency.reserve('to', 'k6', lock_ttl => '2 seconds', wait => '3 seconds')"
client=$LAST_BG
waiting_for_key w6 || fail "w6 is not waiting"
kill -9 "$client"
wait "$client" 2>/dev/null || true
end_session h6 # the holder rolls back while the orphan still waits (3 s)
wait_sql "NOT EXISTS (SELECT FROM pg_stat_activity WHERE application_name IN ('w6', 'h6'))" ||
  fail "the orphan backend outlived its wait"
pass "the orphan backend ended by the end of its wait"
expect "no key lock left" "$(key_locks)" "0"
st=$(state_of k6)
if [[ $st == processing/1 ]]; then
  pass "the orphan's autocommitted claim is an ordinary committed claim ($st)"
  wait_sql "(SELECT locked_until < clock_timestamp() FROM idempotency.lookup('to', 'k6'))" ||
    fail "the orphan's claim does not lapse"
  expect "it lapses at lock_ttl and is taken over" \
    "$(q -c "SELECT outcome || '/' || attempt FROM idempotency.reserve('to', 'k6')")" "new/2"
else
  expect "the orphan left no claim" "$st" "none"
fi
echo "timeouts: 6 cases, $CHECKS checks passed"
