#!/usr/bin/env bash
# idempotency on a Citus cluster (a coordinator, two workers): distribute() and its errors,
# one request = one single-shard transaction (no 2PC, the key row in the tenant's shard on its
# worker, nothing in any shell table), every outcome of the key lifecycle through the
# coordinator, two coordinator sessions on one key, maintain() on the distributed table, the
# documented behaviour of a request that writes another tenant's rows, and a worker session
# across shard moves.
set -euo pipefail
CITUS_NAME=citus-semantics CITUS_PORT=54460
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
citus_cluster_start || fail "the Citus cluster did not start"
state() { coord -c "\\set VERBOSITY sqlstate" "$@" 2>&1 || true; }

# --- distribute(): bad input, then the real call ---------------------------------------------
coord >/dev/null <<'SQL'
CREATE TABLE plain (tenant text);
CREATE TABLE ints (tenant int); SELECT create_distributed_table('ints', 'tenant');
CREATE TABLE refs (tenant text); SELECT create_reference_table('refs');
CREATE TABLE orders (tenant text NOT NULL, id bigserial, key text NOT NULL, amount int,
                     PRIMARY KEY (tenant, id));
SELECT create_distributed_table('orders', 'tenant');
SELECT * FROM idempotency.maintain();
SQL
expect "distribute on a table that is not distributed" \
  "$(state -c "SELECT idempotency.distribute('plain')")" "ERROR:  42809"
expect "distribute on a table distributed by an integer" \
  "$(state -c "SELECT idempotency.distribute('ints')")" "ERROR:  42804"
expect "distribute on a reference table" \
  "$(state -c "SELECT idempotency.distribute('refs')")" "ERROR:  42809"
expect "distribute on a worker" \
  "$(w1 -c "\\set VERBOSITY sqlstate" -c "SELECT idempotency.distribute('orders')" 2>&1 || true)" \
  "ERROR:  55000"
w2 -c "SET citus.enable_ddl_propagation = off" -c "DROP EXTENSION idempotency" >/dev/null
msg=$(coord -c "SELECT idempotency.distribute('orders')" 2>&1 || true)
[[ $msg == *'extension "idempotency" is missing on a worker'*"$W2_PORT (not installed)"* ]] ||
  fail "distribute with the extension missing on a worker: $msg"
expect "distribute with the extension missing on a worker names it" ok ok
w2 -c "SET citus.enable_ddl_propagation = off" -c "CREATE EXTENSION idempotency" >/dev/null
coord -c "CREATE DATABASE nocitus" >/dev/null
expect "distribute without Citus" \
  "$(citus_node coord -qAt -d nocitus -c "CREATE EXTENSION idempotency" \
    -c "\\set VERBOSITY sqlstate" -c "SELECT idempotency.distribute('pg_class')" 2>&1 || true)" \
  "ERROR:  55000"
coord -c "SELECT idempotency.distribute(colocate_with => 'public.orders')" >/dev/null
expect "distribute twice" "$(state -c "SELECT idempotency.distribute('orders')")" "ERROR:  55000"
expect "keys co-located with orders" \
  "$(coord -c "SELECT count(DISTINCT colocationid) FROM pg_dist_partition
               WHERE logicalrelid IN ('orders'::regclass, 'idempotency.keys'::regclass)")" "1"
expect "time partitions kept and distributed" \
  "$(coord -c "SELECT count(*) FROM pg_partition_tree('idempotency.keys') t
               JOIN pg_dist_partition p ON p.logicalrelid = t.relid WHERE t.isleaf")" "5"
expect "key functions delegated by scope" \
  "$(coord -c "SELECT count(*) FROM pg_dist_object o JOIN pg_proc f ON f.oid = o.objid
               WHERE o.classid = 'pg_proc'::regclass AND f.pronamespace = 'idempotency'::regnamespace
               AND o.distribution_argument_index = 0 AND o.force_delegation")" "7"

# --- one request, one shard ------------------------------------------------------------------
t7=$(node_of tenant-7)
t7_port=$W1_PORT
[[ $t7 == w2 ]] && t7_port=$W2_PORT
log=$(coord 2>&1 <<'SQL'
SET citus.log_remote_commands = on;
SET client_min_messages = notice;
BEGIN;
SELECT outcome FROM idempotency.reserve('tenant-7', 'order-1', idempotency.fingerprint('{"n": 1}'::jsonb));
INSERT INTO orders (tenant, key, amount) VALUES ('tenant-7', 'order-1', 10);
SELECT idempotency.complete('tenant-7', 'order-1', 201, '{"id": 1}');
COMMIT;
SQL
)
echo "$log" | sed 's/^/    /'
expect "request: reserve answered new" "$(echo "$log" | grep -cx new)" "1"
expect "request: remote commands went to one server" \
  "$(echo "$log" | grep -o 'on server [^ ]*' | sort -u)" "on server postgres@127.0.0.1:$t7_port"
