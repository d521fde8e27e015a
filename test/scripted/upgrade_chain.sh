#!/usr/bin/env bash
# The upgrade chain, as an installation of 0.1.0 takes it: CREATE EXTENSION idempotency
# VERSION '0.1.0' with data in every state (keys processing, completed, failed, checkpointed,
# abandoned, in dated partitions made the way 0.1.0's maintain() made them and in the default
# partition; streams; watermarks; a database whose keys pg_partman manages as 0.1.0's
# use_partman() left them), then ALTER EXTENSION idempotency UPDATE: every record reads back
# unchanged, the partitions are fixed for pg_dump (a dump restores), and the regression suite
# passes in the upgraded database. Before the update the new library refuses each call with
# an error that names ALTER EXTENSION idempotency UPDATE, also in a session that asked before
# another session updated; UPDATE TO a version that does not exist is PostgreSQL's own error.
# The rows are written with plain SQL: the library installed here is the new one, which
# refuses to run against 0.1.0's objects. Last, a database created at 0.2.0 or at 0.3.0 (the
# last release) and updated has exactly the objects of a new install: every member of the
# extension with its definition, columns, indexes, constraints, triggers and privileges.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
cluster_setup test-cluster/upgrade-chain 54474
source "$(dirname "${BASH_SOURCE[0]}")/lib/prelude.sh" cluster
# The version a new install makes (the library serves that one only).
CURRENT=$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$IDEM_ROOT/idempotency.control")
expect_error() { # expect_error WHAT TEXT DB SQL: SQL fails and its error contains TEXT
  local out
  if out=$(q -d "$3" -c "$4" 2>&1); then fail "$1: succeeded ($out)"; fi
  [[ $out == *"$2"* ]] || fail "$1: unexpected error: $out"
  passed "$1"
}
pgtool() {
  as_pg env PGHOST="$CLUSTER_SOCK" PGPORT="$CLUSTER_PORT" PGUSER=postgres "$PGBIN/$1" "${@:2}"
}

rm -f "$CLUSTER_LOG"
cluster_init "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" "fsync = off"
cluster_start "$CLUSTER_DATA"
WORK=$(mktemp -d /tmp/idem-upgrade-XXXXXX)
if is_root; then chown postgres: "$WORK"; fi

# Rows in every state, as 0.1.0's library wrote them; partitions as 0.1.0's maintain() made
# them (a partition of the parent, whose primary key gives it one).
partitions_010() {
  q -d "$1" >/dev/null <<'SQL'
DO $$
DECLARE d date;
BEGIN
    FOR d IN SELECT g::date FROM generate_series(current_date, current_date + 3, '1 day') g LOOP
        EXECUTE format('CREATE TABLE idempotency.%I PARTITION OF idempotency.keys FOR VALUES FROM (%L) TO (%L)',
                       'keys_p' || to_char(d, 'YYYY_MM_DD'), d::timestamp AT TIME ZONE 'UTC',
                       (d + 1)::timestamp AT TIME ZONE 'UTC');
    END LOOP;
END $$;
SQL
}
fill_010() {
  q -d "$1" >/dev/null <<'SQL'
INSERT INTO idempotency.keys (scope, key, state, attempt, request_hash, status_code, response,
    recovery_point, last_error, first_seen_at, completed_at, locked_until, expires_at) VALUES
 ('up', 'completed', 'completed', 1, '\xab01', 201, '{"id": 7}', NULL, NULL,
    now() - interval '1 hour', now() - interval '59 minutes', NULL, now() + interval '1 day'),
 ('up', 'processing', 'processing', 1, NULL, NULL, NULL, 'step-2', NULL,
    now() - interval '1 minute', NULL, now() + interval '1 hour', now() + interval '1 day'),
 ('up', 'failed', 'failed', 2, NULL, NULL, NULL, NULL, '{"error": "timeout"}',
    now() - interval '2 hours', NULL, NULL, now() + interval '2 days'),
 ('up', 'abandoned', 'processing', 3, NULL, NULL, NULL, 'charged', NULL,
    now() - interval '3 hours', NULL, now() - interval '1 hour', now() + interval '2 days'),
 ('up', 'in-default', 'completed', 1, NULL, 200, '[1, 2]', NULL, NULL,
    now(), now(), NULL, now() + interval '200 days');
INSERT INTO idempotency.streams VALUES ('orders', 10, 30), ('empty', 100, 0);
INSERT INTO idempotency.consumer_positions VALUES
 ('billing', 'p0', '00000000-0000-0000-0000-000000000029'),
 ('audit', 'wal', '00000000-016b-3748-0000-0000016b3700');
SQL
}
snapshot() {
  q -d "$1" -c "SELECT scope, key, state, attempt, request_hash, status_code, response, recovery_point,
      last_error, first_seen_at, completed_at, locked_until, expires_at, tableoid::regclass
      FROM idempotency.keys ORDER BY scope, key" \
    -c "SELECT * FROM idempotency.streams ORDER BY 1" \
    -c "SELECT consumer, partition, position FROM idempotency.consumer_positions ORDER BY 1, 2"
}

