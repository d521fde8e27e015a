#!/usr/bin/env bash
# An error in the output plugin while it decodes a message: the decoding call ends with a
# clean ERROR, the slot does not move and is free again, and the next decoding delivers the
# same messages with the same keys.
set -euo pipefail
# shellcheck source=test/faults/lib.sh
source "$(dirname "$0")/lib.sh"
faults_cluster faults/decode 54394

q -c "SELECT pg_create_logical_replication_slot('outbox', 'idempotency')" >/dev/null
for i in 1 2 3; do q -c "SELECT idempotency.emit('orders', jsonb_build_object('n', $i))" >/dev/null; done
keys_sql="SELECT string_agg(data::jsonb ->> 'key', ',') FROM pg_logical_slot_peek_changes('outbox', NULL, NULL)"
keys=$(q -c "$keys_sql")
[[ $(tr ',' '\n' <<<"$keys" | grep -c .) == 3 ]] || fail "three keys expected, got '$keys'"
slot_sql="SELECT confirmed_flush_lsn || ' ' || active FROM pg_replication_slots WHERE slot_name = 'outbox'"
slot=$(q -c "$slot_sql")

attach decode-message error
out=$(run_error "SELECT count(*) FROM pg_logical_slot_get_changes('outbox', NULL, NULL)")
[[ $out == *"XX000: error triggered for injection point idempotency-decode-message"* ]] ||
  fail "error while decoding: $out"
passed "an error while decoding is a clean ERROR"
expect "the slot has not moved and is free" "$(q -c "$slot_sql")" "$slot"
detach decode-message
no_restart

expect "the same messages with the same keys" "$(q -c "SELECT string_agg(data::jsonb ->> 'key', ',')
  FROM pg_logical_slot_get_changes('outbox', NULL, NULL)")" "$keys"
expect "consumed" "$(q -c "SELECT count(*) FROM pg_logical_slot_get_changes('outbox', NULL, NULL)")" 0
no_leftovers
echo "$CHECKS checks passed"
