#!/usr/bin/env bash
# DROP EXTENSION idempotency: what it deletes, and that pg_partman keeps working for every
# other table when idempotency.stop_partman() ran first (and what happens when it did not).
# Runs in databases of its own on the test cluster.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/prelude.sh" test_cluster
partman_type() {
  q -d postgres -c "SELECT CASE WHEN split_part(default_version, '.', 1)::int >= 5 THEN 'range'
    ELSE 'native' END FROM pg_available_extensions WHERE name = 'pg_partman'"
}
DBS="idem_uninstall_a idem_uninstall_b"
export PGOPTIONS="-c idempotency.partition_width=1d -c idempotency.premake=3 -c client_min_messages=warning"

setup() { # a database with keys pg_partman manages, and another pg_partman table
  own_database "$1"
  # pg_partman 4.x calls native partitioning 'native', 5.x 'range'.
  q -d "$1" -v ptype="$(partman_type)" >/dev/null <<'SQL'
CREATE EXTENSION idempotency;
CREATE SCHEMA partman;
CREATE EXTENSION pg_partman SCHEMA partman;
SELECT idempotency.use_partman();
SELECT idempotency.reserve('u', 'k1');
SELECT idempotency.create_stream('s');
SELECT idempotency.next_key('s');
SELECT idempotency.accept('c', 'p', 5::bigint);
CREATE TABLE public.events (id bigint NOT NULL, at timestamptz NOT NULL) PARTITION BY RANGE (at);
SELECT partman.create_parent(p_parent_table => 'public.events', p_control => 'at',
    p_type => :'ptype', p_interval => '1 day', p_premake => 2, p_jobmon => false);
SQL
  expect "$1: pg_partman manages both tables" \
    "$(q -d "$1" -c "SELECT string_agg(parent_table, ',' ORDER BY parent_table) FROM partman.part_config")" \
    "idempotency.keys,public.events"
}

# --- stop_partman(), then DROP EXTENSION: pg_partman goes on for the other table
setup idem_uninstall_a
DB=idem_uninstall_a
expect "stop_partman() stops pg_partman's management of idempotency.keys" \
  "$(q -d $DB -c "SELECT idempotency.stop_partman()")" t
expect "its part_config row and template table are gone" \
  "$(q -d $DB -c "SELECT (SELECT count(*) FROM partman.part_config WHERE parent_table = 'idempotency.keys')
     || ',' || (to_regclass('partman.template_idempotency_keys') IS NULL)")" "0,true"
expect "a second stop_partman() is a no-op" "$(q -d $DB -c "SELECT idempotency.stop_partman()")" f
expect "maintain() manages the partitions itself again" \
  "$(q -d $DB -c "SELECT count(*) FROM idempotency.maintain() WHERE action IN ('deferred', 'failed')")" 0
expect "the key is still there" "$(q -d $DB -c "SELECT state FROM idempotency.lookup('u', 'k1')")" processing
q -d $DB -c "DROP EXTENSION idempotency"
expect "DROP EXTENSION deleted every table, view and function of the schema (keys, partitions, streams, watermarks)" \
  "$(q -d $DB -c "SELECT (SELECT count(*) FROM pg_class WHERE relnamespace = 'idempotency'::regnamespace)
     + (SELECT count(*) FROM pg_proc WHERE pronamespace = 'idempotency'::regnamespace)
     + (SELECT count(*) FROM pg_type WHERE typnamespace = 'idempotency'::regnamespace)")" 0
q -d $DB -c "DROP SCHEMA idempotency" # PostgreSQL leaves the schema CREATE EXTENSION made, empty
expect "no table named keys_* is left anywhere" \
  "$(q -d $DB -c "SELECT count(*) FROM pg_class WHERE relname LIKE 'keys\_%' OR relname LIKE '%idempotency%'")" 0
q -d $DB -c "UPDATE partman.part_config SET premake = 5 WHERE parent_table = 'public.events'"
q -d $DB -c "SELECT partman.run_maintenance()" >/dev/null || fail "partman.run_maintenance() fails after the DROP"
expect "partman.run_maintenance() still maintains public.events (premake raised to 5: new partitions)" \
  "$(q -d $DB -c "SELECT count(*) >= 6 FROM pg_inherits WHERE inhparent = 'public.events'::regclass")" t

# --- DROP EXTENSION without stop_partman(): the hazard docs/operations.md warns of
setup idem_uninstall_b
DB=idem_uninstall_b
q -d $DB -c "DROP EXTENSION idempotency"
expect "without stop_partman() pg_partman's row for idempotency.keys stays behind" \
  "$(q -d $DB -c "SELECT count(*) FROM partman.part_config WHERE parent_table = 'idempotency.keys'")" 1
out=$(q -d $DB -c "SELECT partman.run_maintenance()" 2>&1) && fail "run_maintenance() succeeded: $out"
[[ $out == *"idempotency.keys"* ]] || fail "unexpected error: $out"
passed "without stop_partman(), run_maintenance() fails on the missing table"
echo "uninstall: $CHECKS checks passed"
