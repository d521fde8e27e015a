#!/usr/bin/env bash
# Moving to another server with logical replication, exactly as docs/replication.md's "Moving to another
# server or major version" says. An old server (publisher) runs a storm-shaped pgbench load
# (reserve + business row + complete, reserve + fail, reserve / commit / complete; next_key
# and accept inside the business transactions) while its worker keeps short partitions
# (width 2 s, premake 2, every second): keys with a one-hour retention land in the default
# partition and are moved into partitions of their own, keys with a 3-second one (and a
# 1-second lease: the retention counts from its end) fill premade partitions that are dropped
# again. A new server (subscriber, its own worker running too)
# follows through a publication with publish_via_partition_root. Then: stop writes, wait for
# the subscriber to catch up, move the next_key high-water marks, switch, verify:
#   - every live key of the old server is on the new one, in the same state, attempt and
#     response, and every completed one replays there;
#   - next_key on the new server continues above every value handed out on the old one;
#   - accept refuses every position the old server had accepted, and takes the next one;
#   - the old server's maintenance did move rows out of the default partition meanwhile.
# SUBSCRIBER_PG_CONFIG (default: PG_CONFIG) picks the new server's binaries (another major);
# the extension must be installed there.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
cluster_setup test-cluster/logical-move 54470
OLD_DATA=$CLUSTER_DATA OLD_PORT=$CLUSTER_PORT OLD_SOCK=$CLUSTER_SOCK OLD_LOG=$CLUSTER_LOG
NEW_DATA=$(dirname "$OLD_DATA")/new/data NEW_PORT=$((OLD_PORT + 1))
NEW_SOCK=/tmp/idempotency-$NEW_PORT NEW_LOG=$(dirname "$NEW_DATA")/server.log
OLD_PGBIN=$PGBIN
NEW_PGBIN=$("${SUBSCRIBER_PG_CONFIG:-$PG_CONFIG}" --bindir)
CLIENTS=${CLIENTS:-8}
DURATION=${DURATION:-15}
source "$(dirname "${BASH_SOURCE[0]}")/lib/prelude.sh" two_servers
WORK=$(mktemp -d /tmp/idem-logical-move.XXXXXX)
chmod 755 "$WORK"
# Both clusters run the worker with short partitions.
SETTINGS=("idempotency.database = 'postgres'" "idempotency.partition_width = '2s'"
  "idempotency.premake = 2" "idempotency.maintenance_interval = '1s'"
  "max_connections = $((CLIENTS + 30))" "max_worker_processes = 16"
  "max_logical_replication_workers = 6" "wal_sender_timeout = '10s'")

old() { cluster_psql "$OLD_DATA" "$OLD_PORT" "$OLD_SOCK" -d postgres -qAt "$@"; }
new() { PGBIN=$NEW_PGBIN cluster_psql "$NEW_DATA" "$NEW_PORT" "$NEW_SOCK" -d postgres -qAt "$@"; }

if [[ $NEW_PGBIN != "$OLD_PGBIN" ]]; then
  share=$("${SUBSCRIBER_PG_CONFIG}" --sharedir)
  [[ -f $share/extension/idempotency.control ]] ||
    fail "the extension is not installed for SUBSCRIBER_PG_CONFIG ($share)"
fi
echo "old server: $("$OLD_PGBIN/postgres" --version); new server: $("$NEW_PGBIN/postgres" --version)"

cluster_init "$OLD_DATA" "$OLD_PORT" "$OLD_SOCK" "${SETTINGS[@]}"
cluster_start "$OLD_DATA"
on_new cluster_init "$NEW_DATA" "$NEW_PORT" "$NEW_SOCK" "${SETTINGS[@]}"
on_new cluster_start "$NEW_DATA"

# The application's schema, on both servers (logical replication copies rows, not DDL).
SCHEMA="CREATE EXTENSION idempotency;
CREATE TABLE orders (id bigserial PRIMARY KEY, key text NOT NULL, attempt int NOT NULL,
                     invoice bigint NOT NULL);"
