#!/usr/bin/env bash
# maintain() under faults: an allocation failure (std::bad_alloc) inside its partition planning,
# the C++ code that runs inside its PG_TRY, and an error in each of its steps (the lock, the
# purge of the default partition, a partition's creation, a drop, the record of the run). Each
# gives a clean ERROR, no backend crash, no lock left, the partitions and keys as they were,
# and the failed run in maintenance_runs once maintain() runs again.
set -euo pipefail
# shellcheck source=test/faults/lib.sh
source "$(dirname "$0")/lib.sh"
faults_cluster faults/maintain 54391

# Acknowledged keys (committed), an expired row in the default partition (a purge to do), an
# expired partition (a drop to do); premake partitions are still to be created.
q -c "SELECT idempotency.reserve('ack', 'k' || i), idempotency.complete('ack', 'k' || i, 200, '{}')
      FROM generate_series(1, 50) i" >/dev/null
q -c "INSERT INTO idempotency.keys (scope, key, state, attempt, first_seen_at, expires_at)
      VALUES ('old', 'o1', 'completed', 1, now() - '3 days'::interval, now() - '2 days'::interval)"
q -c "CREATE TABLE idempotency.keys_p2000_01_01 PARTITION OF idempotency.keys
      FOR VALUES FROM ('2000-01-01') TO ('2000-01-02')"
state_sql="SELECT (SELECT count(*) FROM pg_inherits WHERE inhparent = 'idempotency.keys'::regclass)
  || ' partitions, ' || (SELECT count(*) FROM idempotency.keys WHERE scope = 'ack' AND state = 'completed')
  || ' acknowledged, ' || (SELECT count(*) FROM idempotency.keys WHERE scope = 'old') || ' expired'"
before=$(q -c "$state_sql")
expect "the state before" "$before" "2 partitions, 50 acknowledged, 1 expired"

# point, error text psql shows (VERBOSITY=verbose: with the SQLSTATE)
cases=(
  "maintain-plan|ERROR:  53200: out of memory"
  "maintain-lock|ERROR:  XX000: error triggered for injection point idempotency-maintain-lock"
  "maintain-purge|ERROR:  XX000: error triggered for injection point idempotency-maintain-purge"
  "maintain-create|ERROR:  XX000: error triggered for injection point idempotency-maintain-create"
  "maintain-drop|ERROR:  XX000: error triggered for injection point idempotency-maintain-drop"
  "maintain-record|ERROR:  XX000: error triggered for injection point idempotency-maintain-record"
)
for c in "${cases[@]}"; do
  point=${c%%|*} want=${c#*|}
  attach "$point" error
  out=$(run_error "SELECT * FROM idempotency.maintain()")
  detach "$point"
  [[ $out == *"$want"* ]] || fail "$point: got '$out', want '$want'"
  passed "$point: a clean ERROR ($want)"
  expect "$point: partitions and keys as before" "$(q -c "$state_sql")" "$before"
  no_leftovers
  no_restart
done

# Everything detached: the run does its work, and first records the six failed runs.
q -c "SELECT * FROM idempotency.maintain()" >/dev/null
expect "the failed runs are recorded" "$(q -c "SELECT string_agg(error, ' | ' ORDER BY started_at)
  FROM idempotency.maintenance_runs WHERE result = 'failed'")" \
  "out of memory | $(for c in "${cases[@]:1}"; do printf 'error triggered for injection point idempotency-%s | ' "${c%%|*}"; done | sed 's/ | $//')"
expect "the last run is ok" "$(q -c "SELECT result FROM idempotency.maintenance_runs LIMIT 1")" ok
expect "the work is done: expired partition dropped, expired row purged, keys kept" \
  "$(q -c "SELECT (SELECT count(*) FROM pg_class WHERE relname = 'keys_p2000_01_01')
    || ' ' || (SELECT count(*) FROM idempotency.keys WHERE scope = 'old')
    || ' ' || (SELECT count(*) FROM idempotency.keys WHERE scope = 'ack' AND state = 'completed')
    || ' ' || (SELECT count(*) > 1 FROM pg_inherits WHERE inhparent = 'idempotency.keys'::regclass)")" \
  "0 0 50 true"
no_restart
echo "$CHECKS checks passed"