# --- a plain database at 0.1.0
q -d postgres -c "CREATE DATABASE up"
q -d up -c "CREATE EXTENSION idempotency VERSION '0.1.0'"
expect "installed at 0.1.0" "$(q -d up -c "SELECT extversion FROM pg_extension WHERE extname = 'idempotency'")" 0.1.0
partitions_010 up
fill_010 up
snapshot up >"$WORK/before"

# A dump taken at 0.1.0 (before the update), for the restore checks below.
pgtool pg_dump -Fc -d up -f "$WORK/up-010.dump"

# The new library refuses every call, naming the fix.
for call in "SELECT idempotency.reserve('up', 'x')" "SELECT * FROM idempotency.lookup('up', 'completed')" \
  "SELECT idempotency.complete('up', 'processing', 200, '{}')" "SELECT idempotency.next_key('orders')" \
  "SELECT idempotency.accept('billing', 'p0', 1::bigint)" "SELECT * FROM idempotency.maintain()" \
  "SELECT idempotency.fingerprint('{}'::jsonb)" "SELECT * FROM idempotency.stats"; do
  expect_error "0.1.0 objects, new library: $call refused" \
    "idempotency 0.1.0 is installed in this database, but the loaded library is $CURRENT" up "$call"
done
out=$(q -d up -c "SELECT idempotency.next_key('orders')" 2>&1 -v VERBOSITY=verbose || true)
[[ $out == *55000* && $out == *"HINT:  Run ALTER EXTENSION idempotency UPDATE TO '$CURRENT' in this database."* ]] ||
  fail "the refusal lacks its SQLSTATE or hint: $out"
passed "the refusal is SQLSTATE 55000 with the hint"

# A version that does not exist: PostgreSQL's own error, nothing changed.
expect_error "UPDATE TO '9.9' is PostgreSQL's error" \
  'extension "idempotency" has no update path from version "0.1.0" to version "9.9"' up \
  "ALTER EXTENSION idempotency UPDATE TO '9.9'"

# One session asks (refused, the verdict cached), another session updates, the first one's
# next call works: the cached verdict follows the update.
out=$(q -d up -v ON_ERROR_STOP=0 <<SQL 2>&1 || true
SELECT idempotency.next_key('empty');
\! env PGHOST=$CLUSTER_SOCK PGPORT=$CLUSTER_PORT PGUSER=postgres $PGBIN/psql -X -qAt -d up -c "ALTER EXTENSION idempotency UPDATE"
SELECT 'after:' || idempotency.next_key('empty');
SQL
)
[[ $out == *"is installed in this database"* && $out == *"after:1"* ]] ||
  fail "a session that was refused does not see the update: $out"
passed "a refused session works once another session updated"
expect "updated to $CURRENT" "$(q -d up -c "SELECT extversion FROM pg_extension WHERE extname = 'idempotency'")" "$CURRENT"

# Every record as before (next_key('empty') moved that stream's bound only).
snapshot up | sed 's/^empty|100|100$/empty|100|0/' >"$WORK/after"
diff -u "$WORK/before" "$WORK/after" || fail "records changed by the update"
passed "every key, stream and watermark unchanged by the update"
expect "the parent has no primary key; every partition has its own" \
  "$(q -d up -c "SELECT (SELECT count(*) FROM pg_index WHERE indrelid = 'idempotency.keys'::regclass)
     || ',' || (SELECT count(*) FROM pg_inherits i WHERE inhparent = 'idempotency.keys'::regclass
        AND NOT EXISTS (SELECT FROM pg_index x WHERE x.indrelid = i.inhrelid AND x.indisprimary))")" "0,0"
expect "the upgraded calls read the records" \
  "$(q -d up -c "SELECT (idempotency.reserve('up', 'completed', '\xab01')).outcome || ',' ||
       (idempotency.reserve('up', 'processing')).outcome || ',' ||
       (SELECT attempt || ':' || recovery_point FROM idempotency.reserve('up', 'abandoned')) || ',' ||
       (SELECT attempt FROM idempotency.reserve('up', 'failed')) || ',' ||
       (SELECT status_code FROM idempotency.lookup('up', 'in-default')) || ',' ||
       (idempotency.next_key('orders') > 30) || ',' ||
       idempotency.accept('billing', 'p0', 41::bigint) || ',' || idempotency.accept('billing', 'p0', 42::bigint) || ',' ||
       idempotency.accept('audit', 'wal', idempotency.lsn_key('0/16B3748', '0/16B3700'))")" \
  "replay,in_progress,4:charged,3,200,true,false,true,false"
