#!/usr/bin/env bash
# The direct storage path writes heap and index tuples itself: checked the way PostgreSQL
# checks its own access methods. A primary with wal_consistency_checking = 'all' (every WAL
# record carries a full image of each page it touches, and redo compares the page it rebuilt
# with that image, FATAL "inconsistent page found" on any difference) streams to a hot
# standby, under a load that reaches every write path: claims and completes, fails, recovery
# points, forgets, takeovers of lapsed leases, and the worker creating, filling (rows moved
# out of the default partition) and dropping 1-second partitions every second. The primary
# is stopped -m immediate in the middle (its crash recovery replays the same checks), started
# again, and the load goes on. Then: no inconsistent page on either server, amcheck finds
# nothing (verify_heapam and bt_index_parent_check with heapallindexed on the primary,
# bt_index_check with heapallindexed on the standby), and both servers have the same keys.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
cluster_setup test-cluster/wal-consistency 54479
source "$(dirname "${BASH_SOURCE[0]}")/lib/primary_standby.sh"
LOAD_SECONDS=${IDEM_WAL_CONSISTENCY_SECONDS:-15} # of load after the crash
WORK=$(mktemp -d /tmp/idem-wal-consistency.XXXXXX)
chmod 0755 "$WORK"

rm -f "$PRIMARY_LOG" # its lines are checked: only this run's (the standby's goes with its directory)
cluster_init "$PRIMARY_DATA" "$PRIMARY_PORT" "$PRIMARY_SOCK" \
  "wal_consistency_checking = 'all'" "fsync = off" \
  "idempotency.database = 'postgres'" "idempotency.maintenance_interval = '1s'" \
  "idempotency.partition_width = '1s'" "idempotency.premake = 3" \
  "idempotency.maintenance_lock_timeout = '200ms'"
cluster_start "$PRIMARY_DATA"
[[ $(primary -c "SHOW idempotency.direct_storage") == on ]] ||
  fail "idempotency.direct_storage is off: the direct path would not be tested"
primary >/dev/null <<'SQL'
CREATE EXTENSION idempotency;
CREATE EXTENSION amcheck;
-- A claim never expires under its holder: a takeover near the end of the retention window
-- moves expires_at past its lease. A complete or fail refused with 55000 is recorded here,
-- and the test fails on any.
CREATE TABLE wc_expired_claims (key text, at timestamptz DEFAULT clock_timestamp());
-- One request of the load, by path (1..10). Keys repeat (3000 of them): replays, claims
-- still held, and claims whose 100 ms lease lapsed, taken over with the next attempt.
CREATE PROCEDURE wc_step(k int, path int) LANGUAGE plpgsql AS $$
DECLARE
  key text := 'k' || k;
  r record;
BEGIN
  IF path <= 4 THEN -- claim and complete in one transaction
    SELECT * INTO r FROM idempotency.reserve('wc', key, lock_ttl => '1 second',
                                             retention => '4 seconds');
    IF r.outcome = 'new' THEN
      BEGIN
        PERFORM idempotency.complete('wc', key, 201, jsonb_build_object('k', k), r.attempt);
      EXCEPTION WHEN object_not_in_prerequisite_state THEN
        INSERT INTO wc_expired_claims (key) VALUES (key);
      END;
    END IF;
  ELSIF path = 5 THEN -- claim and fail
    SELECT * INTO r FROM idempotency.reserve('wc', key, lock_ttl => '1 second',
                                             retention => '4 seconds');
    IF r.outcome = 'new' THEN
      BEGIN
        PERFORM idempotency.fail('wc', key, '{"error": "transient"}', r.attempt);
      EXCEPTION WHEN object_not_in_prerequisite_state THEN
        INSERT INTO wc_expired_claims (key) VALUES (key);
      END;
    END IF;
  ELSIF path <= 7 THEN -- a committed claim with a short lease, then a recovery point
    SELECT * INTO r FROM idempotency.reserve('wc', key, lock_ttl => '100 milliseconds',
                                             retention => '4 seconds');
    COMMIT;
    IF r.outcome = 'new' THEN
      BEGIN
        PERFORM idempotency.checkpoint('wc', key, 'step-' || r.attempt, r.attempt);
      EXCEPTION WHEN others THEN
        NULL; -- taken over meanwhile (the lease is short): the stale attempt is refused
      END;
    END IF;
  ELSIF path = 8 THEN
    PERFORM idempotency.forget('wc', key);
  ELSE -- keys far ahead: the default partition, whose rows the worker moves out
    PERFORM idempotency.reserve('wc', 'far-' || key, retention => make_interval(hours => 1 + k % 5));
  END IF;
END $$;
SQL
cat >"$WORK/load.pgbench" <<'SQL'
\set k random(1, 3000)
\set path random(1, 10)
CALL wc_step(:k, :path);
SQL
# A slot keeps the WAL the standby has not replayed yet (redo with the checks is slow).
STANDBY_SLOT=standby make_standby "hot_standby = on" "max_standby_streaming_delay = -1"
streaming() { [[ $(primary -c "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'") == 1 ]]; }
poll 60 "the standby streams" streaming

