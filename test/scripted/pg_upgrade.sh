#!/usr/bin/env bash
# idem: same on every major (the IDEM_PG=15 run runs it; see scripts/test.sh)
# pg_upgrade from PostgreSQL 15 to 18 with the extension and data in every state: completed,
# committed-in-progress, failed and checkpointed keys; streams with values handed out; consumer
# watermarks; partitions made by maintain(); an outbox slot, drained and dropped first as
# docs/operations.md says (pg_upgrade carries logical slots over only from 17 on). On 18: every key
# answers as before, next_key continues above every value handed out on 15, old positions are
# refused by accept, outbox keys continue above the old ones, maintain() and the worker run.
# PostgreSQL 18 is built from Debian's source package on first use (scripts/majors.sh).
# The 15 side is Debian 12's own postgresql-15 at the oldest release its archive still has
# (15.18 today), unpacked beside the installed one: 15.20 stores a `pg_attver` option on every
# column that 18.6 does not know, so pg_upgrade from 15.20 to 18.6 fails for any database, with
# or without this extension (docs/operations.md, "Upgrading PostgreSQL").
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
OLD_VERSION=$(apt-cache madison postgresql-15 | awk '{print $3}' | sort -V | head -n1)
OLD_BIN=$(debian_pg_binaries "$OLD_VERSION")
build_pg_major 18
NEW_BIN=$(pg_major_prefix 18)/bin
install_extension_with "$OLD_BIN/pg_config"
install_extension_with "$NEW_BIN/pg_config"

cluster_setup test-cluster/pg-upgrade 54474
OLD_DATA=$CLUSTER_DATA OLD_PORT=$CLUSTER_PORT OLD_SOCK=$CLUSTER_SOCK OLD_LOG=$CLUSTER_LOG
BASE=$(dirname "$OLD_DATA")
NEW_DATA=$BASE/data18 NEW_PORT=$((OLD_PORT + 1))
NEW_SOCK=/tmp/idempotency-$NEW_PORT NEW_LOG=$BASE/server18.log
source "$(dirname "${BASH_SOURCE[0]}")/lib/prelude.sh" none
on_exit 'PGBIN=$OLD_BIN cluster_stop "$OLD_DATA" >/dev/null 2>&1'
on_exit 'PGBIN=$NEW_BIN cluster_stop "$NEW_DATA" >/dev/null 2>&1'
on_fail 'echo "--- 15 log"; tail -n 20 "$OLD_LOG" 2>/dev/null'
on_fail 'echo "--- 18 log"; tail -n 20 "$NEW_LOG" 2>/dev/null'
old() { PGBIN=$OLD_BIN cluster_psql "$OLD_DATA" "$OLD_PORT" "$OLD_SOCK" -d app -qAt "$@"; }
new() { PGBIN=$NEW_BIN cluster_psql "$NEW_DATA" "$NEW_PORT" "$NEW_SOCK" -d app -qAt "$@"; }

# Both clusters: the worker on 'app', one-hour partitions (so maintain() makes several).
SETTINGS=("idempotency.database = 'app'" "idempotency.partition_width = '1h'"
  "idempotency.maintenance_interval = '1s'")
PGBIN=$OLD_BIN cluster_init "$OLD_DATA" "$OLD_PORT" "$OLD_SOCK" "${SETTINGS[@]}"
PGBIN=$OLD_BIN cluster_start "$OLD_DATA" "$OLD_PORT" "$OLD_SOCK"
PGBIN=$OLD_BIN cluster_psql "$OLD_DATA" "$OLD_PORT" "$OLD_SOCK" -d postgres -qc "CREATE DATABASE app"