expect "request: one connection" "$(echo "$log" | grep -o 'connectionId: [0-9]*' | sort -u | wc -l)" "1"
expect "request: no two-phase commit" "$(echo "$log" | grep -c 'PREPARE TRANSACTION' || true)" "0"
expect "request: committed with a plain COMMIT" "$(echo "$log" | grep -c 'issuing COMMIT$')" "1"
shard=$(coord -c "SELECT get_shard_id_for_distribution_column('idempotency.keys', 'tenant-7')")
expect "key row in tenant-7's shard on $t7" \
  "$(citus_node "$t7" -qAt -c "SELECT state FROM idempotency.keys_$shard
                              WHERE scope = 'tenant-7' AND key = 'order-1'")" "completed"
# The claim stays in the worker's memory until complete, which writes the row once: no
# second version of it (an update would leave the row at (0,2) of the fresh partition).
expect "request: the key row written once, by complete" \
  "$(citus_node "$t7" -qAt -c "SELECT ctid FROM idempotency.keys_$shard
                              WHERE scope = 'tenant-7' AND key = 'order-1'")" "(0,1)"
# A claim rolled back with its savepoint (Citus sends the savepoints to the worker) is never
# written; one left in memory at COMMIT is written then, into the shard.
coord >/dev/null <<'SQL'
BEGIN;
SAVEPOINT a;
SELECT outcome FROM idempotency.reserve('tenant-7', 'sp-1');
ROLLBACK TO SAVEPOINT a;
SELECT outcome FROM idempotency.reserve('tenant-7', 'sp-2');
COMMIT;
SQL
expect "savepoint: the rolled-back claim is not written, the other one is at COMMIT" \
  "$(citus_node "$t7" -qAt -c "SELECT string_agg(key || ' ' || state, ', ' ORDER BY key)
                              FROM idempotency.keys_$shard WHERE key LIKE 'sp-%'")" \
  "sp-2 processing"
for n in coord w1 w2; do
  expect "no bytes in the shell tables on $n" "$(shell_bytes "$n")" "0"
done
expect "no prepared transaction left" "$(prepared_xacts)" "0"

# --- the key lifecycle through the coordinator ----------------------------------------------
fp1="idempotency.fingerprint('{\"n\": 1}'::jsonb)"
expect "replay" "$(coord -F ' ' -c "SELECT outcome, status_code, response
  FROM idempotency.reserve('tenant-7', 'order-1', $fp1)")" 'replay 201 {"id": 1}'
expect "mismatch" "$(coord -c "SELECT outcome
  FROM idempotency.reserve('tenant-7', 'order-1', idempotency.fingerprint('{\"n\": 2}'::jsonb))")" \
  "mismatch"
expect "lookup" "$(coord -F ' ' -c "SELECT state, status_code FROM idempotency.lookup('tenant-7', 'order-1')")" \
  "completed 201"
expect "too_old (a ULID from 2016)" \
  "$(coord -c "SELECT outcome FROM idempotency.reserve('tenant-3', '01ARZ3NDEKTSV4RRFFQ69G5FAV')")" \
  "too_old"
# fail releases the claim; the next reserve is attempt 2.
coord -c "SELECT outcome FROM idempotency.reserve('tenant-3', 'pay-1')" \
  -c "SELECT idempotency.fail('tenant-3', 'pay-1', '{\"e\": 503}')" >/dev/null
expect "fail then reserve: new, attempt 2" \
  "$(coord -F ' ' -c "SELECT outcome, attempt FROM idempotency.reserve('tenant-3', 'pay-1')")" "new 2"
# A committed claim with a live lease: in_progress for another session.
coord -c "SELECT outcome FROM idempotency.reserve('tenant-5', 'ship-1', lock_ttl => '5 seconds')" \
  -c "SELECT idempotency.checkpoint('tenant-5', 'ship-1', 'label-printed')" >/dev/null
expect "in_progress while the lease is live" \
  "$(coord -c "SELECT outcome FROM idempotency.reserve('tenant-5', 'ship-1')")" "in_progress"
