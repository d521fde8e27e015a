#!/usr/bin/env bash
# The managed suite: the managed edition (editions/managed) on a PostgreSQL with pg_tle and no
# idempotency library at all (a copy of $PG_CONFIG's server, test/managed/lib.sh), installed
# by a role that is not a superuser, both ways:
#   - through pg_tle: pgtle.install_extension, CREATE EXTENSION, an update path through
#     pgtle.install_update_path and ALTER EXTENSION UPDATE;
#   - as a plain script: psql -1 -f;
# then the conformance files (the extension's own regression files and isolation specs, from
# sql/ and test/isolation/, compared with the extension's expected output or, where
# docs/managed.md lists a difference, the edition's own) and the move of a database from the
# edition to the extension (test/managed/move.sh), the scripted test of key calls beside
# maintain()'s lock (test/scripted/maintain_lock_queue.sh), and the Python and Node clients' suites
# against the edition, as a role that is not a superuser.
# Prints "ok"/"FAILED" per check and ends with "# passed N failed M".
set -uo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
# shellcheck source=test/managed/lib.sh
source "$IDEM_ROOT/test/managed/lib.sh"
# shellcheck source=test/managed/conformance.sh
source "$IDEM_ROOT/test/managed/conformance.sh"
cd "$IDEM_ROOT" || exit 1

# The regression files and isolation specs that define the behaviour both editions share.
REGRESS_FILES="lifecycle lifecycle_edges claim_once execute_once fingerprint fingerprint_vectors bad_input
  errors watermarks roles views partitions failed_keys expiry"
# The edition's own tests, of what only it has (editions/managed/sql).
REGRESS_FILES+=" managed_streams managed_strings managed_execute_once managed_any_language"
ISOLATION_SPECS="reserve_wait takeover rollback_no_trace claim_once_wait accept_concurrent
  repeatable_read maintain_lock takeover_maintain execute_once_race"

PASSED=0
FAILED=0
OUT=$MANAGED_DIR/results
# The edition's version: the extension's (idempotency.control), and the release before it.
VERSION=$(sed -n "s/^default_version = '\(.*\)'$/\1/p" idempotency.control)
PREVIOUS=0.3.0
pass() { PASSED=$((PASSED + 1)); echo "ok     $*"; }
fail() { FAILED=$((FAILED + 1)); echo "FAILED $*"; }
check() { # check WHAT COMMAND...: one pass or failure
  local what=$1
  shift
  if "$@" >"$OUT/check.log" 2>&1; then pass "$what"; else fail "$what"; sed 's/^/    /' "$OUT/check.log"; fi
}

finish() {
  managed_cluster_stop
  echo "# passed $PASSED failed $FAILED"
  [[ $FAILED -eq 0 ]]
}
trap 'managed_cluster_stop' EXIT

mkdir -p "$MANAGED_DIR"
rm -rf "$OUT" && mkdir -p "$OUT"
if ! managed_server; then
  fail "a copy of $("$PG_CONFIG" --version) with pg_tle built from $PG_TLE_ARCHIVE"
  finish
  exit 1
fi
if ! managed_cluster_start 54470; then
  fail "the managed cluster did not start"
  finish
  exit 1
fi

# The provider's side, as on RDS or Supabase: pg_tle preloaded, its extension created by the
# platform's admin; the database's admin role gets pgtle_admin and nothing more.
mpsql -d postgres -q -c "CREATE ROLE idem_dbadmin LOGIN CREATEROLE NOSUPERUSER" \
  -c "CREATE ROLE idem_other LOGIN NOSUPERUSER" || { fail "roles"; finish; exit 1; }
# new_db DB: a database owned by the admin role, with pg_tle; mpsql_admin: psql as that role.
new_db() {
  mpsql -d postgres -q -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS \"$1\"" \
    -c "CREATE DATABASE \"$1\" OWNER idem_dbadmin" &&
    mpsql -d "$1" -q -c "SET client_min_messages = warning" -c "CREATE EXTENSION pg_tle" \
      -c "GRANT pgtle_admin TO idem_dbadmin"
}
mpsql_admin() { mpsql -U idem_dbadmin "$@"; }
# install_tle DB / install_plain DB: the edition, as the admin role.
install_tle() {
  (cd editions/managed && mpsql_admin -d "$1" -q -f install_pg_tle.sql >/dev/null) &&
    mpsql_admin -d "$1" -q -c "CREATE EXTENSION idempotency"
}
install_plain() { mpsql_admin -d "$1" -q -1 -f "editions/managed/idempotency--$VERSION.sql"; }

