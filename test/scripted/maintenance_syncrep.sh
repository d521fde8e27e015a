#!/usr/bin/env bash
# Maintenance and a lost synchronous standby: a primary with synchronous_standby_names set
# and its standby stopped, the maintenance worker running every second with work in every
# pass (1-second partitions to create, rows to move out of the default partition). Writes
# wait for the standby, as PostgreSQL's own do; but replays, lookups and reserve of completed
# keys (no write) must still be answered: maintenance commits with synchronous_commit = local,
# so it never holds its ACCESS EXCLUSIVE lock on idempotency.keys through a sync-rep wait.
# The same for a direct maintain() call. Without that, the first pass with work waits in
# IPC:SyncRep holding the lock, and every read of idempotency.keys queues behind it.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
cluster_setup test-cluster/maintenance-syncrep 54471
# (At exit the primary stops -m immediate: a stuck maintenance pass would hold a fast stop.)
source "$(dirname "${BASH_SOURCE[0]}")/lib/primary_standby.sh"
BOUND=${IDEM_SYNCREP_READ_BOUND:-15} # seconds a read may take on a loaded machine
show_sessions() {
  echo "--- sessions"
  timeout 10 "$PGBIN/psql" -X -h "$PRIMARY_SOCK" -p "$PRIMARY_PORT" -U postgres -d postgres -c \
    "SELECT pid, backend_type, wait_event_type, wait_event, left(query, 60) AS query
       FROM pg_stat_activity WHERE wait_event IS NOT NULL AND backend_type <> 'walwriter'"
}
on_fail show_sessions
bounded() { primary_within "$@"; } # bounded SECONDS SQL...: a failure (124) after SECONDS

cluster_init "$PRIMARY_DATA" "$PRIMARY_PORT" "$PRIMARY_SOCK" \
  "idempotency.database = 'postgres'" "idempotency.maintenance_interval = '1s'" \
  "idempotency.partition_width = '1s'" "idempotency.premake = 2" \
  "synchronous_standby_names = '*'"
cluster_start "$PRIMARY_DATA"

# The standby, streaming synchronously (its own directory and server log).
make_standby
synchronous 60 || fail "the standby is not synchronous"
ok "the standby streams synchronously"

# Keys committed while the standby is there: completed ones to replay and look up.
bounded 60 -c "CREATE EXTENSION idempotency" >/dev/null || fail "CREATE EXTENSION did not commit"
for i in 1 2 3; do
  bounded 30 -c "SELECT outcome FROM idempotency.reserve('sr', 'done-$i', idempotency.fingerprint('{\"n\": $i}'::jsonb))" \
    -c "SELECT idempotency.complete('sr', 'done-$i', 200, '{\"n\": $i}')" >/dev/null ||
    fail "completing done-$i"
done
ok "three completed keys committed with the standby up"

# The standby goes away. From now on a commit waits for it. (The probe's cancel ends the wait;
# its claim stays committed locally, as PostgreSQL warns.)
cluster_stop "$STANDBY_DATA"
rc=0
bounded 3 -c "SELECT outcome FROM idempotency.reserve('sr', 'write-probe')" >/dev/null 2>&1 || rc=$?
[[ $rc == 124 ]] || fail "a reserve of a new key did not wait for the stopped standby (rc $rc)"
ok "a write waits for the stopped standby (as PostgreSQL's own do)"

# Rows in the default partition for the next passes to move: keys expiring far beyond the
# premade partitions, written without waiting for the standby (the test's own setting).
mark=$(stat -c %s "$PRIMARY_LOG")
bounded 30 -c "SET synchronous_commit = local" \
  -c "SELECT count((idempotency.reserve('sr', 'far-' || i, NULL, '1 s', make_interval(hours => i * 5))).outcome)
      FROM generate_series(1, 5) i" >/dev/null ||
  fail "writing rows to the default partition (synchronous_commit = local) took over 30 s"

# Wait for passes that did work (created partitions, moved rows) after the standby stopped.
log_shows_within 30 "$PRIMARY_LOG" "$mark" "idempotency: created partition keys_p.*(rows: [1-9]" ||
  fail "no maintenance pass moved rows out of the default partition within 30 s"
ok "the worker created partitions and moved rows out of the default partition"