lapsed() {
  [[ $(coord -c "SELECT locked_until < clock_timestamp() FROM idempotency.lookup('tenant-5', 'ship-1')") == t ]]
}
poll --try 60 lapsed || fail "the 5-second lease did not lapse"
expect "takeover after the lease lapsed: attempt 2 and the recovery point" \
  "$(coord -F ' ' -c "SELECT outcome, attempt, recovery_point
                      FROM idempotency.reserve('tenant-5', 'ship-1')")" "new 2 label-printed"
expect "the stale holder's complete is fenced" \
  "$(state -c "SELECT idempotency.complete('tenant-5', 'ship-1', 200, '{}', attempt => 1)")" \
  "ERROR:  IK001"
coord -c "SELECT idempotency.complete('tenant-5', 'ship-1', 200, '{}', attempt => 2)" >/dev/null
expect "forget" "$(coord -c "SELECT idempotency.forget('tenant-5', 'ship-1')")" "t"
expect "after forget: new" \
  "$(coord -c "SELECT outcome FROM idempotency.reserve('tenant-5', 'ship-1')")" "new"
# claim_once (a key per message): delegated like reserve, its row in the scope's shard.
expect "claim_once: the first delivery is applied" \
  "$(coord -c "SELECT idempotency.claim_once('tenant-7', 'msg-1')")" "t"
expect "claim_once: the redelivery is not" \
  "$(coord -c "SELECT idempotency.claim_once('tenant-7', 'msg-1')")" "f"
expect "claim_once: its row is completed in tenant-7's shard on $t7" \
  "$(citus_node "$t7" -qAt -c "SELECT state FROM idempotency.keys_$shard
                              WHERE scope = 'tenant-7' AND key = 'msg-1'")" "completed"
# Retention: a record past its window (which counts from the end of the lease) is absent.
coord -c "SELECT outcome FROM idempotency.reserve('tenant-8', 'short', lock_ttl => '1 second',
                                                  retention => '1 second')" \
  -c "SELECT idempotency.complete('tenant-8', 'short', 200, '{}')" >/dev/null
expired() { [[ $(coord -c "SELECT count(*) FROM idempotency.lookup('tenant-8', 'short')") == 0 ]]; }
poll --try 60 expired || fail "the record did not expire after its 1-second retention"
expect "past retention: new" \
  "$(coord -c "SELECT outcome FROM idempotency.reserve('tenant-8', 'short')")" "new"
# A takeover near the end of the window moves expires_at past its lease (the row moves to a
# later partition in the scope's shard): the new holder's complete is accepted, then replayed.
coord -c "SELECT outcome FROM idempotency.reserve('tenant-8', 'late', lock_ttl => '1 second',
                                                  retention => '5 seconds')" >/dev/null
late_lapsed() {
  [[ $(coord -c "SELECT locked_until < clock_timestamp() FROM idempotency.lookup('tenant-8', 'late')") == t ]]
}
poll --try 60 late_lapsed || fail "the 1-second lease did not lapse"
expect "takeover near the end of the window: attempt 2, expiring an hour after its lease" \
  "$(coord -c "SELECT outcome || ' ' || attempt || ' ' || (expires_at = locked_until + interval '1 hour')
                FROM idempotency.reserve('tenant-8', 'late', lock_ttl => '10 minutes',
                                         retention => '1 hour')")" "new 2 true"
expect "takeover: one row in tenant-8's shard, expiring after the lease" \
  "$(citus_node "$(node_of tenant-8)" -qAt -c "SELECT count(*) || ' ' || bool_and(expires_at > now() + interval '1 hour')
      FROM idempotency.keys_$(coord -c "SELECT get_shard_id_for_distribution_column('idempotency.keys', 'tenant-8')")
      WHERE scope = 'tenant-8' AND key = 'late'")" "1 true"
coord -c "SELECT idempotency.complete('tenant-8', 'late', 201, '{}', attempt => 2)" >/dev/null ||
  fail "the new holder's complete was refused"
expect "takeover: the answer is replayed" \
  "$(coord -c "SELECT outcome FROM idempotency.reserve('tenant-8', 'late')")" "replay"

# --- two coordinator sessions on one key ------------------------------------------------------
# Session A holds the key in an open transaction until a gate opens (a session holding an
# advisory lock A waits for ends); B, on another connection, gets in_progress without
# waiting, and with wait => '30 s' (waiting before the gate opens) the replay of A's result.
outa=$(mktemp)
coord -c "SELECT pg_advisory_lock(4242)" -c "SELECT pg_sleep(300) /* gate */" >/dev/null 2>&1 &
gate=$!
poll --try 60 sql_true "SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242 AND granted)" ||
  fail "the gate session does not hold its lock"