old -c "$SCHEMA" -c "SELECT idempotency.create_stream('invoices', 50)" >/dev/null
new -c "$SCHEMA" >/dev/null

# Replicate: the application's tables and the extension's three, the key table through its
# root (README). Started before the load: the initial copy and the stream of changes both run
# while the worker creates, fills and drops partitions.
old -c "CREATE PUBLICATION move FOR TABLE orders, idempotency.keys, idempotency.streams,
          idempotency.consumer_positions WITH (publish_via_partition_root = true)"
new -c "CREATE SUBSCRIPTION move CONNECTION 'host=$OLD_SOCK port=$OLD_PORT user=postgres dbname=postgres'
          PUBLICATION move"

cat >"$WORK/load.pgbench" <<'SQL'
\set k random(1, 40)
\set path random(1, 10)
\set short random(1, 10)
SELECT (extract(epoch FROM clock_timestamp()) * 5)::bigint % 100000000 AS g \gset
\if :path <= 7
BEGIN;
SELECT (outcome = 'new')::int AS is_new, coalesce(attempt, 0) AS attempt
  FROM idempotency.reserve('move', 'g' || :g || '-k' || :k, retention => CASE WHEN :short = 1 THEN interval '3 seconds' ELSE interval '1 hour' END,
                           lock_ttl => CASE WHEN :short = 1 THEN interval '1 second' ELSE interval '5 minutes' END,
                           wait => '20 milliseconds') \gset
\if :is_new
SELECT idempotency.accept('billing', 'p' || (:k % 4), :g::bigint * 100 + :k) AS accepted \gset
INSERT INTO orders (key, attempt, invoice)
  VALUES ('g' || :g || '-k' || :k, :attempt, idempotency.next_key('invoices'));
SELECT idempotency.complete('move', 'g' || :g || '-k' || :k, 201,
                            jsonb_build_object('order', :k, 'g', :g), :attempt);
\endif
COMMIT;
\elif :path <= 8
BEGIN;
SELECT (outcome = 'new')::int AS is_new, coalesce(attempt, 0) AS attempt
  FROM idempotency.reserve('move', 'g' || :g || '-k' || :k, retention => CASE WHEN :short = 1 THEN interval '3 seconds' ELSE interval '1 hour' END,
                           lock_ttl => CASE WHEN :short = 1 THEN interval '1 second' ELSE interval '5 minutes' END,
                           wait => '0') \gset
\if :is_new
SELECT idempotency.fail('move', 'g' || :g || '-k' || :k, '{"error": "transient"}', :attempt);
\endif
COMMIT;
\else
SELECT (outcome = 'new')::int AS is_new, coalesce(attempt, 0) AS attempt
  FROM idempotency.reserve('move', 'g' || :g || '-k' || :k, lock_ttl => '5 minutes',
                           retention => CASE WHEN :short = 1 THEN interval '3 seconds' ELSE interval '1 hour' END, wait => '20 milliseconds') \gset
\if :is_new
BEGIN;
INSERT INTO orders (key, attempt, invoice)
  VALUES ('g' || :g || '-k' || :k, :attempt, idempotency.next_key('invoices'));
SELECT idempotency.checkpoint('move', 'g' || :g || '-k' || :k, 'order inserted', :attempt);
SELECT idempotency.complete('move', 'g' || :g || '-k' || :k, 201,
                            jsonb_build_object('order', :k, 'g', :g), :attempt);
COMMIT;
\endif
\endif
SQL

echo "load: $CLIENTS clients, $DURATION s"
rc=0
timeout -k 10 $((DURATION + 60)) "$OLD_PGBIN/pgbench" -n -h "$OLD_SOCK" -p "$OLD_PORT" -U postgres \
  -c "$CLIENTS" -j 2 -T "$DURATION" -f "$WORK/load.pgbench" postgres >"$WORK/pgbench.log" 2>&1 || rc=$?
