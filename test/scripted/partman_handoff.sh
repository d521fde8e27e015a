#!/usr/bin/env bash
# use_partman() hands idempotency.keys to pg_partman 4.7; partman.run_maintenance() then drops
# exactly the partitions idempotency.partitions reports as due to drop, as tables (not
# detached), and live keys stay readable. Runs in a database of its own on the test cluster.
set -euo pipefail
DB=idem_partman_test
# The width of the partitions made below (the server default, set in case it is not).
export PGOPTIONS="-c idempotency.partition_width=1d -c idempotency.premake=3"
q() { psql -X -v ON_ERROR_STOP=1 -qAt "$@"; }
fail() { echo "FAIL: $*"; exit 1; }
cleanup() { q -d postgres -c "DROP DATABASE IF EXISTS $DB" >/dev/null 2>&1 || true; }
trap cleanup EXIT
q -d postgres -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB"

q -d $DB <<'SQL'
SET client_min_messages = warning;
CREATE EXTENSION idempotency;
CREATE SCHEMA partman;
CREATE EXTENSION pg_partman SCHEMA partman;
SET idempotency.partition_width = '1d';
SELECT count(*) FROM idempotency.maintain();
-- two expired partitions (partman's naming, which maintain() uses too) with rows
CREATE TABLE idempotency.keys_p2020_01_01 PARTITION OF idempotency.keys
    FOR VALUES FROM ('2020-01-01 00:00+00') TO ('2020-01-02 00:00+00');
CREATE TABLE idempotency.keys_p2020_01_02 PARTITION OF idempotency.keys
    FOR VALUES FROM ('2020-01-02 00:00+00') TO ('2020-01-03 00:00+00');
INSERT INTO idempotency.keys (scope, key, state, attempt, first_seen_at, expires_at) VALUES
    ('pm', 'old-1', 'completed', 1, '2019-12-31', '2020-01-01 12:00+00'),
    ('pm', 'old-2', 'completed', 1, '2019-12-31', '2020-01-02 12:00+00'),
    ('pm', 'far', 'completed', 1, now(), now() + interval '40 days');
SELECT (idempotency.reserve('pm', 'live')).outcome;
SQL

due=$(q -d $DB -c "SELECT string_agg(partition, ',' ORDER BY partition) FROM idempotency.partitions WHERE due_to_drop")
before=$(q -d $DB -c "SELECT string_agg(partition, ',' ORDER BY partition) FROM idempotency.partitions WHERE NOT is_default")
echo "due to drop: $due"
[[ $due == keys_p2020_01_01,keys_p2020_01_02 ]] || fail "unexpected due_to_drop set: $due"

[[ $(q -d $DB -c "SET client_min_messages = warning" -c "SELECT idempotency.use_partman()") == t ]] ||
  fail "use_partman() did not hand the table over"
[[ $(q -d $DB -c "SELECT idempotency.use_partman()") == f ]] || fail "use_partman() is not idempotent"
cfg=$(q -d $DB -c "SELECT retention_keep_table, retention::interval = '0'::interval, infinite_time_partitions FROM partman.part_config WHERE parent_table = 'idempotency.keys'")
[[ $cfg == "f|t|t" ]] || fail "part_config is $cfg"
echo "ok: part_config retention_keep_table=false, retention 0"

q -d $DB -c "SET client_min_messages = warning" -c "SELECT partman.run_maintenance(p_jobmon => false)" >/dev/null
after=$(q -d $DB -c "SELECT string_agg(partition, ',' ORDER BY partition) FROM idempotency.partitions WHERE NOT is_default")
dropped=$(comm -23 <(tr , '\n' <<<"$before" | sort) <(tr , '\n' <<<"$after" | sort) | paste -sd,)
echo "pg_partman dropped: $dropped"
[[ $dropped == "$due" ]] || fail "pg_partman dropped '$dropped', expected '$due'"
[[ $(q -d $DB -c "SELECT count(*) FROM pg_class WHERE relname IN ('keys_p2020_01_01', 'keys_p2020_01_02')") == 0 ]] ||
  fail "the expired partitions were detached, not dropped"
[[ $(q -d $DB -c "SELECT count(*) FROM idempotency.partitions WHERE due_to_drop") == 0 ]] ||
  fail "partitions still due to drop"

# Keys stay readable, including the far one moved out of the old default partition.
[[ $(q -d $DB -c "SELECT state FROM idempotency.lookup('pm', 'live')") == processing ]] || fail "live key lost"
[[ $(q -d $DB -c "SELECT state FROM idempotency.lookup('pm', 'far')") == completed ]] || fail "far key lost"
[[ $(q -d $DB -c "SELECT count(*) FROM idempotency.partitions WHERE is_default") == 1 ]] || fail "no default partition"
[[ $(q -d $DB -c "SELECT (idempotency.reserve('pm', 'after')).outcome") == new ]] || fail "reserve after hand-off"

# maintain() now defers to pg_partman.
actions=$(q -d $DB -c "SET client_min_messages = warning" -c "SELECT string_agg(action, ',') FROM idempotency.maintain()")
[[ $actions == *deferred* ]] || fail "maintain() did not defer to pg_partman: $actions"
q -d $DB -c "SET client_min_messages = warning" -c "DROP EXTENSION idempotency CASCADE" >/dev/null
echo "PASS"
