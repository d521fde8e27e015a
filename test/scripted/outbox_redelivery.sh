#!/usr/bin/env bash
# Outbox redelivery through a real pg_recvlogical: a run stopped (SIGKILL) before it
# acknowledged anything, then restarted, yields the same keys (the same lines) for the
# unacknowledged messages; once a run has acknowledged, those transactions are not sent again.
# Runs on the shared test cluster (wal_level = logical) in a database of its own.
set -euo pipefail

DB=outbox_redelivery
SLOT=outbox_redelivery
source "$(dirname "${BASH_SOURCE[0]}")/lib/prelude.sh" test_cluster # dropping the database drops its slot
WORK=$(mktemp -d)
own_database "$DB"
q -c "CREATE EXTENSION idempotency"
"$PGBIN/pg_recvlogical" -d "$DB" --slot "$SLOT" --create-slot --plugin idempotency

emit_txns() {  # emit_txns FIRST LAST: one transaction per pair of messages
  local n
  for ((n = $1; n <= $2; n += 2)); do
    q -c "BEGIN" -c "SELECT idempotency.emit('r', '{\"n\": $n}')" \
      -c "SELECT idempotency.emit('r', '{\"n\": $((n + 1))}')" -c "COMMIT" >/dev/null
  done
}
keys() { grep -o '"key":"[0-9a-f]*"' "$1" | cut -d'"' -f4; }
messages() { grep -c '"key"' "$1" || true; }
confirmed() { q -c "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = '$SLOT'"; }

# Run 1: receives 6 messages, never acknowledges (status and fsync intervals of an hour),
# and is killed.
emit_txns 1 6
before=$(confirmed)
"$PGBIN/pg_recvlogical" -d "$DB" --slot "$SLOT" --start -o framing=on -s 3600 -F 3600 \
  --no-loop -f "$WORK/run1.jsonl" &
RECV_PID=$!
BG+=("$RECV_PID")
received_6() { [[ $(messages "$WORK/run1.jsonl" 2>/dev/null) -ge 6 ]]; }
poll --try 60 received_6 || true
kill -KILL "$RECV_PID"
wait "$RECV_PID" 2>/dev/null || true
RECV_PID=
[[ $(messages "$WORK/run1.jsonl") -eq 6 ]] || fail "run 1 received $(messages "$WORK/run1.jsonl") messages, not 6"
[[ $(confirmed) == "$before" ]] || fail "run 1 acknowledged: confirmed_flush_lsn moved from $before to $(confirmed)"

# Run 2: restarts from the same slot after 4 more messages, stops at the end of the WAL
# (--endpos) and acknowledges on exit.
emit_txns 7 10
end=$(q -c "SELECT pg_current_wal_insert_lsn()")
"$PGBIN/pg_recvlogical" -d "$DB" --slot "$SLOT" --start -o framing=on --endpos "$end" \
  --no-loop -f "$WORK/run2.jsonl"
[[ $(messages "$WORK/run2.jsonl") -eq 10 ]] || fail "run 2 received $(messages "$WORK/run2.jsonl") messages, not 10"
# Same keys, same lines, same order for the 6 unacknowledged messages.
diff <(grep '"key"' "$WORK/run1.jsonl") <(grep '"key"' "$WORK/run2.jsonl" | head -n 6) ||
  fail "redelivered lines differ"
# Keys strictly increasing and unique over the whole run.
keys "$WORK/run2.jsonl" >"$WORK/keys2"
LC_ALL=C sort -u -c "$WORK/keys2" || fail "keys of run 2 are not strictly increasing"
[[ $(confirmed) != "$before" ]] || fail "run 2 did not acknowledge"

# Run 3: only what run 2 did not acknowledge comes back: the 2 new messages.
emit_txns 11 12
end=$(q -c "SELECT pg_current_wal_insert_lsn()")
"$PGBIN/pg_recvlogical" -d "$DB" --slot "$SLOT" --start -o framing=on --endpos "$end" \
  --no-loop -f "$WORK/run3.jsonl"
keys "$WORK/run3.jsonl" >"$WORK/keys3"
[[ $(wc -l <"$WORK/keys3") -eq 2 ]] || fail "run 3 received $(wc -l <"$WORK/keys3") messages, not 2"
grep -q '"payload":{"n": 11}' "$WORK/run3.jsonl" || fail "run 3 misses message 11"
LC_ALL=C sort -u -c <(cat "$WORK/keys2" "$WORK/keys3") || fail "run 3 keys do not follow run 2 keys"

echo "ok: 6 unacknowledged messages redelivered with identical keys; acknowledged ones not resent"
