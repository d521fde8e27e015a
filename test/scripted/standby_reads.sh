#!/usr/bin/env bash
# Reads on a hot standby: lookup, fingerprint and the views answer from the replicated keys
# (the library is preloaded there too), while reserve, complete, execute_once and accept
# (writes) are refused with 25006.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
cluster_setup test-cluster/standby-reads 54446
source "$(dirname "${BASH_SOURCE[0]}")/lib/primary_standby.sh"

cluster_init "$PRIMARY_DATA" "$PRIMARY_PORT" "$PRIMARY_SOCK"
cluster_start "$PRIMARY_DATA"
primary -c "CREATE EXTENSION idempotency" >/dev/null
primary >/dev/null <<'SQL'
SELECT outcome FROM idempotency.reserve('standby', 'done', idempotency.fingerprint('{"a": 1}'::jsonb));
SELECT idempotency.complete('standby', 'done', 201, '{"id": 7}');
SELECT outcome FROM idempotency.reserve('standby', 'claimed', lock_ttl => '1 hour');
SELECT idempotency.accept('standby', 'p0', 42);
SELECT idempotency.create_stream('standby_s', 10);
SELECT idempotency.next_key('standby_s');
SQL

# A streaming standby of it, with the replicated keys.
make_standby "hot_standby = on"
expect "standby is in recovery" "$(standby -c "SELECT pg_is_in_recovery()")" "t"

expect "lookup of a completed key" \
  "$(standby -F ' ' -c "SELECT state, status_code, response FROM idempotency.lookup('standby', 'done')" 2>&1)" \
  'completed 201 {"id": 7}'
expect "lookup of a committed claim" \
  "$(standby -F ' ' -c "SELECT state, attempt FROM idempotency.lookup('standby', 'claimed')" 2>&1)" \
  "processing 1"
expect "lookup of an unknown key" \
  "$(standby -c "SELECT count(*) FROM idempotency.lookup('standby', 'nothing')" 2>&1)" "0"
expect "in_flight view" \
  "$(standby -c "SELECT key FROM idempotency.in_flight WHERE scope = 'standby'" 2>&1)" "claimed"
expect "fingerprint" \
  "$(standby -c "SELECT request_hash = idempotency.fingerprint('{\"a\": 1}'::jsonb)
                 FROM idempotency.keys WHERE scope = 'standby' AND key = 'done'" 2>&1)" "t"
err=$(standby -c "\\set VERBOSITY sqlstate" \
  -c "SELECT outcome FROM idempotency.reserve('standby', 'new-key')" 2>&1 || true)
expect "reserve refused" "$err" "ERROR:  25006"
err=$(standby -c "\\set VERBOSITY sqlstate" \
  -c "SELECT idempotency.complete('standby', 'claimed', 200, '{}')" 2>&1 || true)
expect "complete refused" "$err" "ERROR:  25006"
# execute_once: refused before anything runs, a replay of a completed key included.
err=$(standby -c "\\set VERBOSITY sqlstate" \
  -c "SELECT outcome FROM idempotency.execute_once('standby', 'eo', NULL, 'SELECT 1')" 2>&1 || true)
expect "execute_once refused" "$err" "ERROR:  25006"
err=$(standby -c "SELECT outcome FROM idempotency.execute_once('standby', 'done', NULL, 'SELECT 1')" 2>&1 || true)
expect "execute_once's message" "$err" \
  "ERROR:  cannot execute idempotency.execute_once() in a read-only transaction"

# accept writes: refused with the extension's own message naming it, like the calls above;
# the watermark it would move reads fine.
err=$(standby -c "\\set VERBOSITY sqlstate" -c "SELECT idempotency.accept('standby', 'p0', 43)" 2>&1 || true)
expect "accept refused" "$err" "ERROR:  25006"
err=$(standby -c "SELECT idempotency.accept('standby', 'p0', '00000000-0000-0000-0000-00000000002b'::uuid)" 2>&1 || true)
expect "accept's message" "$err" \
  "ERROR:  cannot execute idempotency.accept() in a read-only transaction"
expect "watermark" "$(standby -c "SELECT idempotency.watermark('standby', 'p0')" 2>&1)" "42"
# The bounds a move to a logical subscriber reads (docs/replication.md, "Moving to another server").
expect "stream_positions" \
  "$(standby -c "SELECT reserved_up_to FROM idempotency.stream_positions() WHERE stream = 'standby_s'" 2>&1)" "10"
err=$(standby -c "\\set VERBOSITY sqlstate" -c "SELECT idempotency.set_stream_floor('standby_s', 100)" 2>&1 || true)
expect "set_stream_floor refused" "$err" "ERROR:  25006"

echo "$CHECKS checks passed"