grep -E "^(number of|tps)" "$WORK/pgbench.log" || true
if [[ $rc -ne 0 ]] || grep -qE "aborted|ERROR" "$WORK/pgbench.log"; then
  grep -E "aborted|ERROR" "$WORK/pgbench.log" | head -n 20
  fail "pgbench exited $rc: a client got an error"
fi

# Keys in every state: committed claims still being processed (lease and recovery point),
# and a completed key forgotten on purpose.
old -c "SELECT count(*) FROM generate_series(1, 5) i,
          LATERAL idempotency.reserve('move', 'claim-' || i, lock_ttl => '1 hour',
                                      retention => '1 hour') r WHERE r.outcome = 'new'" >/dev/null
old -c "SELECT idempotency.checkpoint('move', 'claim-' || i, 'step ' || i, 1)
        FROM generate_series(1, 5) i" >/dev/null
# A failed key for certain (the load's failed ones are often retried to completion).
old -c "SELECT outcome FROM idempotency.reserve('move', 'failed-1', retention => '1 hour')" \
  -c "SELECT idempotency.fail('move', 'failed-1', '{\"error\": \"supplier down\"}', 1)" >/dev/null
forgotten=$(old -c "SELECT key FROM idempotency.keys WHERE state = 'completed'
                      AND expires_at > now() + interval '10 minutes' LIMIT 1")
expect "forget on the old server" "$(old -c "SELECT idempotency.forget('move', '$forgotten')")" t

# The old server's worker moved rows out of the default partition and dropped partitions
# while the subscription ran (on a loaded machine some of its steps are skipped for a lock:
# give it a few more runs).
moves() { grep -cE "idempotency: created partition keys_p[0-9_]+ in database \"postgres\" \(rows: [1-9]" "$OLD_LOG" || true; }
drops() { grep -cE "idempotency: dropped partition keys_p" "$OLD_LOG" || true; }
worked() { [[ $(moves) -ge 2 && $(drops) -ge 1 ]] && echo t; }
poll 60 "the old server's worker to move rows into 2 partitions and drop 1" prints_t worked

# 1. Stop writes: the load has ended; nothing else writes to the old server. (A real
#    application: stop it, or ALTER DATABASE ... SET default_transaction_read_only = on and
#    end its sessions.)
# 2. Wait for the subscriber to catch up: the slot has confirmed everything up to the old
#    server's current WAL position (and the initial copy is done).
lsn=$(old -c "SELECT pg_current_wal_lsn()")
poll 120 "the subscription's initial copy" prints_t \
  new -c "SELECT count(*) = 0 FROM pg_subscription_rel WHERE srsubstate <> 'r'"
poll 120 "the subscriber to confirm $lsn" prints_t \
  old -c "SELECT confirmed_flush_lsn >= '$lsn' FROM pg_replication_slots WHERE slot_name = 'move'"
echo "caught up to $lsn"

# 3. Move the next_key high-water marks.
old -c "SELECT format('SELECT idempotency.set_stream_floor(%L, %s);', stream, reserved_up_to)
        FROM idempotency.stream_positions()" >"$WORK/floors.sql"
new -v ON_ERROR_STOP=1 -f "$WORK/floors.sql" >/dev/null
# 4. Switch the application: the subscription goes (its slot on the old server with it).
new -c "DROP SUBSCRIPTION move"

# 5. Verify.
echo "old server's maintenance: $(moves) partitions created with rows moved from the default partition, $(drops) dropped"

# Keys in every state: the old server's live one-hour keys, compared field by field.
KEYS_SQL="SELECT scope, key, state, attempt, status_code, response::text, recovery_point,
                 last_error::text, first_seen_at, completed_at, locked_until, expires_at
          FROM idempotency.keys WHERE expires_at > now() + interval '10 minutes'"
old -c "COPY ($KEYS_SQL) TO STDOUT" >"$WORK/old_keys.tsv"
new -c "CREATE TABLE old_keys AS $KEYS_SQL WITH NO DATA" \
  -c "\\copy old_keys FROM '$WORK/old_keys.tsv'"
read -r total completed processing failed <<<"$(new -F ' ' -c "
  SELECT count(*), count(*) FILTER (WHERE state = 'completed'),
         count(*) FILTER (WHERE state = 'processing'), count(*) FILTER (WHERE state = 'failed')
  FROM old_keys")"
echo "old server: $total live keys ($completed completed, $processing processing, $failed failed)"
[[ $completed -ge 100 ]] || fail "only $completed completed keys on the old server"
[[ $processing -ge 5 && $failed -ge 1 ]] || fail "$processing processing and $failed failed keys"
expect "keys of the old server missing or different on the new one" \
  "$(new -c "SELECT count(*) FROM (TABLE old_keys EXCEPT $KEYS_SQL) d")" 0
expect "keys on the new server the old one does not have" \
  "$(new -c "SELECT count(*) FROM ($KEYS_SQL EXCEPT TABLE old_keys) d")" 0
expect "business rows on the new server" "$(new -c "SELECT count(*) FROM orders")" \
  "$(old -c "SELECT count(*) FROM orders")"
# Every acknowledged (completed) key replays on the new server, with its response.
expect "completed keys that replay on the new server" "$(new -c "
  SELECT count(*) FROM old_keys o,
    LATERAL idempotency.reserve(o.scope, o.key, retention => '1 hour') r
  WHERE o.state = 'completed' AND r.outcome = 'replay' AND r.status_code = o.status_code
    AND r.response::text = o.response")" "$completed"
expect "claims being processed on the old server are in progress on the new one" "$(new -c "
  SELECT count(*) FROM old_keys o, LATERAL idempotency.reserve(o.scope, o.key, retention => '1 hour') r
  WHERE o.state = 'processing' AND r.outcome = 'in_progress'")" "$processing"
expect "the key forgotten on the old server" \
  "$(new -c "SELECT count(*) FROM idempotency.keys WHERE key = '$forgotten'")" 0

# next_key continues above every value handed out on the old server.
old_bound=$(old -c "SELECT reserved_up_to FROM idempotency.stream_positions() WHERE stream = 'invoices'")
old_max=$(old -c "SELECT max(invoice) FROM orders")
next=$(new -c "SELECT idempotency.next_key('invoices')")
echo "invoices: old server handed out up to $old_max (bound $old_bound); new server's next_key: $next"
[[ $old_max -ge 1 && $old_bound -ge $old_max ]] || fail "old server: max $old_max, bound $old_bound"
expect "next_key on the new server is above the old server's bound" \
  "$(new -c "SELECT $next > $old_bound")" t

# Accept positions of the old server are refused; the next one is taken.
old -c "COPY (SELECT consumer, partition, position FROM idempotency.consumer_positions) TO STDOUT" \
  >"$WORK/old_positions.tsv"
partitions=$(wc -l <"$WORK/old_positions.tsv")
[[ $partitions -ge 4 ]] || fail "only $partitions watermarks on the old server"
new -c "CREATE TABLE old_positions (consumer text, partition text, position uuid)" \
  -c "\\copy old_positions FROM '$WORK/old_positions.tsv'"
expect "old accept positions refused on the new server" "$(new -c "
  SELECT count(*) FILTER (WHERE NOT idempotency.accept(consumer, partition, position))
  FROM old_positions")" "$partitions"
expect "the next position accepted on the new server" "$(new -c "
  SELECT count(*) FILTER (WHERE idempotency.accept(consumer, partition,
                                idempotency.watermark(consumer, partition)::bigint + 1))
  FROM old_positions")" "$partitions"

echo "$CHECKS checks passed"
