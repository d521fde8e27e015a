#!/usr/bin/env bash
# use_partman() hands idempotency.keys to pg_partman (4.7 on PostgreSQL 15 from Debian 12, 5.x
# built from Debian's source package for 17 and 18); partman.run_maintenance() then drops
# exactly the partitions idempotency.partitions reports as due to drop, as tables (not
# detached), and live keys stay readable. Runs in a database of its own on the test cluster.
set -euo pipefail
DB=idem_partman_test
# The width of the partitions made below (the server default, set in case it is not).
export PGOPTIONS="-c idempotency.partition_width=1d -c idempotency.premake=3"
source "$(dirname "${BASH_SOURCE[0]}")/lib/prelude.sh" test_cluster
own_database "$DB"
# pg_partman names a daily partition keys_p2020_01_01 (4.x, as maintain() does) or
# keys_p20200101 (5.x): the names expected below follow the installed version.
PARTMAN=$(q -d postgres -c "SELECT default_version FROM pg_available_extensions WHERE name = 'pg_partman'")
[[ -n $PARTMAN ]] || fail "pg_partman is not installed"
if [[ ${PARTMAN%%.*} -ge 5 ]]; then DAY_FORMAT=YYYYMMDD; else DAY_FORMAT=YYYY_MM_DD; fi
# partman_name DATE: pg_partman's name of the daily partition starting at DATE (UTC).
partman_name() { q -d postgres -c "SELECT to_char(date '$1', '\"keys_p\"$DAY_FORMAT')"; }
echo "pg_partman $PARTMAN: daily partitions are named like $(partman_name 2020-01-01)"

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
# Partitions are compared by their start: a hand-off to 5.x renames them.
starts="SELECT string_agg(to_char(range_start AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI'), ',' ORDER BY range_start) FROM idempotency.partitions"
due_starts=$(q -d $DB -c "$starts WHERE due_to_drop")
before=$(q -d $DB -c "$starts WHERE NOT is_default")
echo "due to drop: $due"
[[ $due == keys_p2020_01_01,keys_p2020_01_02 ]] || fail "unexpected due_to_drop set: $due"

# A partition that is not one width-slot (made before a change of the width) would be dropped
# too early by pg_partman (it takes a partition's end as start + width): no hand-off.
q -d $DB -c "CREATE TABLE idempotency.keys_p2020_01_03_1200 PARTITION OF idempotency.keys
    FOR VALUES FROM ('2020-01-03 12:00+00') TO ('2020-01-04 00:00+00')"
out=$(q -d $DB -c "SET client_min_messages = warning" -c "SELECT idempotency.use_partman()" 2>&1) &&
  fail "use_partman() accepted a partition of another width"
[[ $out == *"partition keys_p2020_01_03_1200 does not match idempotency.partition_width"* ]] ||
  fail "unexpected refusal: $out"
[[ $(q -d $DB -c "SELECT count(*) FROM partman.part_config") == 0 ]] || fail "a refused hand-off left part_config rows"
q -d $DB -c "DROP TABLE idempotency.keys_p2020_01_03_1200"
passed "hand-off refused while a partition of another width exists"

[[ $(q -d $DB -c "SET client_min_messages = warning" -c "SELECT idempotency.use_partman()") == t ]] ||
  fail "use_partman() did not hand the table over"
[[ $(q -d $DB -c "SELECT idempotency.use_partman()") == f ]] || fail "use_partman() is not idempotent"
cfg=$(q -d $DB -c "SELECT retention_keep_table, retention::interval = '0'::interval, infinite_time_partitions FROM partman.part_config WHERE parent_table = 'idempotency.keys'")
[[ $cfg == "f|t|t" ]] || fail "part_config is $cfg"
passed "part_config retention_keep_table=false, retention 0"
# The width in hours, never days (a day's length follows the session's TimeZone).
interval=$(q -d $DB -c "SELECT partition_interval FROM partman.part_config WHERE parent_table = 'idempotency.keys'")
[[ $interval != *day* && $(q -d $DB -c "SELECT '$interval'::interval = '24 hours'") == t ]] ||
  fail "partition_interval is '$interval'"
out=$(PGOPTIONS="-c idempotency.partition_width=12h" q -d $DB -c "SELECT idempotency.use_partman()" 2>&1) &&
  fail "use_partman() accepted another width once handed over"
[[ $out == *"idempotency.partition_width differs"* ]] || fail "unexpected refusal: $out"
passed "partition_interval '$interval'; a later change of width is refused"

q -d $DB -c "SET client_min_messages = warning" -c "SELECT partman.run_maintenance(p_jobmon => false)" >/dev/null
after=$(q -d $DB -c "$starts WHERE NOT is_default")
dropped=$(comm -23 <(tr , '\n' <<<"$before" | sort) <(tr , '\n' <<<"$after" | sort) | paste -sd,)
echo "pg_partman dropped: $dropped"
[[ $dropped == "$due_starts" ]] || fail "pg_partman dropped the partitions starting at '$dropped', expected '$due_starts'"
[[ $(q -d $DB -c "SELECT count(*) FROM pg_class WHERE relname IN ('keys_p2020_01_01', 'keys_p2020_01_02', '$(partman_name 2020-01-01)', '$(partman_name 2020-01-02)')") == 0 ]] ||
  fail "the expired partitions were detached, not dropped"
[[ $(q -d $DB -c "SELECT count(*) FROM idempotency.partitions WHERE due_to_drop") == 0 ]] ||
  fail "partitions still due to drop"

