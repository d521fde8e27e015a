#!/usr/bin/env bash
# Promotion while a maintenance pass is running, and the promoted server keeping
# synchronous_standby_names with no standby of its own.
# A primary and its synchronous standby, both with the library preloaded (1-second
# partitions); the worker is configured on the standby only (in its own postgresql.conf), so
# no pass on the primary can move the keys expiring hours ahead out of the default partition. A maintain()
# transaction on the primary moves them and holds ACCESS EXCLUSIVE on idempotency.keys; the
# primary is then stopped -m immediate and the standby promoted. On the promoted server: the
# uncommitted pass left nothing (the keys are all there, once, still in the default partition);
# the launcher starts at promotion and its passes create partitions and move the keys out of
# the default partition although synchronous_standby_names = '*' has no standby to answer;
# replays, lookups and SELECTs are answered meanwhile, writes wait.
# The outbox on PostgreSQL 15: a consumer's logical slot stays on the old primary (42704 on
# the promoted one); the documented recovery (a new slot, a new accept partition) delivers what
# is emitted after it, not what was left unread, and the old partition's watermark refuses every
# message applied before the failover.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
cluster_setup test-cluster/promote-maintenance 54477
source "$(dirname "${BASH_SOURCE[0]}")/lib/primary_standby.sh"
BOUND=${IDEM_SYNCREP_READ_BOUND:-15}
WORK=$(mktemp -d /tmp/idem-promote.XXXXXX)
KEYS=$WORK/keys
bounded() { standby_within "$@"; } # on the standby (then promoted), 124 after SECONDS

cluster_init "$PRIMARY_DATA" "$PRIMARY_PORT" "$PRIMARY_SOCK" \
  "idempotency.database = ''" "idempotency.maintenance_interval = '1s'" \
  "idempotency.partition_width = '1s'" "idempotency.premake = 2"
cluster_start "$PRIMARY_DATA"
primary -c "CREATE EXTENSION idempotency" >/dev/null
for i in 1 2 3; do
  primary -c "SELECT outcome FROM idempotency.reserve('pm', 'done-$i')" \
    -c "SELECT idempotency.complete('pm', 'done-$i', 200, '{\"n\": $i}')" >/dev/null
done

# synchronous_standby_names is kept at promotion, as in the report.
make_standby "synchronous_standby_names = '*'" "idempotency.database = 'postgres'"
primary -c "ALTER SYSTEM SET synchronous_standby_names = '*'" -c "SELECT pg_reload_conf()" >/dev/null
synchronous 60 || fail "the standby is not synchronous"
ok "the standby streams synchronously"
grep -q "idempotency: this server is a standby; maintenance of \"postgres\" starts when it is promoted" "$STANDBY_LOG" ||
  fail "the standby did not say that maintenance waits for its promotion"
ok "the standby logged once that maintenance starts at promotion"

# The outbox: a consumer's slot on the primary, three messages applied under accept (and
# confirmed by get_changes), two more emitted and not read before the failover.
emit() { primary -c "SELECT idempotency.emit('o', jsonb_build_object('n', $1))" >/dev/null; }
primary -c "SELECT pg_create_logical_replication_slot('billing', 'idempotency')" >/dev/null
for i in 1 2 3; do emit "$i"; done
primary -c "SELECT data::json->>'key' FROM pg_logical_slot_get_changes('billing', NULL, NULL)" >"$KEYS"
[[ $(wc -l <"$KEYS") == 3 ]] || fail "the consumer did not read 3 messages"
while read -r key; do
  [[ $(primary -c "SELECT idempotency.accept('billing', 'timeline-1', '$key'::uuid)") == t ]] ||
    fail "accept of $key"
done <"$KEYS"
for i in 4 5; do emit "$i"; done
ok "the consumer applied 3 messages; 2 more are emitted and not read"

# Keys for the default partition, replicated synchronously.
primary -c "SELECT count((idempotency.reserve('pm', 'far-' || i, NULL, '1 s', make_interval(hours => i * 5))).outcome)
            FROM generate_series(1, 5) i" >/dev/null
in_default() { # in_default PSQL-FUNCTION: keys of scope pm in the default partition
  "$@" -c "SELECT count(*) FROM idempotency.keys_default WHERE scope = 'pm'"
}
# (The completed keys too: with no worker on the primary, nothing has moved them.)
[[ $(in_default primary) == 8 ]] || fail "the keys are not in the default partition"

# A maintenance pass that moved them, holding its locks, when the primary dies.
"$PGBIN/psql" -X -h "$PRIMARY_SOCK" -p "$PRIMARY_PORT" -U postgres -d postgres -qAt \
  -c "BEGIN" -c "SELECT count(*) FROM idempotency.maintain()" -c "SELECT pg_sleep(120)" \
  >/dev/null 2>&1 &
