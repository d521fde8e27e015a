#!/usr/bin/env bash
# Two-phase commit: a transaction that reserved (and completed, checkpointed or failed) a key
# and ran PREPARE TRANSACTION keeps its claim: other sessions get in_progress, or wait for
# their `wait` and then get in_progress. COMMIT PREPARED, also from a new session after a
# server restart, leaves the key exactly as a plain commit of the same calls does (a twin key
# committed plainly is compared column by column); ROLLBACK PREPARED leaves no trace.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
cluster_setup test-cluster/two-phase 54476
source "$(dirname "${BASH_SOURCE[0]}")/lib/prelude.sh" cluster
# The stored record without its timestamps, which differ between a key and its twin; the
# timestamps are checked as intervals instead.
record() {
  q -c "SELECT state, status_code, response, request_hash, attempt, recovery_point, last_error,
      completed_at IS NOT NULL, locked_until - first_seen_at, expires_at - first_seen_at
      FROM idempotency.lookup('2pc', '$1')"
}

same_as_twin() { # same_as_twin WHAT KEY: the key's record equals its plainly committed twin's
  local got want
  got=$(record "$2") want=$(record "twin-$2")
  [[ -n $want ]] || fail "$1: the twin has no record"
  expect "$1 ($got)" "$got" "$want"
}

rm -f "$CLUSTER_LOG"
cluster_init "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" "max_prepared_transactions = 5" "fsync = off"
cluster_start "$CLUSTER_DATA"
q -c "CREATE EXTENSION idempotency"

# The calls of each case; {K} is the key. Each runs once prepared, once as a plain commit
# (key twin-K).
declare -A CALLS=(
  [claim]="SELECT outcome FROM idempotency.reserve('2pc', '{K}', '\\x0102', lock_ttl => '1 hour');"
  [done]="SELECT outcome FROM idempotency.reserve('2pc', '{K}', '\\x0102');
          SELECT idempotency.complete('2pc', '{K}', 201, '{\"id\": 1}');"
  [step]="SELECT outcome FROM idempotency.reserve('2pc', '{K}', lock_ttl => '1 hour');
          SELECT idempotency.checkpoint('2pc', '{K}', 'charged');"
  [failed]="SELECT outcome FROM idempotency.reserve('2pc', '{K}');
            SELECT idempotency.fail('2pc', '{K}', '{\"error\": \"timeout\"}');"
)
calls() { printf '%s\n' "${CALLS[$1]//\{K\}/$2}"; }

for c in claim done step failed; do
  { echo "BEGIN;"; calls $c "$c"; echo "PREPARE TRANSACTION 'p-$c';"; } | q >/dev/null
  { echo "BEGIN;"; calls $c "twin-$c"; echo "COMMIT;"; } | q >/dev/null
done
expect "four transactions prepared" "$(q -c "SELECT count(*) FROM pg_prepared_xacts")" 4

# While prepared: other sessions see the claim as in_progress, or wait, then in_progress.
for c in claim done step; do
  expect "prepared $c: another session's reserve is in_progress" \
    "$(q -c "SELECT outcome FROM idempotency.reserve('2pc', '$c')")" in_progress
done
start=$(date +%s%N)
expect "prepared done: a reserve that waits 500ms answers in_progress after waiting" \
  "$(q -c "SELECT outcome FROM idempotency.reserve('2pc', 'done', wait => '500 milliseconds')")" in_progress
waited=$((($(date +%s%N) - start) / 1000000))
[[ $waited -ge 450 ]] || fail "the reserve did not wait ($waited ms)"
passed "it waited ($waited ms)"
expect "prepared failed: the key lock is held until the outcome" \
  "$(q -c "SELECT outcome FROM idempotency.reserve('2pc', 'failed')")" in_progress
expect "prepared: nothing is visible yet" \
  "$(q -c "SELECT count(*) FROM idempotency.keys WHERE key IN ('claim', 'done', 'step', 'failed')")" 0

# COMMIT PREPARED in a new session: exactly as the plain commit.
q -c "COMMIT PREPARED 'p-claim'"
same_as_twin "COMMIT PREPARED of a claim: as a plain commit" claim
expect "committed claim: held (in_progress) for its lease" \
  "$(q -c "SELECT outcome FROM idempotency.reserve('2pc', 'claim', '\x0102')")" in_progress

# A server restart with prepared transactions: they keep their key locks.
cluster_stop "$CLUSTER_DATA"
cluster_start "$CLUSTER_DATA"
expect "after a restart, the prepared transactions are there" \
  "$(q -c "SELECT string_agg(gid, ',' ORDER BY gid) FROM pg_prepared_xacts")" "p-done,p-failed,p-step"
expect "after a restart, a prepared claim is still in_progress for others" \
  "$(q -c "SELECT outcome FROM idempotency.reserve('2pc', 'done')")" in_progress
q -c "COMMIT PREPARED 'p-done'"
q -c "COMMIT PREPARED 'p-failed'"
same_as_twin "COMMIT PREPARED (after a restart) of reserve + complete: as a plain commit" done
expect "the stored response replays" \
  "$(q -c "SELECT outcome || ' ' || status_code || ' ' || response FROM idempotency.reserve('2pc', 'done', '\x0102')")" \
  'replay 201 {"id": 1}'
same_as_twin "COMMIT PREPARED (after a restart) of reserve + fail: as a plain commit" failed
expect "the failed key is taken again with attempt 2" \
  "$(q -c "SELECT outcome || ' ' || attempt FROM idempotency.reserve('2pc', 'failed')")" "new 2"

# ROLLBACK PREPARED: no trace.
q -c "ROLLBACK PREPARED 'p-step'"
expect "ROLLBACK PREPARED: no row" "$(q -c "SELECT count(*) FROM idempotency.keys WHERE key = 'step'")" 0
expect "ROLLBACK PREPARED: the key is new again, attempt 1, no recovery point" \
  "$(q -c "SELECT outcome || ' ' || attempt || ' ' || coalesce(recovery_point, '-') FROM idempotency.reserve('2pc', 'step')")" "new 1 -"
expect "no key lock is left behind" \
  "$(q -c "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 478")" 0
echo "two_phase: $CHECKS checks passed"