coord -c "BEGIN" -c "SELECT outcome FROM idempotency.reserve('tenant-4', 'race')" \
  -c "SELECT pg_advisory_lock(4242) /* A at the gate */" \
  -c "INSERT INTO orders (tenant, key, amount) VALUES ('tenant-4', 'race', 1)" \
  -c "SELECT idempotency.complete('tenant-4', 'race', 201, '{\"by\": \"a\"}')" -c "COMMIT" \
  >"$outa" 2>&1 &
pida=$!
poll --try 60 sql_true "SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242 AND NOT granted)" ||
  fail "session A did not reach the gate with its claim"
expect "second session: in_progress while A holds the key" \
  "$(coord -c "SELECT outcome FROM idempotency.reserve('tenant-4', 'race')")" "in_progress"
expect "second session from a worker: in_progress too (the lock is on the shard's node)" \
  "$(w1 -c "SELECT outcome FROM idempotency.reserve('tenant-4', 'race')")" "in_progress"
outb=$(mktemp)
coord -F ' ' -c "SELECT outcome, response->>'by'
     FROM idempotency.reserve('tenant-4', 'race', wait => '30 seconds') /* B waits */" >"$outb" 2>&1 &
pidb=$!
poll --try 60 sql_true "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE state = 'active'
                        AND query LIKE '%/* B waits */%' AND pid <> pg_backend_pid())" ||
  fail "the waiting reserve is not under way"
expect "it waits for A's commit" "$(cat "$outb")" ""
coord -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE '%/* gate */%'
          AND pid <> pg_backend_pid()" >/dev/null # the gate opens
wait "$gate" || true
wait "$pidb" || fail "the waiting reserve failed: $(cat "$outb")"
expect "second session with wait: A's result replayed" "$(cat "$outb")" "replay a"
rm -f "$outb"
wait "$pida" || fail "session A failed: $(cat "$outa")"
expect "one business row for the raced key" \
  "$(coord -c "SELECT count(*) FROM orders WHERE tenant = 'tenant-4' AND key = 'race'")" "1"
rm -f "$outa"

# --- a call Citus does not delegate ------------------------------------------------------------
expect "reserve inside a CTE (not delegated) is refused" \
  "$(state -c "WITH r AS (SELECT * FROM idempotency.reserve('tenant-7', 'cte')) SELECT outcome FROM r")" \
  "ERROR:  0A000"

# --- another tenant's rows in the same transaction: atomic, through Citus's 2PC ----------------
t3=$(node_of tenant-3)
[[ $t3 != "$t7" ]] || fail "tenant-3 and tenant-7 are on the same worker; the test needs two"
log=$(coord 2>&1 <<'SQL'
SET citus.log_remote_commands = on;
BEGIN;
SELECT outcome FROM idempotency.reserve('tenant-7', 'cross-1');
INSERT INTO orders (tenant, key, amount) VALUES ('tenant-3', 'cross-1', 10);
SELECT idempotency.complete('tenant-7', 'cross-1', 201, '{}');
COMMIT;
SQL
)
expect "cross-tenant request: two-phase commit" \
  "$(echo "$log" | grep -c 'issuing PREPARE TRANSACTION')" "2"
expect "cross-tenant request: key completed" \
  "$(coord -c "SELECT state FROM idempotency.lookup('tenant-7', 'cross-1')")" "completed"
expect "cross-tenant request: the row written" \
  "$(coord -c "SELECT count(*) FROM orders WHERE key = 'cross-1'")" "1"
coord -c "BEGIN" -c "SELECT outcome FROM idempotency.reserve('tenant-7', 'cross-2')" \
  -c "INSERT INTO orders (tenant, key, amount) VALUES ('tenant-3', 'cross-2', 10)" \
  -c "ROLLBACK" >/dev/null
expect "cross-tenant rollback: no key" \
  "$(coord -c "SELECT count(*) FROM idempotency.lookup('tenant-7', 'cross-2')")" "0"

# --- maintain() on the distributed table ------------------------------------------------------
expect "maintain() on a worker is skipped" \
  "$(w1 -c "SELECT action FROM idempotency.maintain()")" "skipped"
coord -c "CREATE TABLE idempotency.keys_p2020_01_01 PARTITION OF idempotency.keys
          FOR VALUES FROM ('2020-01-01') TO ('2020-01-02')" >/dev/null