# While the worker makes three more passes (each creates a partition), at least 5 rounds:
# reads answer. (The rounds are paced by 0.3 s; the wait is for the passes, up to 120 s.)
created() { tail -c +"$mark" "$PRIMARY_LOG" | grep -c "idempotency: created partition keys_p" || true; }
first=$(created)
end=$((SECONDS + 120))
rounds=0
while ((rounds < 5 || $(created) < first + 3)) && ((SECONDS < end)); do
  i=$((rounds % 3 + 1))
  out=$(bounded "$BOUND" -F ' ' \
    -c "SELECT outcome, status_code, response FROM idempotency.reserve('sr', 'done-$i', idempotency.fingerprint('{\"n\": $i}'::jsonb))" 2>&1) ||
    fail "reserve of completed key done-$i not answered within ${BOUND}s: $out"
  [[ $out == "replay 200 {\"n\": $i}" ]] || fail "replay of done-$i: got '$out'"
  out=$(bounded "$BOUND" -F ' ' -c "SELECT state, status_code FROM idempotency.lookup('sr', 'done-$i')" 2>&1) ||
    fail "lookup of done-$i not answered within ${BOUND}s: $out"
  [[ $out == "completed 200" ]] || fail "lookup of done-$i: got '$out'"
  out=$(bounded "$BOUND" -c "SELECT count(*) FROM idempotency.keys WHERE scope = 'sr' AND key <> 'write-probe'" 2>&1) ||
    fail "a plain SELECT from idempotency.keys not answered within ${BOUND}s: $out"
  [[ $out == 8 ]] || fail "SELECT count(*) from idempotency.keys: got '$out', want 8"
  rounds=$((rounds + 1))
  sleep 0.3
done
ok "$rounds rounds of replay, lookup and SELECT answered while the standby is down"
passes=$(created)
((passes >= first + 3)) || fail "only $passes partitions created while the standby is down"
ok "$passes partitions created by the worker while the standby is down"
[[ $(primary -c "SELECT count(*) FROM pg_stat_activity
                 WHERE backend_type = 'idempotency maintenance' AND wait_event = 'SyncRep'") == 0 ]] ||
  fail "a maintenance pass waits in SyncRep"
ok "no maintenance pass waits for the standby"

# A direct maintain() (the worker may have done the work first: retried until a call did some).
maintain_created() {
  local out
  out=$(bounded "$BOUND" -c "SELECT count(*) FILTER (WHERE action = 'created') FROM idempotency.maintain()" 2>&1) ||
    fail "maintain() did not return within ${BOUND}s: $out"
  ((out > 0))
}
poll 60 "maintain() created a partition and committed without waiting for the standby" \
  maintain_created
out=$(bounded "$BOUND" -c "SHOW synchronous_commit" 2>&1)
[[ $out == on ]] || fail "a new session's synchronous_commit is '$out', not on"
out=$(bounded "$BOUND" -c "BEGIN" -c "SELECT count(*) >= 0 FROM idempotency.maintain()" \
  -c "SHOW synchronous_commit" -c "ROLLBACK" 2>&1 | tail -n 1)
[[ $out == local ]] || fail "after maintain() in a transaction synchronous_commit is '$out'"
ok "maintain() sets synchronous_commit = local for its transaction only"

# maintain() in a transaction that already wrote keeps the caller's setting (its writes must
# wait for the standby) and says so.
out=$(bounded "$BOUND" -c "BEGIN" -c "CREATE TEMP TABLE t (x int)" -c "INSERT INTO t VALUES (1)" \
  -c "SELECT count(*) >= 0 FROM idempotency.maintain()" -c "SHOW synchronous_commit" \
  -c "ROLLBACK" 2>&1)
[[ $(tail -n 1 <<<"$out") == on ]] || fail "maintain() after a write changed synchronous_commit: $out"
grep -q "NOTICE:  idempotency.maintain() keeps synchronous_commit" <<<"$out" ||
  fail "no notice for maintain() after a write: $out"
ok "maintain() after a write in the same transaction keeps synchronous_commit (with a notice)"

# The standby comes back: the waiting write goes through, the standby has everything.
cluster_start "$STANDBY_DATA"
out=$(bounded 60 -c "SELECT outcome FROM idempotency.reserve('sr', 'after')" 2>&1) ||
  fail "a write did not commit after the standby came back: $out"
ok "writes commit again once the standby is back"
echo "$CHECKS checks passed"
echo "PASS"
