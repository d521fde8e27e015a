#!/usr/bin/env bash
# Publishing everything: a publication FOR ALL TABLES WITH (publish_via_partition_root
# = true), and one FOR TABLES IN SCHEMA idempotency plus the business table, keep replicating
# while both servers run maintenance, the worker and maintain() alike. Both carry
# idempotency.maintenance_log, whose runs both servers number from 1: before the fix the
# subscriber's table sync and apply worker failed on "duplicate key value violates unique
# constraint maintenance_log_pkey" for ever, and every table stopped with it.
#   - the initial copy brings keys, a stream, watermarks and business rows, not the publisher's
#     maintenance history (the subscriber had runs of its own already);
#   - after maintain() on both sides (and the workers, every 1 and 2 seconds), new keys,
#     watermarks and business rows keep arriving, in both subscribed databases;
#   - the publisher's trims of its history (it keeps its last 100 runs) delete none of the
#     subscriber's own runs; no run of the publisher's reaches the subscriber; no apply or sync
#     error is counted and no duplicate key is logged;
#   - the same for a database installed at 0.2.0 on both sides (with history rows) and updated
#     with ALTER EXTENSION idempotency UPDATE, then published FOR ALL TABLES.
# The publisher's maintain() calls run as the role old_operator, which the subscriber does
# not have: a history row with that role on the subscriber came from the publisher.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
cluster_setup test-cluster/logical-all-tables 54486
OLD_DATA=$CLUSTER_DATA OLD_PORT=$CLUSTER_PORT OLD_SOCK=$CLUSTER_SOCK OLD_LOG=$CLUSTER_LOG
NEW_DATA=$(dirname "$OLD_DATA")/new/data NEW_PORT=$((OLD_PORT + 1))
NEW_SOCK=/tmp/idempotency-$NEW_PORT NEW_LOG=$(dirname "$NEW_DATA")/server.log
source "$(dirname "${BASH_SOURCE[0]}")/lib/prelude.sh" two_servers
WORK=$(mktemp -d /tmp/idem-logical-all.XXXXXX)
chmod 755 "$WORK"
SETTINGS=("idempotency.database = 'postgres'" "idempotency.partition_width = '2s'"
  "idempotency.premake = 2" "max_worker_processes = 24" "max_logical_replication_workers = 10"
  "max_replication_slots = 20" "max_wal_senders = 20" "wal_sender_timeout = '10s'"
  "wal_retrieve_retry_interval = '1s'")
CURRENT=$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$IDEM_ROOT/idempotency.control")

# old DB ARGS... / new DB ARGS...: psql on the publisher / subscriber, in database DB.
old() { cluster_psql "$OLD_DATA" "$OLD_PORT" "$OLD_SOCK" -d "$1" -qAt "${@:2}"; }
new() { cluster_psql "$NEW_DATA" "$NEW_PORT" "$NEW_SOCK" -d "$1" -qAt "${@:2}"; }
# The publisher's maintenance calls, as old_operator.
old_operator() {
  "$PGBIN/psql" -X -v ON_ERROR_STOP=1 -h "$OLD_SOCK" -p "$OLD_PORT" -U old_operator -d "$1" \
    -qAt "${@:2}"
}

rm -f "$OLD_LOG" "$NEW_LOG"
cluster_init "$OLD_DATA" "$OLD_PORT" "$OLD_SOCK" "${SETTINGS[@]}" \
  "idempotency.maintenance_interval = '1s'"
cluster_init "$NEW_DATA" "$NEW_PORT" "$NEW_SOCK" "${SETTINGS[@]}" \
  "idempotency.maintenance_interval = '2s'"
cluster_start "$OLD_DATA"
cluster_start "$NEW_DATA"

APP="CREATE TABLE orders (id bigint PRIMARY KEY, key text NOT NULL);"
old postgres -c "CREATE ROLE old_operator LOGIN SUPERUSER" -c "CREATE DATABASE legacy"
new postgres -c "CREATE DATABASE schema_copy" -c "CREATE DATABASE legacy"
old postgres -c "CREATE EXTENSION idempotency" -c "$APP" \
  -c "SELECT idempotency.create_stream('invoices', 50)" >/dev/null
for db in postgres schema_copy; do new "$db" -c "CREATE EXTENSION idempotency" -c "$APP"; done