# --- the two installs ---------------------------------------------------------------------

check "the install script is what editions/managed/src assembles (editions/managed/build.sh --check)" \
  bash editions/managed/build.sh --check

# Every object of schema idempotency: kind, name, arguments, result.
objects_of() {
  mpsql -d "$1" -At -c "
    SELECT 'function ' || p.oid::regprocedure || ' -> ' || pg_get_function_result(p.oid)
      FROM pg_proc p WHERE p.pronamespace = 'idempotency'::regnamespace
    UNION ALL SELECT 'relation ' || c.relkind::text || ' ' || c.relname
      FROM pg_class c WHERE c.relnamespace = 'idempotency'::regnamespace
       AND c.relkind IN ('r', 'p', 'v', 'S')
    UNION ALL SELECT 'type ' || t.typname FROM pg_type t
      WHERE t.typnamespace = 'idempotency'::regnamespace AND t.typtype IN ('c', 'e')
       AND NOT EXISTS (SELECT FROM pg_class c WHERE c.reltype = t.oid)
    ORDER BY 1"
}

installed_by_non_superuser() {
  [[ $(mpsql -d "$1" -At -c "SELECT r.rolsuper FROM pg_namespace n JOIN pg_roles r ON r.oid = n.nspowner
                              WHERE n.nspname = 'idempotency'") == f ]] &&
    [[ $(mpsql -d "$1" -At -c "SELECT count(*) FROM pg_class c JOIN pg_roles r ON r.oid = c.relowner
                              WHERE c.relnamespace = 'idempotency'::regnamespace AND r.rolsuper") == 0 ]]
}

# key_in_dated_partition DB WHAT: a key reserved right after the install or update WHAT
# lands in a dated partition (the install makes them), not in keys_default.
key_in_dated_partition() {
  local where
  mpsql_admin -d "$1" -q -c "SELECT idempotency.reserve('installed', 'first')" >/dev/null &&
    where=$(mpsql -d "$1" -At -c "SELECT tableoid::regclass FROM idempotency.keys
                                   WHERE scope = 'installed' AND key = 'first'") &&
    echo "the key is in $where" && [[ $where == idempotency.keys_p* ]]
}

new_db managed_tle && check "pg_tle: install_extension + CREATE EXTENSION as a non-superuser" install_tle managed_tle
extension_version() { # extension_version DB WANT
  [[ $(mpsql -d "$1" -At -c "SELECT extversion FROM pg_extension WHERE extname = 'idempotency'") == "$2" ]]
}
check "pg_tle: the extension is idempotency $VERSION" extension_version managed_tle "$VERSION"
check "pg_tle: every object installed by the admin role, not a superuser" installed_by_non_superuser managed_tle
no_library() { ! compgen -G "$MANAGED_ROOT$("$PG_CONFIG" --pkglibdir)/idempotency*" >/dev/null; }
check "pg_tle: no idempotency library exists on this server" no_library
new_db managed_plain && check "psql -f: the plain script as a non-superuser" install_plain managed_plain
check "psql -f: every object installed by the admin role, not a superuser" installed_by_non_superuser managed_plain
check "pg_tle: a key reserved right after the install is in a dated partition, not keys_default" \
  key_in_dated_partition managed_tle
check "psql -f: a key reserved right after the install is in a dated partition, not keys_default" \
  key_in_dated_partition managed_plain
objects_of managed_tle >"$OUT/objects-tle.txt"
objects_of managed_plain >"$OUT/objects-plain.txt"
check "both installs end with the same objects ($(wc -l <"$OUT/objects-tle.txt") of them)" \
  diff -u "$OUT/objects-tle.txt" "$OUT/objects-plain.txt"

# The clients' one edition statement (test/vectors/statements.json, "edition") tells each
# install: through pg_tle (a pg_extension row), as a plain script (the schema's comment), and
# none, as the admin role.
EDITION_SQL=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["statements"]["edition"]["sql"])' \
  test/vectors/statements.json)
edition_is() { # edition_is DB WANT: edition|version|installed_as
  [[ $(mpsql_admin -d "$1" -At -c "SELECT edition, version, installed_as FROM ($EDITION_SQL) AS e") == "$2" ]] &&
    [[ $(mpsql_admin -d "$1" -At -c "SELECT functions FROM ($EDITION_SQL) AS e") != *reserve_begin* ]]
}
check "the edition statement: pg_tle's install is managed $VERSION, created as an extension" \
  edition_is managed_tle "managed|$VERSION|extension"
check "the edition statement: the plain script is managed $VERSION, run as a script" \
  edition_is managed_plain "managed|$VERSION|script"
new_db managed_none >/dev/null
check "the edition statement: a database without the edition says none, raising nothing" \
  edition_is managed_none "||"

# --- updates from the previous release ----------------------------------------------------
# A database at $PREVIOUS (the script that release shipped, test/managed/released/) with a
# completed key, updated both ways: through pg_tle (update_pg_tle.sql, ALTER EXTENSION UPDATE)
# and with psql -f of the update script. Each ends with the objects of a new install made the
# same way (every object of the schema with its definition, privileges and extension
# membership), keeps its key, and the edition statement reads the new version.
definitions_of() {
  mpsql -d "$1" -At <<'SQL'
SELECT kind || ' ' || name || ' | ' || coalesce(definition, '') || ' | member ' ||
       EXISTS (SELECT FROM pg_depend d WHERE d.classid = o.classid AND d.objid = o.objid
               AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e')
FROM (
  SELECT 'pg_proc'::regclass AS classid, p.oid AS objid, 'function' AS kind,
         p.oid::regprocedure::text AS name,
         pg_get_functiondef(p.oid) || coalesce(p.proacl::text, '') AS definition
    FROM pg_proc p WHERE p.pronamespace = 'idempotency'::regnamespace
  UNION ALL
  SELECT 'pg_class'::regclass, c.oid, 'relation ' || c.relkind::text, c.relname::text,
         c.relpersistence::text || c.relreplident::text || coalesce(c.relacl::text, '') ||
         coalesce(pg_get_viewdef(c.oid), '') || coalesce(pg_get_partkeydef(c.oid), '') ||
         coalesce(pg_get_expr(c.relpartbound, c.oid), '') ||
         coalesce(array_to_string(c.reloptions, ','), '') ||
         coalesce((SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod) ||
             CASE WHEN a.attnotnull THEN ' not null' ELSE '' END ||
             coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '') ||
             coalesce(' collate ' || nullif(a.attcollation, 0)::regcollation::text, '') ||
             coalesce(' ' || a.attacl::text, ''), ', ' ORDER BY a.attnum)
           FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
           WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped), '') ||
         coalesce((SELECT string_agg(pg_get_indexdef(i.indexrelid), '; ' ORDER BY pg_get_indexdef(i.indexrelid))
           FROM pg_index i WHERE i.indrelid = c.oid), '') ||
         coalesce((SELECT string_agg(x.conname || ' ' || pg_get_constraintdef(x.oid), '; ' ORDER BY x.conname)
           FROM pg_constraint x WHERE x.conrelid = c.oid), '') ||
         coalesce((SELECT string_agg(pg_get_triggerdef(t.oid) || ' ' || t.tgenabled::text, '; ' ORDER BY t.tgname)
           FROM pg_trigger t WHERE t.tgrelid = c.oid AND NOT t.tgisinternal), '')
    FROM pg_class c WHERE c.relnamespace = 'idempotency'::regnamespace
  UNION ALL
  SELECT 'pg_type'::regclass, t.oid, 'type ' || t.typtype::text, t.typname::text,
         coalesce(t.typacl::text, '') ||
         coalesce((SELECT string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder)
                   FROM pg_enum e WHERE e.enumtypid = t.oid), '')
    FROM pg_type t WHERE t.typnamespace = 'idempotency'::regnamespace
     AND NOT EXISTS (SELECT FROM pg_class c WHERE c.reltype = t.oid) AND t.typtype <> 'b'
  UNION ALL
  SELECT 'pg_namespace'::regclass, n.oid, 'schema', n.nspname::text,
         coalesce(n.nspacl::text, '') || ' ' || coalesce(obj_description(n.oid, 'pg_namespace'), '')
    FROM pg_namespace n WHERE n.nspname = 'idempotency'
) o
ORDER BY 1;
SQL
}
install_previous_tle() {
  mpsql_admin -d "$1" -q -v ON_ERROR_STOP=1 >/dev/null <<SQL &&
\\set prev \`cat test/managed/released/idempotency--$PREVIOUS.sql\`
SELECT pgtle.install_extension('idempotency', '$PREVIOUS', 'managed edition', :'prev');
SQL
    mpsql_admin -d "$1" -q -c "CREATE EXTENSION idempotency"
}
with_key() { # a completed key, read back after the update
  mpsql_admin -d "$1" -q -c "SELECT idempotency.reserve('upd', 'k1')" \
    -c "SELECT idempotency.complete('upd', 'k1', 201, '{\"id\": 1}')" >/dev/null
}
key_kept() {
  [[ $(mpsql -d "$1" -At -c "SELECT state, status_code, response FROM idempotency.keys WHERE key = 'k1'") == \
    'completed|201|{"id": 1}' ]]
}
update_tle() {
  (cd editions/managed && mpsql_admin -d "$1" -q -v ON_ERROR_STOP=1 -f update_pg_tle.sql >/dev/null) &&
    mpsql_admin -d "$1" -q -c "ALTER EXTENSION idempotency UPDATE"
}
update_plain() {
  mpsql_admin -d "$1" -q -v ON_ERROR_STOP=1 -1 -f "editions/managed/idempotency--$PREVIOUS--$VERSION.sql"
}
# The partitions an install makes are named and bounded by the day it ran: a fresh install and
# an updated one made either side of midnight UTC differ there only.
undated() { sed -E 's/keys_p[0-9_]+/keys_p<day>/g; s/[0-9]{4}-[0-9]{2}-[0-9]{2}[0-9 :.+]*/<day>/g'; }
same_objects() { # same_objects FRESH UPDATED
  definitions_of "$1" | undated >"$OUT/definitions-$1.txt" &&
    definitions_of "$2" | undated >"$OUT/definitions-$2.txt" &&
    [[ $(wc -l <"$OUT/definitions-$1.txt") -gt 100 ]] &&
    diff -u "$OUT/definitions-$1.txt" "$OUT/definitions-$2.txt"
}
new_db upd_tle >/dev/null && check "pg_tle: $PREVIOUS installed from the script that release shipped" install_previous_tle upd_tle
check "pg_tle: a key completed at $PREVIOUS" with_key upd_tle
check "pg_tle: update_pg_tle.sql + ALTER EXTENSION UPDATE as a non-superuser" update_tle upd_tle
check "pg_tle: the updated extension is idempotency $VERSION" extension_version upd_tle "$VERSION"
check "pg_tle: the key completed at $PREVIOUS reads back after the update" key_kept upd_tle
check "pg_tle: a key reserved right after the update is in a dated partition, not keys_default" \
  key_in_dated_partition upd_tle
check "the edition statement: pg_tle's updated install is managed $VERSION" \
  edition_is upd_tle "managed|$VERSION|extension"
new_db fresh_tle >/dev/null && install_tle fresh_tle >/dev/null
check "pg_tle: an install updated from $PREVIOUS has the objects of a new install" same_objects fresh_tle upd_tle
new_db upd_plain >/dev/null &&
  check "psql -f: $PREVIOUS installed from the script that release shipped" \
    mpsql_admin -d upd_plain -q -1 -f "test/managed/released/idempotency--$PREVIOUS.sql"
check "psql -f: a key completed at $PREVIOUS" with_key upd_plain
check "psql -f: the update script as a non-superuser" update_plain upd_plain
check "psql -f: the key completed at $PREVIOUS reads back after the update" key_kept upd_plain
check "psql -f: a key reserved right after the update is in a dated partition, not keys_default" \
  key_in_dated_partition upd_plain
check "the edition statement: the updated plain script is managed $VERSION" \
  edition_is upd_plain "managed|$VERSION|script"
new_db fresh_plain >/dev/null && install_plain fresh_plain >/dev/null
check "psql -f: an install updated from $PREVIOUS has the objects of a new install" same_objects fresh_plain upd_plain

# A role without grants cannot touch keys; DROP EXTENSION leaves nothing behind.
no_grant() {
  mpsql_admin -d managed_plain -q -c "GRANT USAGE ON SCHEMA idempotency TO idem_other" &&
    ! mpsql -U idem_other -d managed_plain -q -c "SELECT idempotency.reserve('x', 'y')" 2>/dev/null &&
    mpsql -U idem_other -d managed_plain -q -c "SELECT idempotency.fingerprint('{}'::jsonb)" >/dev/null
}
check "psql -f: a role without grants may fingerprint but not reserve" no_grant
drop_ext() {
  mpsql_admin -d managed_tle -q -c "DROP EXTENSION idempotency" &&
    [[ $(mpsql -d managed_tle -At -c "SELECT count(*) FROM pg_namespace WHERE nspname = 'idempotency'") == 0 ]]
}
check "pg_tle: DROP EXTENSION removes the schema" drop_ext

# --- conformance: the extension's regression files and isolation specs -------------------

for t in $REGRESS_FILES; do
  db=conf_$t
  if ! { new_db "$db" && conformance_db "$db" && install_tle "$db" && conformance_fresh "$db"; } \
    >"$OUT/$t.install.log" 2>&1; then
    fail "conformance $t: the edition did not install"
    sed 's/^/    /' "$OUT/$t.install.log"
    continue
  fi
  conformance_run "$db" "$t" "$OUT"
  expected=$(conformance_expected "$t")
  if conformance_diff "$expected" "$OUT/$t.out" >"$OUT/$t.diff"; then
    pass "conformance sql/$t.sql (${expected#"$IDEM_ROOT"/})"
  else
    fail "conformance sql/$t.sql (${expected#"$IDEM_ROOT"/}), diff:"
    sed 's/^/    /' "$OUT/$t.diff" | head -n 80
  fi
  mpsql -d postgres -q -c "DROP DATABASE IF EXISTS \"$db\"" >/dev/null 2>&1
done

# --- any server language ---------------------------------------------------------------------
# No behaviour of the edition reads the wording of a server message (it follows lc_messages):
# the sources use SQLERRM only to report it. managed_any_language.sql (execute_once's statement
# count and parameter typing, whose output holds SQLSTATEs and the edition's own messages
# only) gives the same output on a server speaking German and Japanese, which it is seen to
# do (a division by zero is reported in that language).
message_text_read() { grep -nE 'SQLERRM|MESSAGE_TEXT' editions/managed/src/*.sql | grep -vE 'detail := SQLERRM;'; }
check "the edition's sources read no server message (SQLERRM, MESSAGE_TEXT) but to report it" \
  eval '! message_text_read'
if ensure_locale de_DE.UTF-8 ja_JP.UTF-8 >"$OUT/locales.log" 2>&1; then
  for lang in de_DE.UTF-8:"Division durch Null" ja_JP.UTF-8:"による除算"; do
    locale=${lang%%:*} proof=${lang#*:} db=conf_lang_${lang:0:2}
    mkdir -p "$OUT/$db"
    if ! { new_db "$db" && conformance_db "$db" &&
      mpsql -d "$db" -q -c "ALTER DATABASE \"$db\" SET lc_messages TO '$locale'" && install_tle "$db" &&
      conformance_fresh "$db"; } \
      >"$OUT/$db.install.log" 2>&1; then
      fail "lc_messages $locale: the edition did not install"
      sed 's/^/    /' "$OUT/$db.install.log"
      continue
    fi
    spoken=$(mpsql -d "$db" -c "SELECT 1 / 0" 2>&1)
    if [[ $spoken == *"$proof"* ]]; then
      pass "lc_messages $locale: the server reports errors in that language ($spoken)"
    else
      fail "lc_messages $locale: the server does not speak it: $spoken"
    fi
    conformance_run "$db" managed_any_language "$OUT/$db"
    expected=$(conformance_expected managed_any_language)
    if conformance_diff "$expected" "$OUT/$db/managed_any_language.out" >"$OUT/$db.diff"; then
      pass "lc_messages $locale: conformance managed_any_language (${expected#"$IDEM_ROOT"/})"
    else
      fail "lc_messages $locale: conformance managed_any_language, diff:"
      sed 's/^/    /' "$OUT/$db.diff" | head -n 40
    fi
    mpsql -d postgres -q -c "DROP DATABASE IF EXISTS \"$db\"" >/dev/null 2>&1
  done
else
  fail "the locales de_DE.UTF-8 and ja_JP.UTF-8 (ensure_locale)"
  sed 's/^/    /' "$OUT/locales.log"
fi

# The isolation specs race two sessions on one key; the edition is installed with psql -f
# here. pg_isolation_regress's own verdict compares with the extension's expected output
# only: each result is compared here, as above.
ISO=$MANAGED_ROOT$("$PG_CONFIG" --pkglibdir)/pgxs/src/test/isolation/pg_isolation_regress
if new_db conf_iso >/dev/null && conformance_db conf_iso && install_plain conf_iso &&
  conformance_fresh conf_iso; then
  # shellcheck disable=SC2086 # one word a spec
  PGTZ=PST8PDT PGDATESTYLE='Postgres, MDY' "$ISO" --inputdir=test/isolation \
    --outputdir="$OUT/isolation" --host="$MSOCK" --port="$MPORT" --user=postgres \
    --dbname=conf_iso --use-existing $ISOLATION_SPECS >"$OUT/isolation.log" 2>&1
  for t in $ISOLATION_SPECS; do
    expected=test/isolation/expected/$t.out
    [[ -f editions/managed/expected/isolation/$t.out ]] && expected=editions/managed/expected/isolation/$t.out
    if [[ -f $OUT/isolation/results/$t.out ]] &&
      conformance_diff "$expected" "$OUT/isolation/results/$t.out" >"$OUT/isolation-$t.diff"; then
      pass "conformance isolation $t ($expected)"
    else
      fail "conformance isolation $t ($expected), diff:"
      sed 's/^/    /' "$OUT/isolation-$t.diff" 2>/dev/null | head -n 80
    fi
  done
else
  fail "conformance isolation: the edition did not install"
fi

# --- moving between editions ---------------------------------------------------------------
if [[ -x test/managed/move.sh ]]; then
  if MPGBIN=$MPGBIN MPORT=$MPORT MSOCK=$MSOCK bash test/managed/move.sh >"$OUT/move.log" 2>&1; then
    pass "a database moves from the managed edition to the extension (test/managed/move.sh)"
  else
    fail "a database moves from the managed edition to the extension, log:"
    sed 's/^/    /' "$OUT/move.log" | tail -n 40
  fi
fi

# --- maintain() and the key calls ------------------------------------------------------------
# The extension's scripted test, run against the edition: a reserve does not queue behind
# maintain() while a transaction holding a key keeps it from the exclusive lock.
if MPGBIN=$MPGBIN MPORT=$MPORT MSOCK=$MSOCK bash test/scripted/maintain_lock_queue.sh \
  >"$OUT/maintain_lock_queue.log" 2>&1; then
  pass "a key call does not queue behind maintain()'s lock request (test/scripted/maintain_lock_queue.sh)"
else
  fail "a key call queues behind maintain()'s lock request (test/scripted/maintain_lock_queue.sh), log:"
  sed 's/^/    /' "$OUT/maintain_lock_queue.log" | tail -n 40
fi

# --- the clients' suites ----------------------------------------------------------------
# The Python and Node clients' whole suites against the edition, as a role that is not a
# superuser (the admin role of a managed database: CREATEDB, CREATEROLE), which creates the
# extension in each database of its own (CREATE EXTENSION idempotency, through pg_tle).
# Every new database of the managed cluster gets the edition registered with pg_tle (through
# template1, and template0: a database in another encoding than template1's can only be made
# from template0, as the encoding tests make their EUC_JP and LATIN1 ones; this cluster is the
# suite's own, and template0 takes connections only while the edition is registered), so the
# clients' own fixtures work unchanged. IDEM_EDITION=managed tells the suites: a test of what
# only the extension has carries a marker naming its reason, a row of docs/managed.md's
# feature table (Python: extension_only(reason); Node: extensionOnly(reason)), and is
# reported skipped as "not applicable to the managed edition: <reason>", counted here apart
# from the passed ones.
edition_in_template() { # edition_in_template DB
  mpsql -d "$1" -q -c "SET client_min_messages = warning" -c "CREATE EXTENSION IF NOT EXISTS pg_tle" &&
    (cd editions/managed && mpsql -d "$1" -q -f install_pg_tle.sql)
}
edition_in_template0() {
  local rc
  mpsql -d postgres -q -c "ALTER DATABASE template0 ALLOW_CONNECTIONS true" || return 1
  edition_in_template template0
  rc=$?
  mpsql -d postgres -q -c "ALTER DATABASE template0 ALLOW_CONNECTIONS false" || return 1
  return $rc
}
CLIENT_ROLE=idem_app_admin
# client_env CMD...: CMD with the PG* environment of the managed cluster, as CLIENT_ROLE.
client_env() {
  env PGHOST="$MSOCK" PGPORT="$MPORT" PGUSER=$CLIENT_ROLE PGDATABASE=postgres IDEM_EDITION=managed \
    timeout -k 10 900 "$@" </dev/null
}
# na_count LOG: the tests reported not applicable to the managed edition.
na_count() { grep -c "SKIP not applicable to the managed edition: " "$1"; }

if ! { edition_in_template template1 && edition_in_template0 &&
  mpsql -d postgres -q -c "CREATE ROLE $CLIENT_ROLE LOGIN CREATEDB CREATEROLE NOSUPERUSER"; } \
  >"$OUT/template.log" 2>&1; then
  fail "pg_tle and the edition in template1 and template0, and the clients' role"
  sed 's/^/    /' "$OUT/template.log"
else
  started=$SECONDS
  (cd clients/python && client_env /usr/bin/python3 -m pytest -q -rs -p no:cacheprovider tests) \
    >"$OUT/clients-py.log" 2>&1
  took=$((SECONDS - started))
  line=$(grep -E '^=*.*[0-9]+ (passed|failed|error).* in [0-9.]+s' "$OUT/clients-py.log" | tail -n1)
  na=$(sed -nE 's/^([0-9]+) not applicable to the managed edition.*/\1/p' "$OUT/clients-py.log")
  if [[ -n $line && $line != *failed* && $line != *error* && -n $na ]]; then
    pass "the Python client's suite against the managed edition: $(sed -nE 's/.*[^0-9]([0-9]+ passed).*/\1/p' <<<" $line"), $na not applicable (${took} s)"
  else
    fail "the Python client's suite against the managed edition: ${line:-did not run} (${took} s)"
    grep -E '^(FAILED|ERROR) ' "$OUT/clients-py.log" | sed 's/^/    /' | head -n 30
  fi

  started=$SECONDS
  { scripts/npm_ci.sh clients/node &&
    (cd clients/node && client_env node --test --test-reporter=tap --test-concurrency=1 \
      --test-timeout=120000 test/*.test.js); } >"$OUT/clients-node.log" 2>&1
  rc=$?
  took=$((SECONDS - started))
  passed=$(sed -nE 's/^# pass ([0-9]+)$/\1/p' "$OUT/clients-node.log" | tail -n1)
  failed=$(( $(sed -nE 's/^# fail ([0-9]+)$/\1/p' "$OUT/clients-node.log" | tail -n1) + 0 +
    $(sed -nE 's/^# cancelled ([0-9]+)$/\1/p' "$OUT/clients-node.log" | tail -n1) + 0 ))
  skipped=$(sed -nE 's/^# skipped ([0-9]+)$/\1/p' "$OUT/clients-node.log" | tail -n1)
  na=$(na_count "$OUT/clients-node.log")
  if [[ -n $passed && $failed -eq 0 && $rc -eq 0 ]]; then
    pass "the Node client's suite against the managed edition: $passed passed, $na not applicable$( ((${skipped:-0} == na)) || echo ", $((skipped - na)) skipped otherwise") (${took} s)"
  else
    fail "the Node client's suite against the managed edition: ${passed:-0} passed, $failed failed, exit $rc (${took} s)"
    grep -E '^ *not ok ' "$OUT/clients-node.log" | sed 's/^/    /' | head -n 30
  fi
fi

finish