BG+=("$!")
pass_holds_lock() {
  [[ $(primary -c "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
                   WHERE a.query LIKE '%pg_sleep(120)%' AND l.locktype = 'relation'
                     AND l.relation = 'idempotency.keys'::regclass AND l.mode = 'AccessExclusiveLock'") == 1 ]]
}
poll --try 60 pass_holds_lock || true
[[ $(primary -c "SELECT count(*) FROM pg_locks WHERE locktype = 'relation'
                 AND relation = 'idempotency.keys'::regclass AND mode = 'AccessExclusiveLock'") == 1 ]] ||
  fail "the maintenance pass does not hold its lock"
ok "a maintenance pass holds ACCESS EXCLUSIVE on idempotency.keys"
cluster_crash "$PRIMARY_DATA"
mark=$(stat -c %s "$STANDBY_LOG")
as_pg "$PGBIN/pg_ctl" -D "$STANDBY_DATA" -w promote >/dev/null || fail "promotion failed"
ok "the primary was stopped -m immediate and the standby promoted"

expect_b() { # expect_b WHAT SQL WANTED
  local out
  out=$(bounded "$BOUND" -F ' ' -c "$2" 2>&1) || fail "$1: not answered within ${BOUND}s: $out"
  [[ $out == "$3" ]] || fail "$1: got '$out', want '$3'"
}
expect_b "the uncommitted pass left every key, once" \
  "SELECT count(*), count(DISTINCT key) FROM idempotency.keys WHERE scope = 'pm'" "8 8"
[[ $(bounded "$BOUND" -c "SHOW synchronous_standby_names") == '*' ]] ||
  fail "the promoted server lost synchronous_standby_names"
rc=0
bounded 3 -c "SELECT outcome FROM idempotency.reserve('pm', 'write-probe')" >/dev/null 2>&1 || rc=$?
[[ $rc == 124 ]] || fail "a write on the promoted server did not wait for the missing standby (rc $rc)"
ok "on the promoted server, writes wait for a standby it does not have"

log_shows_within 30 "$STANDBY_LOG" "$mark" "idempotency: created partition keys_p.*(rows: [1-9]" ||
  fail "the worker on the promoted server moved no rows within 30 s"
ok "the launcher started at promotion and its pass moved rows out of the default partition"
end=$((SECONDS + 5))
rounds=0
while ((SECONDS < end)); do
  i=$((rounds % 3 + 1))
  expect_b "replay of done-$i" \
    "SELECT outcome, status_code FROM idempotency.reserve('pm', 'done-$i')" "replay 200"
  expect_b "lookup of done-$i" "SELECT state FROM idempotency.lookup('pm', 'done-$i')" "completed"
  expect_b "SELECT of the keys" \
    "SELECT count(*) FROM idempotency.keys WHERE scope = 'pm' AND key <> 'write-probe'" "8"
  rounds=$((rounds + 1))
  sleep 0.3
done
ok "$rounds rounds of replay, lookup and SELECT answered on the promoted server"
default_empty() { [[ $(in_default bounded "$BOUND") == 0 ]]; }
poll 60 "no key left in the default partition" default_empty
# The outbox after the failover (PostgreSQL 15): the slot stayed on the old primary.
err=$(bounded "$BOUND" -c "\\set VERBOSITY sqlstate" \
  -c "SELECT count(*) FROM pg_logical_slot_get_changes('billing', NULL, NULL)" 2>&1 || true)
[[ $err == "ERROR:  42704" ]] || fail "reading the old slot on the promoted server: $err"
ok "the consumer's slot does not exist on the promoted server (42704)"
# The documented recovery: the operator lets writes through (as pg_auto_failover does in
# wait_primary), the consumer creates its slot again and starts a new accept partition.
bounded "$BOUND" -c "ALTER SYSTEM SET synchronous_standby_names = ''" -c "SELECT pg_reload_conf()" >/dev/null
commits() { bounded 3 -c "SELECT txid_current()" >/dev/null 2>&1; } # a commit record
poll --try 60 commits || fail "writes still wait for a standby after synchronous_standby_names = ''"
bounded "$BOUND" -c "SELECT pg_create_logical_replication_slot('billing', 'idempotency')" >/dev/null
bounded "$BOUND" -c "SELECT idempotency.emit('o', jsonb_build_object('n', 6))" >/dev/null
out=$(bounded "$BOUND" -c "SELECT data::json->'payload'->>'n', data::json->>'key' FROM pg_logical_slot_get_changes('billing', NULL, NULL)")
[[ $(cut -d'|' -f1 <<<"$out" | tr '\n' ' ') == "6 " ]] ||
  fail "the new slot delivered '$out', expected message 6 only"
ok "the new slot delivers what is emitted after its creation (6); 4 and 5 are not delivered"
expect_b "the new message is accepted in the new partition" \
  "SELECT idempotency.accept('billing', 'timeline-2', '$(cut -d'|' -f2 <<<"$out")'::uuid)" "t"
while read -r key; do
  expect_b "an applied message is refused again" \
    "SELECT idempotency.accept('billing', 'timeline-1', '$key'::uuid)" "f"
done <"$KEYS"
ok "the messages applied before the failover are refused by their partition's watermark"

echo "$CHECKS checks passed"
echo "PASS"