old >/dev/null <<'SQL'
SET client_min_messages = warning;
CREATE EXTENSION idempotency;
CREATE TABLE orders (id bigserial PRIMARY KEY, key text, amount int);
-- completed
BEGIN;
SELECT outcome FROM idempotency.reserve('acct', 'done', '\x01', retention => '7 days');
INSERT INTO orders (key, amount) VALUES ('done', 100);
SELECT idempotency.complete('acct', 'done', 201, '{"order": 1, "amount": 100}');
COMMIT;
-- committed in progress (a claim with a long lease), failed, checkpointed (short lease)
SELECT outcome FROM idempotency.reserve('acct', 'holding', '\x02', lock_ttl => '1 hour');
SELECT outcome FROM idempotency.reserve('acct', 'failed', '\x03');
SELECT idempotency.fail('acct', 'failed', '{"error": "supplier down"}', 1);
SELECT outcome FROM idempotency.reserve('acct', 'step', '\x04', lock_ttl => '2 seconds');
SELECT idempotency.checkpoint('acct', 'step', 'charged', 1);
-- a stream with values handed out, watermarks
SELECT idempotency.create_stream('invoices', 10);
SELECT max(idempotency.next_key('invoices')) FROM generate_series(1, 25);
SELECT idempotency.accept('billing', 'orders-0', 4242);
SELECT idempotency.accept('billing', 'orders-1', '00000000000000ff00000000000000ff'::uuid);
SQL
# Partitions by maintain() (the worker makes them too: whichever ran, they are there).
old -c "SELECT count(*) FROM idempotency.maintain()" >/dev/null
parts15=$(old -c "SELECT count(*) FROM idempotency.partitions WHERE NOT is_default")
[[ $parts15 -ge 3 ]] || fail "maintain() made $parts15 partitions on 15"
next15=$(old -c "SELECT idempotency.next_key('invoices')")
keys15=$(old -c "SELECT count(*) FROM idempotency.keys")
snapshot="SELECT string_agg(concat_ws('|', scope, key, state, status_code, response::text,
  encode(request_hash, 'hex'), attempt, recovery_point, last_error::text, first_seen_at,
  completed_at, locked_until, expires_at), E'\n' ORDER BY key) FROM idempotency.keys"
before=$(old -c "SET TimeZone = 'UTC'" -c "$snapshot")

# The outbox: a slot with the idempotency plugin, read to the end before the upgrade (docs/outbox.md:
# consume and drop logical slots first; 15 cannot hand them to pg_upgrade).
old -c "SELECT 1 FROM pg_create_logical_replication_slot('outbox', 'idempotency')" >/dev/null
old -c "SELECT idempotency.emit('orders', '{\"n\": 1}')" >/dev/null
last_key15=$(old -c "SELECT (data::json->>'key') FROM pg_logical_slot_get_changes('outbox', NULL, NULL) ORDER BY lsn DESC LIMIT 1")
[[ -n $last_key15 ]] || fail "the outbox slot decoded nothing on 15"
old -c "SELECT pg_drop_replication_slot('outbox')" >/dev/null
PGBIN=$OLD_BIN cluster_stop "$OLD_DATA"

# The new cluster: same settings and library, then pg_upgrade (as the cluster's user). initdb
# of 18 turns data checksums on by default; pg_upgrade needs both sides alike.
IDEM_INITDB_ARGS=--no-data-checksums PGBIN=$NEW_BIN \
  cluster_init "$NEW_DATA" "$NEW_PORT" "$NEW_SOCK" "${SETTINGS[@]}"