expect "maintain() runs in the upgraded database" \
  "$(q -d up -c "SELECT count(*) FROM idempotency.maintain() WHERE action = 'failed'")" 0

# The partitions 0.1.0 made now dump and restore.
pgtool pg_dump -Fc -d up -f "$WORK/up.dump"
q -d postgres -c "CREATE DATABASE up_restored"
out=$(pgtool pg_restore -d up_restored "$WORK/up.dump" 2>&1) || fail "restore of the upgraded database: $out"
[[ -z $out ]] || fail "restore printed: $out"
expect "the upgraded database's dump restores every key" \
  "$(q -d up_restored -c "SELECT count(*) FROM idempotency.keys")" "$(q -d up -c "SELECT count(*) FROM idempotency.keys")"

# A dump taken at 0.1.0 into a server with the current files: CREATE EXTENSION makes those, whose
# parent has no primary key, so the dump's partitions and their keys restore, and the only
# errors are the dump's ALTER INDEX keys_pkey ATTACH PARTITION, one per partition (harmless:
# the partition keeps its key). The default partition's rows were never in a 0.1.0 dump.
q -d postgres -c "CREATE DATABASE up_from_010"
out=$(pgtool pg_restore -d up_from_010 "$WORK/up-010.dump" 2>&1) && fail "a 0.1.0 dump restored with no error"
others=$(grep '^pg_restore: error:' <<<"$out" | grep -v 'relation "idempotency.keys_pkey" does not exist' || true)
[[ -z $others && $(grep -c 'keys_pkey" does not exist' <<<"$out") == 4 ]] ||
  fail "restore of a 0.1.0 dump: other errors than the 4 index attachments: $out"
passed "a 0.1.0 dump restores with one harmless error per partition (ALTER INDEX keys_pkey ATTACH)"
expect "a 0.1.0 dump restores into $CURRENT: every key of the dated partitions, none of the default's" \
  "$(q -d up_from_010 -c "SELECT extversion FROM pg_extension WHERE extname = 'idempotency'")|$(q -d up_from_010 -c "SELECT string_agg(key, ',' ORDER BY key) FROM idempotency.keys")" \
  "$CURRENT|abandoned,completed,failed,processing"

# Bad input: a restore into a database where another version (0.1.0) is installed. The dump's
# CREATE EXTENSION IF NOT EXISTS does nothing there, and 0.1.0's table refuses the partitions.
q -d postgres -c "CREATE DATABASE up_into_010"
q -d up_into_010 -c "CREATE EXTENSION idempotency VERSION '0.1.0'"
out=$(pgtool pg_restore -d up_into_010 "$WORK/up.dump" 2>&1) && fail "a $CURRENT dump restored into 0.1.0 without an error"
[[ $out == *"multiple primary keys"* ]] || fail "unexpected error restoring into 0.1.0: $out"
passed "a $CURRENT dump into a 0.1.0 database fails (multiple primary keys)"
# The documented procedure: pg_restore --clean --if-exists, which drops the installed 0.1.0
# (with whatever keys it held) and creates the extension at the version of the installed
# files. (Updating the target first does not do: the dump's CREATE SCHEMA idempotency then
# fails, as into any database that has the extension.)
q -d postgres -c "CREATE DATABASE up_into_010b"
q -d up_into_010b -c "CREATE EXTENSION idempotency VERSION '0.1.0'"
out=$(pgtool pg_restore --clean --if-exists -d up_into_010b "$WORK/up.dump" 2>&1) ||
  fail "pg_restore --clean --if-exists into a 0.1.0 database: $out"
[[ -z $out ]] || fail "pg_restore --clean --if-exists into a 0.1.0 database printed: $out"
snapshot up_restored >"$WORK/restored-a"
snapshot up_into_010b >"$WORK/restored-b"
diff -u "$WORK/restored-a" "$WORK/restored-b" || fail "restore with --clean differs from one into an empty database"
expect "pg_restore --clean --if-exists into the 0.1.0 database: $CURRENT with every record" \
  "$(q -d up_into_010b -c "SELECT extversion FROM pg_extension WHERE extname = 'idempotency'")" "$CURRENT"

