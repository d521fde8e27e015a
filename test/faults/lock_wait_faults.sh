#!/usr/bin/env bash
# A reserve that waits for a key's lock held by another transaction sets a short lock_timeout
# (the rest of its wait) around the lock wait, which runs in a subtransaction. Whatever ends
# the wait (the timeout, an error starting the wait, an error or a cancel inside it, an error
# once the subtransaction is rolled back), the session's lock_timeout afterwards is the one it had:
# SET, SET LOCAL inside a savepoint, or the default. Every failure is a clean ERROR with no
# lock left. Also: maintain()'s record of its run fails inside a savepoint of a session with
# session_replication_role = replica; once the savepoint is rolled back, the replica trigger
# of idempotency.maintenance_log skips that session's rows again.
set -euo pipefail
# shellcheck source=test/faults/lib.sh
source "$(dirname "$0")/lib.sh"
faults_cluster faults/lock-wait 54396

WORK=$(mktemp -d /tmp/idem-lock-wait.XXXXXX)
holder=
stop_holder() {
  if [[ -n $holder ]]; then
    exec 7>&- || true
    wait "$holder" || true
    holder=
  fi
}
# Before the prelude's cleanup stops the cluster (and removes $WORK).
on_exit stop_holder

# The holder: a session whose open transaction has reserved key 'held' (it holds the key's
# lock until it commits), fed through a FIFO so that it stays open while the others wait.
mkfifo "$WORK/holder"
q <"$WORK/holder" >"$WORK/holder.out" 2>&1 &
holder=$!
exec 7>"$WORK/holder"
echo "SET application_name = 'holder'; BEGIN; SELECT idempotency.reserve('s', 'held');" >&7
poll 60 "the holder holds the key's lock" sql_true "SELECT count(*) = 1 FROM pg_locks l
  JOIN pg_stat_activity a USING (pid) WHERE a.application_name = 'holder'
  AND l.locktype = 'advisory' AND l.granted"

# session SETUP CALL: in one new session, runs SETUP, then CALL (which must fail unless it is
# the plain wait), then prints "lock_timeout=<value>" (SHOW) on stdout; errors go to
# $WORK/err.
session() {
  q -v ON_ERROR_STOP=0 -v VERBOSITY=verbose -c "SET application_name = 'waiter'" -c "$1" \
    -c "$2" -c "SELECT 'lock_timeout=' || current_setting('lock_timeout')" 2>"$WORK/err" |
    grep '^lock_timeout=' || true
}
reserve="SELECT outcome FROM idempotency.reserve('s', 'held', wait => '200 milliseconds')"
injected() { echo "error triggered for injection point idempotency-$1"; }

# point (empty: none), action, error the call must end with (empty: none)
cases=(
  "||"
  "key-lock-start|error|$(injected key-lock-start)"
  "key-lock-wait|error|$(injected key-lock-wait)"
  "subtransaction-rolled-back|error|$(injected subtransaction-rolled-back)"
)
for c in "${cases[@]}"; do
  IFS='|' read -r point action want <<<"$c"
  name=${point:-no fault (the wait times out)}
  [[ -z $point ]] || attach "$point" "$action"
  for setting in "SET lock_timeout = '7s'|7s" "RESET lock_timeout|0"; do
    setup=${setting%|*} kept=${setting#*|}
    got=$(session "$setup" "$reserve")
    if [[ -n $want ]]; then
      grep -qF "$want" "$WORK/err" || fail "$name: no error '$want' ($(cat "$WORK/err"))"
    else
      ! grep -q ERROR "$WORK/err" || fail "$name: $(cat "$WORK/err")"
    fi
    expect "$name, after $setup: the session's lock_timeout is unchanged" "$got" "lock_timeout=$kept"
  done
  # SET LOCAL in the transaction, the call in a savepoint rolled back after its error.
  got=$(q -v ON_ERROR_STOP=0 -c "BEGIN" -c "SET LOCAL lock_timeout = '3s'" -c "SAVEPOINT a" \
    -c "$reserve" -c "ROLLBACK TO SAVEPOINT a" \
    -c "SELECT 'lock_timeout=' || current_setting('lock_timeout')" -c "COMMIT" 2>/dev/null |
    grep '^lock_timeout=' || true)
  expect "$name, in a savepoint: SET LOCAL's lock_timeout is unchanged" "$got" "lock_timeout=3s"
  [[ -z $point ]] || detach "$point"
  expect "$name: the holder still holds the key's lock, alone" "$(q -c "SELECT count(*)
    FROM pg_locks l JOIN pg_stat_activity a USING (pid)
    WHERE l.locktype = 'advisory' AND a.application_name <> 'holder'")" 0
done

# A cancel while the reserve waits inside the subtransaction (at the point, then the lock).
attach key-lock-wait wait
(session "SET lock_timeout = '7s'" "$reserve" >"$WORK/cancelled.out"; cp "$WORK/err" "$WORK/cancelled.err") &
waiter=$!
poll 60 "the waiter waits at the point" sql_true \
  "SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'waiter' AND $(waiting_at key-lock-wait)"
q -c "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'waiter'" >/dev/null
wait "$waiter"
detach key-lock-wait
grep -q "canceling statement due to user request" "$WORK/cancelled.err" ||
  fail "cancel: $(cat "$WORK/cancelled.err")"
expect "a cancel during the wait: the session's lock_timeout is unchanged" \
  "$(cat "$WORK/cancelled.out")" "lock_timeout=7s"

# The holder commits: the key is processing, and a waiter with a longer wait gets it later.
echo "COMMIT;" >&7
stop_holder
no_leftovers
no_restart

# maintain()'s history under session_replication_role = replica, with a savepoint rolled back
# after the record's insert failed: the trigger must skip this session's own rows again.
attach maintain-record-insert error
out=$(q -v ON_ERROR_STOP=0 -c "SET session_replication_role = replica" -c "BEGIN" \
  -c "SAVEPOINT a" -c "SELECT count(*) FROM idempotency.maintain()" -c "ROLLBACK TO SAVEPOINT a" \
  -c "INSERT INTO idempotency.maintenance_log (started_at, ended_at, caller, role, result)
      VALUES (now(), now(), 'sql', 'by-hand', 'ok')" \
  -c "SELECT 'rows=' || count(*) FROM idempotency.maintenance_log WHERE role = 'by-hand'" \
  -c "COMMIT" 2>&1)
detach maintain-record-insert
[[ $out == *"$(injected maintain-record-insert)"* ]] || fail "maintain-record-insert: $out"
[[ $out == *"rows="* ]] || fail "the insert by hand did not run: $out"
expect "after the rolled-back savepoint, the replica trigger skips the session's rows" \
  "$(grep -o 'rows=[0-9]*' <<<"$out")" "rows=0"
no_leftovers
no_restart
echo "$CHECKS checks passed"