# produce DB: one business transaction on the publisher: a key reserved and completed, a
# watermark moved, an order; N numbers them.
N=0
produce() {
  N=$((N + 1))
  old "$1" >/dev/null <<SQL
BEGIN;
SELECT outcome FROM idempotency.reserve('app', 'order-$N', retention => '1 hour');
SELECT idempotency.complete('app', 'order-$N', 201, '{"order": $N}');
SELECT idempotency.accept('billing', 'p1', $N);
INSERT INTO orders VALUES ($N, 'order-$N');
COMMIT;
SQL
}
# arrived DB: t once the subscriber's DB has the last produced key (completed, with its
# response), watermark and order. (Read only: a reserve() here would claim the key.)
arrived() {
  new "$1" -c "SELECT EXISTS (SELECT FROM idempotency.keys WHERE scope = 'app'
                              AND key = 'order-$N' AND state = 'completed'
                              AND response = '{\"order\": $N}')
                  AND idempotency.watermark('billing', 'p1') = $N
                  AND EXISTS (SELECT FROM orders WHERE id = $N AND key = 'order-$N')"
}
maintain() { "$@" -c "SELECT count(*) FROM idempotency.maintain()" >/dev/null; }
operator_rows() { new "$1" -c "SELECT count(*) FROM idempotency.maintenance_runs WHERE role = 'old_operator'"; }
worker_runs_since() {
  "$1" "$2" -c "SELECT count(*) >= $4 FROM idempotency.maintenance_runs
                WHERE caller = 'worker' AND started_at > '$3'"
}

# Both servers have a history before the subscription: the workers' runs and maintain()'s.
for _ in 1 2 3; do maintain old_operator postgres; done
for db in postgres schema_copy; do maintain new "$db"; maintain new "$db"; done
poll 60 "the publisher's worker has run" prints_t worker_runs_since old postgres -infinity 1
poll 60 "the subscriber's worker has run" prints_t worker_runs_since new postgres -infinity 1
first_run_all=$(new postgres -c "SELECT min(run) FROM idempotency.maintenance_log")
first_run_schema=$(new schema_copy -c "SELECT min(run) FROM idempotency.maintenance_log")
for _ in 1 2 3 4 5; do produce postgres; done

# The guard allows both shapes through the root; in a schema without it, it refuses.
if out=$(old postgres -c "CREATE PUBLICATION leaves FOR TABLES IN SCHEMA idempotency" 2>&1); then
  fail "a publication of the schema's partitions on their own was accepted"
fi
expect "the guard refuses FOR TABLES IN SCHEMA without publish_via_partition_root" \
  "$([[ $out == *"a partition of idempotency.keys, on its own"* ]] && echo refused)" refused
old postgres -c "CREATE PUBLICATION all_tables FOR ALL TABLES
                   WITH (publish_via_partition_root = true)" \
  -c "CREATE PUBLICATION in_schema FOR TABLES IN SCHEMA idempotency, TABLE orders
        WITH (publish_via_partition_root = true)"
expect "the publications carry the maintenance history" "$(old postgres -c "
  SELECT string_agg(pubname, ',' ORDER BY pubname) FROM pg_publication_tables
  WHERE schemaname = 'idempotency' AND tablename = 'maintenance_log'")" "all_tables,in_schema"
subscribe_started=$(new postgres -c "SELECT now()")
conn="host=$OLD_SOCK port=$OLD_PORT user=postgres dbname"
new postgres -c "CREATE SUBSCRIPTION all_tables CONNECTION '$conn=postgres' PUBLICATION all_tables"
new schema_copy -c "CREATE SUBSCRIPTION in_schema CONNECTION '$conn=postgres' PUBLICATION in_schema"

synced() { new "$1" -c "SELECT count(*) > 0 AND bool_and(srsubstate = 'r') FROM pg_subscription_rel"; }
for db in postgres schema_copy; do
  poll 120 "$db: the initial copy of every table" prints_t synced "$db"
  poll 60 "$db: the keys, watermark and orders of the initial copy" prints_t arrived "$db"
  expect "$db: the stream" "$(new "$db" -c "SELECT count(*) FROM idempotency.streams")" 1
  expect "$db: none of the publisher's runs copied" "$(operator_rows "$db")" 0
done

# Maintenance on both sides, writes on the publisher: everything keeps arriving.
for round in 1 2 3; do
  maintain old_operator postgres
  for db in postgres schema_copy; do maintain new "$db"; done
  produce postgres
  for db in postgres schema_copy; do
    poll 60 "$db, round $round: key, watermark and order after maintain() on both sides" prints_t \
      arrived "$db"
  done
