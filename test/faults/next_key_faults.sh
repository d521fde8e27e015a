#!/usr/bin/env bash
# A failed shared-memory refill of next_key: the error comes after the stream's new bound is
# durable and before the cache holds the new block. next_key raises a clean ERROR, the
# stream's lock is released, and the values of that block are lost (a gap), never handed out:
# every value after it is above every value before it, none repeats.
set -euo pipefail
# shellcheck source=test/faults/lib.sh
source "$(dirname "$0")/lib.sh"
faults_cluster faults/next_key 54393

q -c "SELECT idempotency.create_stream('s', 5)" >/dev/null
q -c "CREATE TABLE taken (v bigint)"
q -c "INSERT INTO taken SELECT idempotency.next_key('s') FROM generate_series(1, 7)"
expect "values before" "$(q -c "SELECT string_agg(v::text, ',' ORDER BY v) FROM taken")" "1,2,3,4,5,6,7"

attach next-key-refill error
# The cached block (6..10) still serves three values; the fourth call refills, and fails.
q -c "INSERT INTO taken SELECT idempotency.next_key('s') FROM generate_series(1, 3)"
out=$(run_error "SELECT idempotency.next_key('s')")
[[ $out == *"XX000: error triggered for injection point idempotency-next-key-refill"* ]] ||
  fail "failed refill: $out"
passed "a failed refill is a clean ERROR"
out=$(run_error "SELECT idempotency.next_key('s')")
[[ $out == *"idempotency-next-key-refill"* ]] || fail "second failed refill: $out"
detach next-key-refill
no_leftovers
no_restart

q -c "INSERT INTO taken SELECT idempotency.next_key('s') FROM generate_series(1, 12)"
expect "no value repeats" "$(q -c "SELECT count(*) = count(DISTINCT v) FROM taken")" t
expect "the values after the failures are above every value before them" \
  "$(q -c "SELECT min(v) FROM taken WHERE v > 10")" "21"
expect "the durable bound covers every value handed out" \
  "$(q -c "SELECT reserved_up_to >= (SELECT max(v) FROM taken) FROM idempotency.streams WHERE stream = 's'")" t
echo "$CHECKS checks passed"