# 0.1.0's use_partman() spoke pg_partman 4.x only: with 5.x (PostgreSQL 17 and 18 here) no
# such database can exist.
partman_major=$(q -d postgres -c "SELECT split_part(default_version, '.', 1) FROM pg_available_extensions WHERE name = 'pg_partman'")
if [[ $partman_major -ge 5 ]]; then
  echo "not applicable: a 0.1.0 database managed by pg_partman $partman_major.x (0.1.0 spoke 4.x only)"
else
# --- a database whose keys pg_partman manages, as 0.1.0's use_partman() left it: pg_partman's
# own default partition (no member of the extension), a template without a primary key.
q -d postgres -c "CREATE DATABASE up_partman"
q -d up_partman >/dev/null <<'SQL'
SET client_min_messages = warning;
CREATE EXTENSION idempotency VERSION '0.1.0';
CREATE SCHEMA partman;
CREATE EXTENSION pg_partman SCHEMA partman;
ALTER TABLE idempotency.keys DETACH PARTITION idempotency.keys_default;
ALTER EXTENSION idempotency DROP TABLE idempotency.keys_default;
DROP TABLE idempotency.keys_default;
SET TimeZone = 'UTC';
SELECT partman.create_parent('idempotency.keys', 'expires_at', 'native', '24 hours',
    p_premake => 3, p_jobmon => false, p_start_partition => date_trunc('day', now())::text);
SQL
fill_010 up_partman
q -d up_partman >/dev/null <<'SQL'
INSERT INTO idempotency.keys (scope, key, state, attempt, first_seen_at, expires_at)
    SELECT 'pm', 'k' || g, 'completed', 1, now(), now() + g * interval '1 hour' FROM generate_series(1, 90) g;
INSERT INTO idempotency.keys (scope, key, state, attempt, first_seen_at, expires_at)
    VALUES ('pm', 'far', 'completed', 1, now(), now() + interval '200 days');
SQL
snapshot up_partman >"$WORK/before-pm"
q -d up_partman -c "ALTER EXTENSION idempotency UPDATE"
snapshot up_partman >"$WORK/after-pm"
diff -u "$WORK/before-pm" "$WORK/after-pm" || fail "records changed by the update (pg_partman)"
passed "pg_partman database: records unchanged by the update"
expect "pg_partman's default partition now belongs to the extension, its rows dumped" \
  "$(q -d up_partman -c "SELECT count(*) FROM pg_extension e, unnest(e.extconfig) c WHERE e.extname = 'idempotency' AND c = 'idempotency.keys_default'::regclass")" 1
expect "pg_partman's template has the primary key" \
  "$(q -d up_partman -c "SELECT count(*) FROM pg_index WHERE indrelid = 'partman.template_idempotency_keys'::regclass AND indisprimary")" 1
expect "maintain() (rows of the default partition into partitions, then pg_partman) after the update" \
  "$(q -d up_partman -c "SELECT count(*) FROM idempotency.maintain() WHERE action = 'failed'")" 0
expect "partitions pg_partman makes after the update have a primary key" \
  "$(q -d up_partman -c "SELECT count(*) FROM pg_inherits i WHERE inhparent = 'idempotency.keys'::regclass
        AND NOT EXISTS (SELECT FROM pg_index x WHERE x.indrelid = i.inhrelid AND x.indisprimary)")" 0
snapshot up_partman >"$WORK/dumped-pm"
pgtool pg_dump -Fc -d up_partman -f "$WORK/pm.dump"
q -d postgres -c "CREATE DATABASE pm_restored"
out=$(pgtool pg_restore -d pm_restored "$WORK/pm.dump" 2>&1) || fail "restore of the upgraded pg_partman database: $out"
[[ -z $out ]] || fail "restore printed: $out"
snapshot pm_restored >"$WORK/restored-pm"
diff -u "$WORK/dumped-pm" "$WORK/restored-pm" || fail "the restored pg_partman database differs"
passed "the upgraded pg_partman database dumps and restores every record"
fi

# --- a database created at 0.2.0 and updated has the objects of a new install
# objects DB: each member of the extension, described with everything that defines it.
objects() {
  q -d "$1" <<'SQL'
WITH members AS (
  SELECT classid, objid FROM pg_depend
  WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
    AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'idempotency'))