# Keys stay readable, including the far one moved out of the old default partition.
[[ $(q -d $DB -c "SELECT state FROM idempotency.lookup('pm', 'live')") == processing ]] || fail "live key lost"
[[ $(q -d $DB -c "SELECT state FROM idempotency.lookup('pm', 'far')") == completed ]] || fail "far key lost"
[[ $(q -d $DB -c "SELECT count(*) FROM idempotency.partitions WHERE is_default") == 1 ]] || fail "no default partition"
[[ $(q -d $DB -c "SELECT (idempotency.reserve('pm', 'after')).outcome") == new ]] || fail "reserve after hand-off"

# maintain() now defers to pg_partman, whatever the caller's TimeZone; a key beyond every
# partition (pg_partman 5.x makes its premade ones ahead of the newest data, 4.x ahead of now)
# gets its partition from maintain() before pg_partman runs.
q -d $DB -c "INSERT INTO idempotency.keys (scope, key, state, attempt, first_seen_at, expires_at)
    SELECT 'pm', 'farther', 'completed', 1, now(), max(range_end) + interval '2 days'
    FROM idempotency.partitions WHERE NOT is_default"
actions=$(q -d $DB -c "SET client_min_messages = warning" -c "SET TimeZone = 'America/New_York'" \
  -c "SELECT string_agg(action || ':' || coalesce(rows, -1), ',') FROM idempotency.maintain()")
echo "maintain(): $actions"
[[ $actions == *deferred* ]] || fail "maintain() did not defer to pg_partman: $actions"
[[ $actions == *created:1* ]] || fail "maintain() did not give the far key a partition: $actions"
[[ $(q -d $DB -c "SELECT count(*) FROM ONLY idempotency.keys_default") == 0 ]] || fail "rows left in the default partition"
[[ $(q -d $DB -c "SELECT state FROM idempotency.lookup('pm', 'farther')") == completed ]] || fail "farther key lost"
misfits=$(q -d $DB -c "SELECT string_agg(partition, ',') FROM idempotency.partitions WHERE NOT is_default AND (
    range_end - range_start <> interval '24 hours'
    OR partition <> to_char(range_start AT TIME ZONE 'UTC', '\"keys_p\"$DAY_FORMAT'))")
[[ -z $misfits ]] || fail "partitions that are not one UTC day, named by it: $misfits"
# A long transaction reading the table: maintain() does not wait, pg_partman's drop is
# 'skipped' (not an error), and done by the next run.
old6=$(partman_name 2020-01-06)
q -d $DB -c "CREATE TABLE idempotency.$old6 PARTITION OF idempotency.keys
    FOR VALUES FROM ('2020-01-06 00:00+00') TO ('2020-01-07 00:00+00')"
q -d $DB -c "BEGIN" -c "SELECT count(*) FROM idempotency.keys" -c "SELECT pg_sleep(300) /* reader */" \
  -c "COMMIT" >/dev/null 2>&1 &
holder=$!
reading() {
  [[ $(q -d $DB -c "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
                    WHERE a.query LIKE '%/* reader */%' AND a.pid <> pg_backend_pid()
                      AND l.relation = 'idempotency.keys'::regclass") == 1 ]]
}
poll --try 60 reading || fail "the long reader does not hold its lock on idempotency.keys"
actions=$(q -d $DB -c "SET client_min_messages = warning" -c "SELECT string_agg(action, ',') FROM idempotency.maintain()")
echo "maintain() beside a long reader: $actions"
[[ $actions == skipped ]] || fail "expected a skipped pg_partman run, got: $actions"
q -d $DB -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE query LIKE '%/* reader */%' AND pid <> pg_backend_pid()" >/dev/null
wait $holder || true
actions=$(q -d $DB -c "SET client_min_messages = warning" -c "SELECT string_agg(action || ':' || coalesce(partition, '-'), ',') FROM idempotency.maintain()")
echo "maintain() after it: $actions"
[[ $actions == *dropped:$old6* ]] || fail "the expired partition was not dropped: $actions"

# A takeover near the end of a key's window moves expires_at past its lease: the row moves to
# pg_partman's partition of its new expires_at (out of the partition of its old one), and
# the new holder's complete is accepted.
q -d $DB -c "INSERT INTO idempotency.keys (scope, key, state, attempt, first_seen_at, locked_until, expires_at)
    VALUES ('pm', 'late', 'processing', 1, now() - interval '1 day', clock_timestamp() - interval '1 minute',
            clock_timestamp() + interval '1 minute')"
where_late="SELECT tableoid::regclass FROM idempotency.keys WHERE scope = 'pm' AND key = 'late'"
late_before=$(q -d $DB -c "$where_late")
expect "takeover near the end of the window: attempt 2, expiring 2 days after its lease" \
  "$(q -d $DB -c "SELECT outcome || ' ' || attempt || ' ' || (expires_at = locked_until + interval '48 hours')
     FROM idempotency.reserve('pm', 'late', lock_ttl => '5 minutes', retention => '2 days')")" "new 2 true"
late_after=$(q -d $DB -c "$where_late")
[[ $late_after != "$late_before" && $late_after != idempotency.keys_default ]] ||
  fail "the row stayed in $late_before (now in $late_after)"
passed "the row moved from $late_before to $late_after"
q -d $DB -c "SELECT idempotency.complete('pm', 'late', 201, '{}', attempt => 2)" >/dev/null ||
  fail "the new holder's complete was refused"
expect "the answer is replayed" "$(q -d $DB -c "SELECT (idempotency.reserve('pm', 'late')).outcome")" replay

q -d $DB -c "SET client_min_messages = warning" -c "DROP EXTENSION idempotency CASCADE" >/dev/null
echo "partman_handoff: $CHECKS checks passed"
