#!/usr/bin/env bash
# Crash in flight: a holder reserves a key, commits its claim (lock_ttl 30 s, longer than
# recovery takes on a loaded machine), records a recovery point, and while it is busy its
# backend is SIGKILLed, so the postmaster kills every backend
# and recovers. A second session is killed in the middle of an uncommitted reserve + business
# insert. After recovery:
#   - the committed claim survived: reserve answers in_progress (attempt 1) until the lease
#     lapses, then new with attempt 2 and the recovery point; the stale holder's complete
#     (attempt 1) is refused with IK001;
#   - the uncommitted claim and its business row left no trace.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
cluster_setup test-cluster/crash-in-flight 54441
source "$(dirname "${BASH_SOURCE[0]}")/lib/prelude.sh" cluster

cluster_init "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" "restart_after_crash = on"
cluster_start "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK"
q -q -c "CREATE EXTENSION idempotency" -c "CREATE TABLE payments (key text PRIMARY KEY, amount int)"

# Holder 1: claim committed, then a recovery point, then "the external call" (a long sleep).
q -q >/dev/null 2>&1 <<'SQL' &
SELECT outcome FROM idempotency.reserve('flight', 'order-1', '\x01', lock_ttl => '30 seconds');
SELECT idempotency.checkpoint('flight', 'order-1', 'charged-card', 1);
SELECT pg_sleep(60) /* holder-1 */;
SQL
BG+=($!)
# Holder 2: reserve and business write in one transaction, not committed.
q -q >/dev/null 2>&1 <<'SQL' &
BEGIN;
SELECT outcome FROM idempotency.reserve('flight', 'order-2', '\x02');
INSERT INTO payments VALUES ('order-2', 100);
SELECT pg_sleep(60) /* holder-2 */;
COMMIT;
SQL
BG+=($!)

in_flight() {
  [[ $(q -c "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid()
             AND (query LIKE '%holder-1 */%' OR query LIKE '%holder-2 */%')") == 2 ]]
}
poll 60 "both holders are in flight" in_flight
pid=$(q -c "SELECT pid FROM pg_stat_activity WHERE query LIKE '%holder-1 */%' AND pid <> pg_backend_pid()")
expect "before the crash: the claim is committed" \
  "$(q -c "SELECT state || '/' || attempt || '/' || recovery_point FROM idempotency.lookup('flight', 'order-1')")" \
  "processing/1/charged-card"

echo "killing backend $pid with SIGKILL"
kill -9 "$pid"
recovered() {
  grep "all server processes terminated; reinitializing" "$CLUSTER_LOG" >/dev/null &&
    q -c "SELECT 1" >/dev/null 2>&1
}
poll --try 120 recovered || true
grep -q "was terminated by signal 9" "$CLUSTER_LOG" || fail "the backend was not killed"
grep -q "all server processes terminated; reinitializing" "$CLUSTER_LOG" ||
  fail "the postmaster did not restart the backends"
q -c "SELECT 1" >/dev/null || fail "the server did not come back"
passed "postmaster killed all backends and recovered"

expect "after recovery: the claim is still there" \
  "$(q -c "SELECT state || '/' || attempt || '/' || recovery_point FROM idempotency.lookup('flight', 'order-1')")" \
  "processing/1/charged-card"
expect "after recovery: a retry within the lease is in_progress" \
  "$(q -c "SELECT outcome || '/' || attempt FROM idempotency.reserve('flight', 'order-1', '\x01')")" \
  "in_progress/1"
expect "after recovery: the uncommitted claim left no record" \
  "$(q -c "SELECT count(*) FROM idempotency.lookup('flight', 'order-2')")" "0"
expect "after recovery: the uncommitted business row is gone" \
  "$(q -c "SELECT count(*) FROM payments")" "0"
out=$(q -q -c "BEGIN" -c "SELECT outcome || '/' || attempt FROM idempotency.reserve('flight', 'order-2', '\x02')" \
  -c "INSERT INTO payments VALUES ('order-2', 100)" \
  -c "SELECT idempotency.complete('flight', 'order-2', 201, '{\"paid\": 100}')" -c "COMMIT")
expect "after recovery: the uncommitted key is new again" "${out%%$'\n'*}" "new/1"

# Wait for the lease to lapse (the server's clock decides), then take over.
lapsed() {
  [[ $(q -c "SELECT locked_until < clock_timestamp() FROM idempotency.lookup('flight', 'order-1')") == t ]]
}
poll 120 "the lease lapsed" lapsed
expect "after the lease: takeover with attempt 2 and the recovery point" \
  "$(q -c "SELECT outcome || '/' || attempt || '/' || recovery_point FROM idempotency.reserve('flight', 'order-1', '\x01')")" \
  "new/2/charged-card"
stale=$(q -c "SELECT idempotency.complete('flight', 'order-1', 200, '{}', 1)" 2>&1 || true)
[[ $stale == *"attempt is stale"* ]] || fail "the stale holder's complete was not refused: $stale"
passed "the stale holder (attempt 1) is refused"
q -q -c "BEGIN" -c "INSERT INTO payments VALUES ('order-1', 50)" \
  -c "SELECT idempotency.complete('flight', 'order-1', 201, '{\"paid\": 50}', 2)" -c "COMMIT" >/dev/null
expect "the new holder completes; retries replay" \
  "$(q -c "SELECT outcome || '/' || status_code || '/' || response FROM idempotency.reserve('flight', 'order-1', '\x01')")" \
  'replay/201/{"paid": 50}'
expect "one business row per completed key" \
  "$(q -c "SELECT string_agg(p.key || '=' || k.state, ',' ORDER BY p.key) FROM payments p
           CROSS JOIN LATERAL idempotency.lookup('flight', p.key) k")" \
  "order-1=completed,order-2=completed"
echo "crash_in_flight: 1 backend SIGKILLed (2 sessions in flight), $CHECKS checks passed"