load() { # load LOG SECONDS
  "$PGBIN/pgbench" -n -h "$PRIMARY_SOCK" -p "$PRIMARY_PORT" -U postgres -c 3 -j 2 -T "$2" \
    -f "$WORK/load.pgbench" postgres >"$1" 2>&1
}
# The load, until the worker has created, filled and dropped partitions under it; then the
# primary is stopped -m immediate in the middle of it.
mark=$(log_mark "$PRIMARY_LOG")
load "$WORK/load-1.log" 900 &
bench=$!
BG+=("$bench")
in_log() { [[ $(log_count "$PRIMARY_LOG" "$mark" "$1") -ge $2 ]]; }
worker_busy() {
  in_log "idempotency: dropped partition" 2 && in_log "idempotency: created partition" 2 &&
    in_log "idempotency: created partition .*(rows: [1-9]" 1
}
poll 120 "the worker created, filled and dropped partitions under the load" worker_busy
cluster_crash "$PRIMARY_DATA"
wait "$bench" && fail "the load went on although the primary was stopped"
grep -q "aborted" "$WORK/load-1.log" || fail "the load was not cut off: $(tail -n 5 "$WORK/load-1.log")"
tx=$(sed -nE 's/^number of transactions actually processed: ([0-9]+).*/\1/p' "$WORK/load-1.log")
passed "the primary stopped -m immediate under the load (${tx:-?} requests before)"
cluster_start "$PRIMARY_DATA" ||
  fail "the primary did not come back from the crash (redo stops at an inconsistent page)"
grep -q "database system was interrupted" "$PRIMARY_LOG" || fail "no crash recovery on the primary"
poll 60 "the standby streams again" streaming
mark=$(log_mark "$PRIMARY_LOG")
load "$WORK/load-2.log" "$LOAD_SECONDS" || { cat "$WORK/load-2.log"; fail "the load after the restart failed"; }
grep -q "aborted" "$WORK/load-2.log" && fail "clients aborted after the restart: $(grep aborted "$WORK/load-2.log")"
tx=$(sed -nE 's/^number of transactions actually processed: ([0-9]+).*/\1/p' "$WORK/load-2.log")
in_log "idempotency: dropped partition" 1 || fail "no partition dropped after the restart"
passed "$tx more requests after the restart, partitions created and dropped meanwhile"
expect "no claim expired before its holder completed or failed it" \
  "$(primary -c "SELECT count(*) FROM wc_expired_claims")" 0

# Nothing changes from here on: the primary's keys table held in ACCESS SHARE mode (the
# worker's DDL needs more, and skips its steps after its lock_timeout), then a CHECKPOINT and
# the standby caught up with the primary.
"$PGBIN/psql" -X -h "$PRIMARY_SOCK" -p "$PRIMARY_PORT" -U postgres -d postgres -qAt \
  -c "BEGIN" -c "LOCK TABLE idempotency.keys IN ACCESS SHARE MODE" \
  -c "SELECT pg_sleep(600) /* freeze */" >/dev/null 2>&1 &
BG+=("$!")
frozen() {
  [[ $(primary -c "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%/* freeze */%'
                   AND state = 'active' AND pid <> pg_backend_pid()") == 1 ]]
}
poll --try 60 frozen || fail "the keys table could not be held"
primary -c "CHECKPOINT"
lsn=$(primary -c "SELECT pg_current_wal_lsn()")
caught_up() { [[ $(standby -c "SELECT pg_last_wal_replay_lsn() >= '$lsn'::pg_lsn") == t ]]; }
poll 300 "the standby replayed everything the primary wrote" caught_up

for log in "$PRIMARY_LOG" "$STANDBY_LOG"; do
  if grep -E "inconsistent page|PANIC|terminated by signal" "$log"; then
    fail "$(basename "$(dirname "$log")"): redo found a page that differs from what was logged"
  fi
done
[[ $(standby -c "SELECT pg_is_in_recovery()") == t ]] || fail "the standby left recovery"
passed "no inconsistent page in the redo of the standby and of the primary's crash recovery"

# amcheck on every table and btree index of the extension's schema (partitions, their TOAST).
RELATIONS="SELECT c.oid::regclass FROM pg_class c
  WHERE c.relnamespace = 'idempotency'::regnamespace AND c.relkind IN ('r', 'm')"
INDEXES="SELECT c.oid::regclass FROM pg_class c JOIN pg_am a ON a.oid = c.relam
  WHERE c.relnamespace = 'idempotency'::regnamespace AND c.relkind = 'i' AND a.amname = 'btree'"
tables=$(primary -c "SELECT count(*) FROM ($RELATIONS) r")
indexes=$(primary -c "SELECT count(*) FROM ($INDEXES) i")
((tables >= 3 && indexes >= 3)) || fail "only $tables tables and $indexes indexes to check"
out=$(primary -c "SELECT r.oid || ' ' || v.blkno || ' ' || v.msg
                  FROM ($RELATIONS) r(oid), LATERAL verify_heapam(r.oid) v")
[[ -z $out ]] || fail "verify_heapam on the primary: $out"
passed "verify_heapam: $tables tables of the primary without a fault"
primary -c "SELECT bt_index_parent_check(i.oid, heapallindexed => true) FROM ($INDEXES) i(oid)" >/dev/null ||
  fail "bt_index_parent_check on the primary"
passed "bt_index_parent_check (heapallindexed): $indexes indexes of the primary agree with their heaps"
standby -c "SELECT bt_index_check(i.oid, heapallindexed => true) FROM ($INDEXES) i(oid)" >/dev/null ||
  fail "bt_index_check on the standby"
passed "bt_index_check (heapallindexed): $indexes indexes of the standby agree with their heaps"

KEYS_SQL="SELECT count(*) || ' ' || md5(coalesce(string_agg(concat_ws('|', scope, key, state,
    attempt, status_code, response, recovery_point, last_error, locked_until, expires_at,
    tableoid::regclass), E'\\n' ORDER BY scope, key, expires_at), ''))
  FROM idempotency.keys"
on_primary=$(primary -c "$KEYS_SQL")
on_standby=$(standby -c "$KEYS_SQL")
[[ ${on_primary%% *} -gt 100 ]] || fail "only ${on_primary%% *} keys"
expect "the standby has the same keys as the primary (count, digest)" "$on_standby" "$on_primary"
echo "wal_consistency: $CHECKS checks passed"
