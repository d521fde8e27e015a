#!/usr/bin/env bash
# A database moves from the managed edition to the extension, the way docs/managed.md says
# ("Moving between editions"): the application's tables with pg_dump, the live keys, the
# watermarks and the streams' positions with \copy, into a database with the extension on a
# server of its own ($PG_CONFIG's PostgreSQL with the extension installed, as the test command
# installs it). Afterwards a completed key replays with its stored answer, a claim in flight is
# still in progress, an accepted position is a duplicate, and next_key goes on above every key
# the managed edition handed out.
# Called by test/managed/run.sh with MPGBIN, MPORT and MSOCK of the managed cluster.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
cd "$IDEM_ROOT"
: "${MPGBIN:?}" "${MPORT:?}" "${MSOCK:?}"

work=$IDEM_ROOT/build/managed/move
rm -rf "$work" && mkdir -p "$work"
if is_root; then chmod 0777 "$work"; fi
old() { "$MPGBIN/psql" -X -v ON_ERROR_STOP=1 -h "$MSOCK" -p "$MPORT" -U idem_dbadmin -d move_old "$@"; }
cluster_setup test-cluster/managed-move 54471
trap 'cluster_stop "$CLUSTER_DATA" >/dev/null 2>&1 || true' EXIT
cluster_init "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" "fsync = off"
cluster_start "$CLUSTER_DATA"
new() { cluster_psql "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" -q -d move_new "$@"; }
cluster_psql "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" -q -d postgres -c "CREATE DATABASE move_new"

# The managed database: the edition through pg_tle, an application table, keys in every state,
# watermarks and a stream.
"$MPGBIN/psql" -X -v ON_ERROR_STOP=1 -h "$MSOCK" -p "$MPORT" -U postgres -d postgres -q \
  -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS move_old" \
  -c "CREATE DATABASE move_old OWNER idem_dbadmin"
"$MPGBIN/psql" -X -v ON_ERROR_STOP=1 -h "$MSOCK" -p "$MPORT" -U postgres -d move_old -q \
  -c "SET client_min_messages = warning" -c "CREATE EXTENSION pg_tle" \
  -c "GRANT pgtle_admin TO idem_dbadmin"
(cd editions/managed && old -q -f install_pg_tle.sql >/dev/null)
old -q >/dev/null <<'SQL'
CREATE EXTENSION idempotency;
SELECT count(*) FROM idempotency.maintain();
CREATE TABLE orders (id bigint PRIMARY KEY, item text NOT NULL);
BEGIN;
SELECT outcome FROM idempotency.reserve('acct', 'done', idempotency.fingerprint('{"item": "a"}'::jsonb));
INSERT INTO orders VALUES (1, 'a');
SELECT idempotency.complete('acct', 'done', 201, '{"order": 1}');
COMMIT;
SELECT outcome FROM idempotency.reserve('acct', 'in-flight', NULL, '1 hour');
SELECT outcome FROM idempotency.reserve('acct', 'failed');
SELECT idempotency.fail('acct', 'failed', '{"error": "timeout"}');
SELECT idempotency.accept('orders-consumer', 'p0', 41);
SELECT idempotency.accept('outbox', 'p1', '00000000-0000-0001-0000-000000000002'::uuid);
SELECT idempotency.create_stream('invoices');
SELECT idempotency.next_key('invoices') FROM generate_series(1, 5);
SQL

# The move, as docs/managed.md gives it.
"$MPGBIN/pg_dump" -h "$MSOCK" -p "$MPORT" -U postgres -d move_old --no-owner \
  --exclude-schema=idempotency --exclude-schema=pgtle --table=public.orders >"$work/app.sql"
old -q -c "\\copy (SELECT * FROM idempotency.keys WHERE expires_at > now()) TO '$work/keys.copy'" \
  -c "\\copy (SELECT * FROM idempotency.consumer_positions) TO '$work/positions.copy'" \
  -c "\\copy (SELECT * FROM idempotency.stream_positions()) TO '$work/streams.copy'"
new -c "CREATE EXTENSION idempotency" -c "SELECT count(*) FROM idempotency.maintain()" >/dev/null
new -f "$work/app.sql" >/dev/null
new -c "\\copy idempotency.keys FROM '$work/keys.copy'" \
  -c "\\copy idempotency.consumer_positions FROM '$work/positions.copy'" \
  -c "\\copy idempotency.streams FROM '$work/streams.copy'"

# What the application sees afterwards, on the extension.
fails=0
expect() { # expect WHAT WANT SQL
  local got
  got=$(new -At -c "$3")
  if [[ $got == "$2" ]]; then echo "ok   $1"; else echo "FAIL $1: got '$got', want '$2'"; fails=$((fails + 1)); fi
}
expect "the extension, not the edition" "0.4.0|c" \
  "SELECT e.extversion, (SELECT l.lanname FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
    WHERE p.oid = 'idempotency.reserve'::regproc) FROM pg_extension e WHERE e.extname = 'idempotency'"
expect "the application's rows" "1|a" "SELECT id, item FROM orders"
expect "a completed key replays its answer" 'replay|201|{"order": 1}' \
  "SELECT outcome, status_code, response FROM idempotency.reserve('acct', 'done', idempotency.fingerprint('{\"item\": \"a\"}'::jsonb))"
expect "the same key with another body is a mismatch" "mismatch" \
  "SELECT outcome FROM idempotency.reserve('acct', 'done', idempotency.fingerprint('{\"item\": \"b\"}'::jsonb))"
expect "a claim in flight is still in progress" "in_progress|1" \
  "SELECT outcome, attempt FROM idempotency.reserve('acct', 'in-flight')"
expect "a failed claim is taken over with the next attempt" 'new|2' \
  "SELECT outcome, attempt FROM idempotency.reserve('acct', 'failed')"
expect "an accepted position is a duplicate" "f|t" \
  "SELECT idempotency.accept('orders-consumer', 'p0', 41), idempotency.accept('orders-consumer', 'p0', 42)"
expect "a 128-bit watermark moved" "18446744073709551618" \
  "SELECT idempotency.watermark('outbox', 'p1')"
expect "next_key goes on above the keys handed out" "t" \
  "SELECT idempotency.next_key('invoices') > 5"
[[ $fails -eq 0 ]]
