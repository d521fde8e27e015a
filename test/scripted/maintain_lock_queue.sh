#!/usr/bin/env bash
# A key call does not queue behind maintain() while maintain() waits for the exclusive lock of
# idempotency.keys that dropping an expired partition needs. A transaction holding a key (its
# work not done) keeps maintain() from that lock for as long as it runs; maintain(), given a
# long idempotency.maintenance_lock_timeout, keeps trying meanwhile. A reserve made then must
# answer while that transaction is still open and maintain() still trying (a lock request
# waiting in the queue would hold it until the transaction ended or the timeout passed); once
# the transaction commits, maintain() drops the partition.
# The extension on a cluster of its own; with MPGBIN, MPORT and MSOCK (test/managed/run.sh)
# the managed edition, installed with psql -f by its admin role (idem_dbadmin) in a database
# of its own on the managed suite's cluster, every session as that role.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
if [[ -n ${MPGBIN:-} ]]; then
  source "$(dirname "${BASH_SOURCE[0]}")/lib/prelude.sh" none
  PGBIN=$MPGBIN CLUSTER_PORT=$MPORT CLUSTER_SOCK=$MSOCK ROLE=idem_dbadmin DB=lock_queue
  q() { "$PGBIN/psql" -X -v ON_ERROR_STOP=1 -h "$CLUSTER_SOCK" -p "$CLUSTER_PORT" -U postgres -d "$DB" -qAt "$@"; }
  drop_db() { q -d postgres -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null; }
  on_exit drop_db
  q -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" \
    -c "CREATE DATABASE $DB OWNER $ROLE" \
    -c "ALTER DATABASE $DB SET idempotency.partition_width = '1d'" \
    -c "ALTER DATABASE $DB SET idempotency.premake = 1"
  "$PGBIN/psql" -X -v ON_ERROR_STOP=1 -h "$CLUSTER_SOCK" -p "$CLUSTER_PORT" -U "$ROLE" -d "$DB" -q -1 \
    -f "$IDEM_ROOT/editions/managed/idempotency--$(sed -n "s/^default_version = '\(.*\)'$/\1/p" \
      "$IDEM_ROOT/idempotency.control").sql" >/dev/null
  # as the admin role, which owns the key table (maintain() drops the partitions it may)
  qo() { "$PGBIN/psql" -X -v ON_ERROR_STOP=1 -h "$CLUSTER_SOCK" -p "$CLUSTER_PORT" -U "$ROLE" -d "$DB" -qAt "$@"; }
else
  cluster_setup test-cluster/maintain-lock-queue 54517
  source "$(dirname "${BASH_SOURCE[0]}")/lib/prelude.sh" cluster
  ROLE=postgres DB=postgres
  cluster_init "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" \
    "idempotency.partition_width = '1d'" "idempotency.premake = 1"
  cluster_start "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK"
  q -c "CREATE EXTENSION idempotency"
  qo() { q "$@"; }
fi
WORK=$(mktemp -d /tmp/idem-maintain-lock-queue.XXXXXX)
chmod 777 "$WORK"

# bg NAME OUT SQL...: a session (application_name NAME) running the statements in the
# background, its output in OUT.
bg() {
  local name=$1 out=$2
  shift 2
  local args=()
  for s in "$@"; do args+=(-c "$s"); done
  PGAPPNAME=$name "$PGBIN/psql" -X -qAt -v ON_ERROR_STOP=1 -h "$CLUSTER_SOCK" \
    -p "$CLUSTER_PORT" -U "$ROLE" -d "$DB" "${args[@]}" >"$out" 2>&1 &
  BG+=("$!")
  LAST_BG=$!
}
running() { kill -0 "$1" 2>/dev/null; }

qo -c "SELECT count(*) FROM idempotency.maintain()" >/dev/null
# Yesterday's keys: a partition whose range has passed, with a row in it.
qo -c "CREATE TABLE idempotency.keys_expired PARTITION OF idempotency.keys
        FOR VALUES FROM (date_trunc('day', now()) - interval '2 days')
                     TO (date_trunc('day', now()) - interval '1 day')" \
  -c "INSERT INTO idempotency.keys_expired (scope, key, state, attempt, first_seen_at, expires_at)
        VALUES ('old', 'k', 'completed', 1, now() - interval '3 days',
                date_trunc('day', now()) - interval '36 hours')"

# The gate: an advisory lock the holder waits for inside its transaction.
bg gate "$WORK/gate.out" "SELECT pg_advisory_lock(61)" "SELECT pg_sleep(600)"
poll 60 "the gate holds its lock" sql_true \
  "SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND objid = 61 AND granted)"
# The holder: a key reserved, the work (waiting for the gate) under way.
bg holder "$WORK/holder.out" "BEGIN" "SELECT (idempotency.reserve('held', 'k1')).outcome" \
  "SELECT pg_advisory_lock_shared(61)" "COMMIT"
holder=$LAST_BG
poll 60 "the holder's transaction holds its key" sql_true \
  "SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND objid = 61 AND NOT granted)"

bg maintainer "$WORK/maintain.out" "SET idempotency.maintenance_lock_timeout = '60s'" \
  "SELECT action || ' ' || coalesce(partition, '') FROM idempotency.maintain()"
maintainer=$LAST_BG
poll 60 "maintain() asks for the exclusive lock of idempotency.keys" sql_true \
  "SELECT EXISTS (SELECT FROM pg_locks l JOIN pg_stat_activity a USING (pid)
           WHERE a.application_name = 'maintainer' AND l.relation = 'idempotency.keys'::regclass
             AND l.mode = 'AccessExclusiveLock' AND NOT l.granted)"

# A key call now: it answers while the holder is still open and maintain() still trying.
bg caller "$WORK/caller.out" "SELECT (idempotency.reserve('other', 'k2')).outcome"
caller=$LAST_BG
poll 120 "a reserve made meanwhile ends" eval '! running '"$caller"
running "$holder" || fail "the holder's transaction ended before the reserve: $(cat "$WORK/holder.out")"
running "$maintainer" || fail "maintain() returned before the reserve ended: $(cat "$WORK/maintain.out")"
passed "the reserve ended while the holder was open and maintain() was still trying"
wait "$caller" || fail "the reserve failed: $(cat "$WORK/caller.out")"
expect "the reserve's outcome" "$(cat "$WORK/caller.out")" "new"

# The holder's work ends: maintain() gets its lock and drops the expired partition.
q -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'gate'" >/dev/null
wait "$holder" || fail "the holder failed: $(cat "$WORK/holder.out")"
wait "$maintainer" || fail "maintain() failed: $(cat "$WORK/maintain.out")"
grep -qx "dropped keys_expired" "$WORK/maintain.out" ||
  fail "maintain() did not drop keys_expired: $(cat "$WORK/maintain.out")"
passed "maintain() dropped the expired partition once the holder committed"
expect "keys of both calls" "$(q -c "SELECT string_agg(scope || '/' || key, ' ' ORDER BY scope)
  FROM idempotency.keys")" "held/k1 other/k2"
echo "maintain_lock_queue: $CHECKS checks passed"