done

# The publisher trims its history to its last 100 runs (deletes of runs numbered like the
# subscriber's own): they never reach the subscriber.
for _ in $(seq 105); do echo "SELECT count(*) FROM idempotency.maintain();"; done >"$WORK/runs.sql"
old_operator postgres -f "$WORK/runs.sql" >/dev/null
produce postgres
for db in postgres schema_copy; do
  poll 60 "$db: key, watermark and order after 105 more runs on the publisher" prints_t arrived "$db"
done
expect "the publisher trimmed past the subscribers' first runs" "$(old postgres -c "
  SELECT min(run) > greatest($first_run_all, $first_run_schema) FROM idempotency.maintenance_log")" t
expect "the subscriber's own first run is kept" "$(new postgres -c "
  SELECT count(*) FROM idempotency.maintenance_log WHERE run = $first_run_all")" 1
expect "schema_copy: its own first run is kept" "$(new schema_copy -c "
  SELECT count(*) FROM idempotency.maintenance_log WHERE run = $first_run_schema")" 1
for db in postgres schema_copy; do
  expect "$db: none of the publisher's runs applied" "$(operator_rows "$db")" 0
done

# The workers ran meanwhile, and keep running while changes arrive.
poll 60 "the publisher's worker ran during the replication" prints_t \
  worker_runs_since old postgres "$subscribe_started" 3
poll 60 "the subscriber's worker ran during the replication" prints_t \
  worker_runs_since new postgres "$subscribe_started" 3
produce postgres
for db in postgres schema_copy; do
  poll 60 "$db: key, watermark and order while the workers run" prints_t arrived "$db"
done

# --- A database made at 0.2.0 on both sides, with history, updated, then published. ---
for side in old new; do
  "$side" legacy -c "CREATE EXTENSION idempotency VERSION '0.2.0'" -c "$APP"
done
history_020="INSERT INTO idempotency.maintenance_log (started_at, ended_at, caller, role, result)
              SELECT now(), now(), 'sql', current_user, 'ok' FROM generate_series(1, 3)"
old_operator legacy -c "$history_020"
new legacy -c "$history_020"
for side in old new; do "$side" legacy -c "ALTER EXTENSION idempotency UPDATE"; done
expect "both legacy databases updated to $CURRENT" "$(old legacy -c "SELECT extversion FROM
  pg_extension WHERE extname = 'idempotency'") $(new legacy -c "SELECT extversion FROM
  pg_extension WHERE extname = 'idempotency'")" "$CURRENT $CURRENT"
maintain old_operator legacy
maintain new legacy
produce legacy
old legacy -c "CREATE PUBLICATION legacy_all FOR ALL TABLES WITH (publish_via_partition_root = true)"
new legacy -c "CREATE SUBSCRIPTION legacy_all CONNECTION '$conn=legacy' PUBLICATION legacy_all"
poll 120 "legacy: the initial copy of every table" prints_t synced legacy
poll 60 "legacy: the keys, watermark and orders of the initial copy" prints_t arrived legacy
for round in 1 2; do
  maintain old_operator legacy
  maintain new legacy
  produce legacy
  poll 60 "legacy, round $round: key, watermark and order after maintain() on both sides" prints_t \
    arrived legacy
done
expect "legacy: none of the publisher's runs copied or applied" "$(operator_rows legacy)" 0
expect "legacy: the subscriber's 0.2.0 history and its own runs" "$(new legacy -c "
  SELECT count(*) FROM idempotency.maintenance_log")" 6

# Keys that arrived replay on the subscriber. No subscription ever failed.
expect "legacy: the last key replays on the subscriber" "$(new legacy -c "
  SELECT outcome || ' ' || response::text FROM idempotency.reserve('app', 'order-$N')")" \
  "replay {\"order\": $N}"
expect "no apply or sync error in any subscription" "$(new postgres -c "
  SELECT string_agg(subname || ':' || (apply_error_count + sync_error_count), ' '
                    ORDER BY subname) FROM pg_stat_subscription_stats")" \
  "all_tables:0 in_schema:0 legacy_all:0"
expect "no duplicate key in the subscriber's log" \
  "$(grep -c 'duplicate key value' "$NEW_LOG" || true)" 0

echo "$CHECKS checks passed"