rm -rf "$NEW_SOCK" && mkdir -m 0700 "$NEW_SOCK"
is_root && chown postgres: "$NEW_SOCK"
(cd "$BASE" && as_pg env -C "$BASE" "$NEW_BIN/pg_upgrade" -b "$OLD_BIN" -B "$NEW_BIN" \
  -d "$OLD_DATA" -D "$NEW_DATA" -s "$NEW_SOCK" -p "$OLD_PORT" -P "$NEW_PORT" -U postgres \
  --copy >"$BASE/pg_upgrade.log" 2>&1) || {
  tail -n 20 "$BASE/pg_upgrade.log"
  grep -rh 'ERROR' "$NEW_DATA"/pg_upgrade_output.d/*/log/ 2>/dev/null | head -n 5
  if grep -rqs 'unrecognized parameter "pg_attver"' "$NEW_DATA"/pg_upgrade_output.d/; then
    fail "pg_upgrade failed: PostgreSQL $OLD_VERSION stores pg_attver column options that 18 does not know"
  fi
  fail "pg_upgrade failed"
}
echo "ok: pg_upgrade $($OLD_BIN/postgres --version | awk '{print $3}') -> $($NEW_BIN/postgres --version | awk '{print $3}')"
PGBIN=$NEW_BIN cluster_start "$NEW_DATA" "$NEW_PORT" "$NEW_SOCK"
expect "server is 18" "$(new -c "SELECT current_setting('server_version_num')::int / 10000")" 18

expect "every key and field as on 15" "$(new -c "SET TimeZone = 'UTC'" -c "$snapshot")" "$before"
expect "key count" "$(new -c "SELECT count(*) FROM idempotency.keys")" "$keys15"
expect "completed key replays" \
  "$(new -c "SELECT outcome || ' ' || status_code || ' ' || response::text FROM idempotency.reserve('acct', 'done', '\x01')")" \
  'replay 201 {"order": 1, "amount": 100}'
expect "a mismatching request is still refused" \
  "$(new -c "SELECT outcome FROM idempotency.reserve('acct', 'done', '\x09')")" mismatch
expect "the committed claim is still held" \
  "$(new -c "SELECT outcome FROM idempotency.reserve('acct', 'holding', '\x02')")" in_progress
expect "the failed key is retried with the next attempt" \
  "$(new -c "SELECT outcome || ' ' || attempt FROM idempotency.reserve('acct', 'failed', '\x03')")" "new 2"
lapsed() {
  [[ $(new -c "SELECT locked_until < clock_timestamp() FROM idempotency.lookup('acct', 'step')") == t ]]
}
poll --try 60 lapsed || fail "the checkpointed claim's lease (2 s) did not lapse"
expect "the checkpointed key is taken over with its recovery point" \
  "$(new -c "SELECT outcome || ' ' || attempt || ' ' || recovery_point FROM idempotency.reserve('acct', 'step', '\x04')")" \
  "new 2 charged"
stale=$(new -c "SELECT idempotency.complete('acct', 'step', 200, '{}', 1)" 2>&1) &&
  fail "a stale attempt completed after the upgrade"
[[ $stale == *IK001* || $stale == *"attempt"* ]] || fail "stale complete: $stale"
echo "ok: the stale holder is fenced off"

next18=$(new -c "SELECT idempotency.next_key('invoices')")
[[ $next18 -gt $next15 ]] || fail "next_key on 18 ($next18) is not above 15's last value ($next15)"
echo "ok: next_key continues above 15 ($next15 -> $next18)"
expect "an old bigint position is refused" "$(new -c "SELECT idempotency.accept('billing', 'orders-0', 4242)")" f
expect "an old uuid position is refused" \
  "$(new -c "SELECT idempotency.accept('billing', 'orders-1', '00000000000000ff00000000000000ff'::uuid)")" f
expect "a newer position is accepted" "$(new -c "SELECT idempotency.accept('billing', 'orders-0', 4243)")" t

# The outbox on 18: a new slot, keys above every key decoded on 15.
new -c "SELECT 1 FROM pg_create_logical_replication_slot('outbox', 'idempotency')" >/dev/null
new -c "SELECT idempotency.emit('orders', '{\"n\": 2}')" >/dev/null
key18=$(new -c "SELECT (data::json->>'key') FROM pg_logical_slot_get_changes('outbox', NULL, NULL) ORDER BY lsn DESC LIMIT 1")
[[ -n $key18 && $key18 > $last_key15 ]] || fail "outbox key on 18 ($key18) is not above 15's ($last_key15)"
echo "ok: outbox keys continue above 15's ($last_key15 -> $key18)"
expect "a consumer applies 15's last outbox key (its first message)" \
  "$(new -c "SELECT idempotency.accept('outbox', 'app', '$last_key15'::uuid)")" t
expect "... and accepts 18's next one" "$(new -c "SELECT idempotency.accept('outbox', 'app', '$key18'::uuid)")" t
expect "... and refuses the old one afterwards" \
  "$(new -c "SELECT idempotency.accept('outbox', 'app', '$last_key15'::uuid)")" f
new -c "SELECT pg_drop_replication_slot('outbox')" >/dev/null

# Maintenance on 18: maintain() by hand, then the worker (1 s interval) on its own re-creates
# a premade partition (empty, within idempotency.premake of now) dropped behind its back.
new -c "SELECT count(*) FROM idempotency.maintain()" >/dev/null
premade=$(new -c "SELECT partition FROM idempotency.partitions WHERE NOT is_default
  AND range_start > now() AND range_start < now() + interval '3 hours' ORDER BY range_start DESC LIMIT 1")
[[ -n $premade ]] || fail "maintain() on 18 left no premade partition"
[[ $(new -c "SELECT count(*) FROM idempotency.$premade") == 0 ]] || fail "$premade is not empty"
new -c "DROP TABLE idempotency.$premade"
recreated() { [[ -n $(new -c "SELECT to_regclass('idempotency.$premade')") ]]; }
poll --try 60 recreated || fail "the worker did not re-create $premade on 18 within 60 s"
echo "ok: maintain() and the worker run on 18 ($premade re-created)"
expect "every key still there after maintenance" "$(new -c "SELECT count(*) >= $keys15 FROM idempotency.keys")" t
[[ $(new -c "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'idempotency launcher'") == 1 ]] ||
  fail "no idempotency launcher on 18"
echo "PASS ($CHECKS checks)"