shards_of() { # shards_of NODE PARTITION: shards of that partition on the node
  citus_node "$1" -qAt -c "SET citus.override_table_visibility = off" \
    -c "SELECT count(*) FROM pg_class WHERE relnamespace = 'idempotency'::regnamespace
        AND relname ~ '^$2_[0-9]+\$'"
}
[[ $(shards_of w1 keys_p2020_01_01) -gt 0 && $(shards_of w2 keys_p2020_01_01) -gt 0 ]] ||
  fail "the expired partition has no shards on the workers"
live_before=$(coord -c "SELECT count(*) FROM idempotency.keys")
out=$(coord -F ' ' -c "SELECT action, partition FROM idempotency.maintain()")
echo "$out" | sed 's/^/    /'
[[ $out == *"dropped keys_p2020_01_01"* ]] || fail "maintain() did not drop the expired partition"
expect "expired partition dropped on w1" "$(shards_of w1 keys_p2020_01_01)" "0"
expect "expired partition dropped on w2" "$(shards_of w2 keys_p2020_01_01)" "0"
expect "live keys stay" "$(coord -c "SELECT count(*) FROM idempotency.keys")" "$live_before"
coord -c "SET idempotency.premake = 6" -c "SELECT * FROM idempotency.maintain()" >/dev/null
last=$(coord -c "SELECT max(partition) FROM idempotency.partitions WHERE NOT is_default")
[[ $(shards_of w1 "$last") -gt 0 && $(shards_of w2 "$last") -gt 0 ]] ||
  fail "the newest partition $last has no shards on both workers"
expect "partitions created by maintain() have shards on both workers" ok ok
expect "completed keys still replay after maintenance" \
  "$(coord -c "SELECT outcome FROM idempotency.reserve('tenant-7', 'order-1', $fp1)")" "replay"
for n in coord w1 w2; do
  expect "still no bytes in the shell tables on $n" "$(shell_bytes "$n")" "0"
done
expect "no prepared transaction left" "$(prepared_xacts)" "0"

# --- a shard move: a backend sees the new placement ---------------------------------------------
# The key calls remember, per backend, where the key table's shards are until Citus
# invalidates that. One session on tenant-6's worker stays open while psql's \! moves the
# shard away and back (on the coordinator): before the move the call runs there; after it
# the session must refuse the call (not write into the old placement); after the move back
# it must run it in the new shard relation. The calls are in a CTE, which Citus does not
# delegate, so they run on the session's node.
shard6=$(coord -c "SELECT get_shard_id_for_distribution_column('idempotency.keys', 'tenant-6')")
if [[ $(node_of tenant-6) == w1 ]]; then
  home=w1 home_port=$W1_PORT away_port=$W2_PORT
else
  home=w2 home_port=$W2_PORT away_port=$W1_PORT
fi
move_to() { # the psql meta-command that moves tenant-6's shard from one port to the other
  echo "\\! '$PGBIN/psql' -X -qAt -v ON_ERROR_STOP=1 -h '$COORD_SOCK' -p $COORD_PORT -U postgres \
-d postgres -c \"SELECT citus_move_shard_placement($shard6, '127.0.0.1', $1, '127.0.0.1', $2, \
shard_transfer_mode => 'block_writes')\" >/dev/null || echo 'MOVE FAILED'"
}
cte() { echo "WITH r AS (SELECT * FROM idempotency.reserve('tenant-6', '$1')) SELECT outcome FROM r;"; }
moves_err=$(mktemp)
moves_out=$({
  echo "\\set VERBOSITY sqlstate"
  cte mv-1
  move_to "$home_port" "$away_port"
  cte mv-2
  move_to "$away_port" "$home_port"
  cte mv-3
} | citus_node "$home" -qAt -v ON_ERROR_STOP=0 2>"$moves_err")
expect "across the moves: new, refused, new" \
  "$moves_out|$(grep -c 'ERROR:  0A000' "$moves_err")|$(grep -vc 'ERROR:  0A000' "$moves_err")" \
  "new
new|1|0"
rm -f "$moves_err"
expect "after the moves: the claims before and after in tenant-6's shard, none in between" \
  "$(coord -c "SELECT string_agg(key || ' ' || state, ', ' ORDER BY key)
               FROM idempotency.keys WHERE scope = 'tenant-6' AND key LIKE 'mv-%'")" \
  "mv-1 processing, mv-3 processing"
expect "after the moves: the rows on $home" \
  "$(citus_node "$home" -qAt -c "SELECT count(*) FROM idempotency.keys_$shard6 WHERE key LIKE 'mv-%'")" "2"
expect "after the moves: through the coordinator" \
  "$(coord -c "SELECT outcome FROM idempotency.reserve('tenant-6', 'mv-1')")" "in_progress"
echo "$CHECKS checks passed"