SELECT pg_describe_object(m.classid, m.objid, 0) || ' | ' || coalesce(CASE
    WHEN m.classid = 'pg_proc'::regclass THEN
      (SELECT pg_get_functiondef(p.oid) || coalesce(p.proacl::text, '') FROM pg_proc p WHERE p.oid = m.objid)
    WHEN m.classid = 'pg_class'::regclass THEN
      (SELECT c.relkind::text || c.relpersistence::text || c.relreplident::text || coalesce(c.relacl::text, '') ||
         coalesce(pg_get_viewdef(c.oid), '') || coalesce(pg_get_partkeydef(c.oid), '') ||
         coalesce((SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod) ||
             CASE WHEN a.attnotnull THEN ' not null' ELSE '' END ||
             coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '') ||
             coalesce(' ' || a.attacl::text, ''), ', ' ORDER BY a.attnum)
           FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
           WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped), '') ||
         coalesce((SELECT string_agg(pg_get_indexdef(i.indexrelid), '; ' ORDER BY 1)
           FROM pg_index i WHERE i.indrelid = c.oid), '') ||
         coalesce((SELECT string_agg(x.conname || ' ' || pg_get_constraintdef(x.oid), '; ' ORDER BY 1)
           FROM pg_constraint x WHERE x.conrelid = c.oid), '') ||
         coalesce((SELECT string_agg(pg_get_triggerdef(t.oid) || ' ' || t.tgenabled::text, '; ' ORDER BY 1)
           FROM pg_trigger t WHERE t.tgrelid = c.oid AND NOT t.tgisinternal), '') ||
         coalesce((SELECT string_agg(r.rulename || ' ' || pg_get_ruledef(r.oid), '; ' ORDER BY 1)
           FROM pg_rewrite r WHERE r.ev_class = c.oid AND r.rulename <> '_RETURN'), '') ||
         coalesce((SELECT string_agg(pol.polname || ' ' || pol.polcmd::text || ' ' ||
             coalesce(pg_get_expr(pol.polqual, pol.polrelid), ''), '; ' ORDER BY 1)
           FROM pg_policy pol WHERE pol.polrelid = c.oid), '')
       FROM pg_class c WHERE c.oid = m.objid)
    WHEN m.classid = 'pg_type'::regclass THEN
      (SELECT t.typtype::text || coalesce(t.typacl::text, '') ||
         coalesce((SELECT string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder) FROM pg_enum e WHERE e.enumtypid = t.oid), '')
       FROM pg_type t WHERE t.oid = m.objid)
    WHEN m.classid = 'pg_namespace'::regclass THEN
      (SELECT coalesce(n.nspacl::text, '') FROM pg_namespace n WHERE n.oid = m.objid)
    END, '')
FROM members m ORDER BY 1;
SQL
}
q -d postgres -c "CREATE DATABASE at_new"
q -d at_new -c "CREATE EXTENSION idempotency"
objects at_new >"$WORK/objects-new"
[[ $(wc -l <"$WORK/objects-new") -gt 20 ]] || fail "the object listing of a new install is too short"
for from in 0.2.0 0.3.0; do
  db=at_${from//./}
  q -d postgres -c "CREATE DATABASE $db"
  q -d "$db" -c "CREATE EXTENSION idempotency VERSION '$from'" -c "ALTER EXTENSION idempotency UPDATE"
  expect "$from updated to $CURRENT" \
    "$(q -d "$db" -c "SELECT extversion FROM pg_extension WHERE extname = 'idempotency'")" "$CURRENT"
  objects "$db" >"$WORK/objects-updated-$from"
  diff -u "$WORK/objects-new" "$WORK/objects-updated-$from" ||
    fail "a database updated from $from differs from a new install"
  passed "a database updated from $from has the objects of a new install ($(wc -l <"$WORK/objects-new") objects)"
done

# --- the regression suite in a database created at 0.1.0 and updated
q -d postgres -c "CREATE DATABASE contrib_regression"
q -d contrib_regression -c "CREATE EXTENSION idempotency VERSION '0.1.0'" -c "ALTER EXTENSION idempotency UPDATE"
rc=0
make -C "$IDEM_ROOT" installcheck PG_CONFIG="$PG_CONFIG" ISOLATION= TAP_TESTS= \
  EXTRA_REGRESS_OPTS="--use-existing --host=$CLUSTER_SOCK --port=$CLUSTER_PORT --user=postgres" \
  >"$WORK/regress.log" 2>&1 || rc=$?
grep -E '^(test +| +)[^ ]+ +\.\.\. ' "$WORK/regress.log" || true
if [[ $rc -ne 0 ]]; then
  cat "$WORK/regress.log"
  [[ -f $IDEM_ROOT/regression.diffs ]] && head -n 60 "$IDEM_ROOT/regression.diffs"
  fail "the regression suite failed in the upgraded database"
fi
passed "the regression suite passes in a database updated from 0.1.0"
echo "upgrade_chain: $CHECKS checks passed"
