# shellcheck shell=bash
# Shared by test/scripted/backup_{custom,directory,plain}.sh: a cluster whose worker maintains
# database `src_m` every second, a database `src_p` whose keys pg_partman manages, both filled
# with keys in every state (in dated partitions and in the default partition), streams and
# watermarks; then a dump of each, taken while the worker runs, restored every way the format
# allows. After each restore every key must read back exactly as before the dump, every
# stream's next_key must lie above every value handed out before it, every watermark must
# refuse its old position, and the restore must print no error.
# The caller sets FORMAT (custom, directory or plain) and PORT, then calls backup_main.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"

source "$(dirname "${BASH_SOURCE[0]}")/lib/prelude.sh" cluster
pgtool() { # a client program as the cluster user, with the test cluster's connection
  as_pg env PGHOST="$CLUSTER_SOCK" PGPORT="$CLUSTER_PORT" PGUSER=postgres "$PGBIN/$1" "${@:2}"
}

# Every column of every key, as text, in a stable order: what must come back exactly.
KEYS_SQL="SELECT scope, key, state, attempt, request_hash, status_code, response, recovery_point,
  last_error, first_seen_at, completed_at, locked_until, expires_at, tableoid::regclass
  FROM idempotency.keys ORDER BY scope, key, expires_at"

fill() { # fill DB: keys in each state, streams, watermarks
  q -d "$1" >/dev/null <<'SQL'
SET idempotency.max_retention = '400d';
-- completed: stored response, request hash
SELECT outcome FROM idempotency.reserve('bk', 'done', idempotency.fingerprint('{"a": 1}'::jsonb));
SELECT idempotency.complete('bk', 'done', 201, '{"id": 7, "note": "ünïcode"}');
-- processing with a live lease and a recovery point (a committed claim)
SELECT outcome FROM idempotency.reserve('bk', 'claimed', '\x01ff'::bytea, lock_ttl => '2 hours');
SELECT idempotency.checkpoint('bk', 'claimed', 'charged-card');
-- failed: released for a retry, with the error kept; then taken over (attempt 2), failed again
SELECT outcome FROM idempotency.reserve('bk', 'failed');
SELECT idempotency.fail('bk', 'failed', '{"error": "timeout"}');
SELECT outcome FROM idempotency.reserve('bk', 'failed');
SELECT idempotency.fail('bk', 'failed', '{"error": "again"}', 2);
-- abandoned: a lapsed lease
SELECT outcome FROM idempotency.reserve('bk', 'abandoned', lock_ttl => '1 second');
-- far future: beyond every premade partition, so in the default partition
SELECT outcome FROM idempotency.reserve('bk', 'far', retention => '300 days');
SELECT idempotency.complete('bk', 'far', 200, '[1, 2, 3]');
-- many more, spread over the partitions
SELECT count(*) FROM (SELECT idempotency.reserve('bulk', 'k' || g, retention => (g % 5 + 1) * interval '1 day')
                      FROM generate_series(1, 300) g) s;
SELECT count(*) FROM (SELECT idempotency.complete('bulk', 'k' || g, 200, pg_catalog.jsonb_build_object('g', g))
                      FROM generate_series(1, 300, 2) g) s;
-- streams: values handed out from several blocks
SELECT idempotency.create_stream('orders', 10);
SELECT idempotency.create_stream('invoices');
SELECT max(idempotency.next_key('orders')) FROM generate_series(1, 25);
SELECT idempotency.next_key('invoices');
-- watermarks, bigint and 128-bit
SELECT idempotency.accept('billing', 'p0', 41::bigint);
SELECT idempotency.accept('billing', 'p1', 7::bigint);
SELECT idempotency.accept('audit', 'wal', idempotency.lsn_key('0/16B3748', '0/16B3700'));
SQL
  lapsed() {
    [[ $(q -d "$1" -c "SELECT locked_until < clock_timestamp()
                       FROM idempotency.lookup('bk', 'abandoned')") == t ]]
  }
  poll --try 60 lapsed "$1" || fail "the abandoned lease in $1 did not lapse"
}

snapshot() { # snapshot DB FILE: keys, streams' handed-out maxima, watermarks
  {
    q -d "$1" -c "$KEYS_SQL"
    echo "-- watermarks"
    q -d "$1" -c "SELECT consumer, partition, position FROM idempotency.consumer_positions ORDER BY 1, 2"
  } >"$2"
}

# check_restored SRC_SNAPSHOT DB WHAT: the restored database DB against the snapshot.
check_restored() {
  local snap=$1 db=$2 what=$3 got
  got=$WORK/got-$db
  snapshot "$db" "$got"
  if ! diff -u "$snap" "$got" >"$WORK/diff" 2>&1; then
    head -n 40 "$WORK/diff"
    fail "$what: keys or watermarks differ after the restore"
  fi
  passed "$what: $(grep -c . "$snap") rows of keys and watermarks read back exactly"
  # Before the dump orders handed out up to ORDERS_MAX and invoices up to INVOICES_MAX.
  expect "$what: next_key('orders') above every value handed out before the dump" \
    "$(q -d "$db" -c "SELECT idempotency.next_key('orders') > $ORDERS_MAX")" t
  expect "$what: next_key('invoices') above every value handed out before the dump" \
    "$(q -d "$db" -c "SELECT idempotency.next_key('invoices') > $INVOICES_MAX")" t
  expect "$what: accept of old positions is false" \
    "$(q -d "$db" -c "SELECT idempotency.accept('billing', 'p0', 41::bigint)::text || idempotency.accept('billing', 'p1', 3::bigint)::text
         || idempotency.accept('audit', 'wal', idempotency.lsn_key('0/16B3748', '0/16B3700'))::text")" falsefalsefalse
  expect "$what: a new position is accepted" \
    "$(q -d "$db" -c "SELECT idempotency.accept('billing', 'p0', 42::bigint)")" t
  expect "$what: a stored response replays" \
    "$(q -d "$db" -c "SELECT outcome || ' ' || status_code || ' ' || response::text FROM idempotency.reserve('bk', 'done', idempotency.fingerprint('{\"a\": 1}'::jsonb))")" \
    'replay 201 {"id": 7, "note": "ünïcode"}'
  expect "$what: a live claim is still held" \
    "$(q -d "$db" -c "SELECT outcome FROM idempotency.reserve('bk', 'claimed', '\x01ff'::bytea)")" in_progress
  expect "$what: maintain() runs cleanly" \
    "$(q -d "$db" -c "SELECT count(*) FROM idempotency.maintain() WHERE action IN ('failed', 'skipped')")" 0
  if [[ $db == *_p* ]]; then
    q -d "$db" -c "SET client_min_messages = warning" -c "SELECT partman.run_maintenance()" >/dev/null ||
      fail "$what: partman.run_maintenance() failed after the restore"
    expect "$what: pg_partman still manages idempotency.keys" \
      "$(q -d "$db" -c "SELECT count(*) FROM partman.part_config WHERE parent_table = 'idempotency.keys'")" 1
  fi
}

# run_restore WHAT DB COMMAND...: runs a restore; it must succeed and print no error.
run_restore() {
  local what=$1 db=$2 out
  shift 2
  out=$WORK/restore-$db.log
  if ! "$@" >"$out" 2>&1; then
    cat "$out"
    fail "$what: the restore exited non-zero"
  fi
  if grep -Eiq 'error|warning|fatal' "$out"; then
    cat "$out"
    fail "$what: the restore printed errors"
  fi
  passed "$what: restored with no error"
}

fresh_db() { q -d postgres -c "DROP DATABASE IF EXISTS $1" -c "CREATE DATABASE $1"; }

setup_sources() { # src_m (the worker maintains it) and src_p (pg_partman), filled
  local src i
  for src in src_m src_p; do
    fresh_db $src
    q -d $src -c "SET client_min_messages = warning" -c "CREATE EXTENSION idempotency" >/dev/null
    if [[ $src == src_p ]]; then
      q -d $src >/dev/null <<'SQL'
SET client_min_messages = warning;
CREATE SCHEMA partman;
CREATE EXTENSION pg_partman SCHEMA partman;
SELECT idempotency.use_partman();
SQL
    else
      q -d $src -c "SELECT count(*) FROM idempotency.maintain()" >/dev/null
    fi
    fill $src
  done
  ORDERS_MAX=25 INVOICES_MAX=1
  # The worker gives the far key a partition of its own within a pass or two.
  default_empty() { [[ $(q -d src_m -c "SELECT count(*) FROM idempotency.keys_default") == 0 ]]; }
  poll --try 60 default_empty || true
  expect "the worker maintains src_m (moved the far key out of the default partition)" \
    "$(q -d src_m -c "SELECT count(*) FROM idempotency.keys_default")" 0
  expect "src_p keeps a key in its default partition (nothing maintains it)" \
    "$(q -d src_p -c "SELECT count(*) FROM idempotency.keys_default")" 1

}

start_source_cluster() { # the cluster of the sources (worker on src_m), and WORK
  rm -f "$CLUSTER_LOG"
  cluster_init "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" \
    "idempotency.database = 'src_m'" "idempotency.maintenance_interval = '1s'" "fsync = off"
  cluster_start "$CLUSTER_DATA"
  WORK=$(mktemp -d /tmp/idem-backup-XXXXXX)
  if is_root; then chown postgres: "$WORK"; fi
}

backup_main() {
  cluster_setup "test-cluster/backup-$FORMAT" "$PORT"
  start_source_cluster

  local src one
  setup_sources
  for src in src_m src_p; do
    snapshot $src "$WORK/snap-$src"
    local dump=$WORK/$src.dump
    case $FORMAT in
      custom) pgtool pg_dump -Fc -d $src -f "$dump" ;;
      directory) pgtool pg_dump -Fd -d $src -f "$dump" ;;
      plain) pgtool pg_dump -Fp -d $src -f "$dump"
             pgtool pg_dump -Fp --clean --if-exists -d $src -f "$dump.clean" ;;
    esac
    # Values handed out after the dump do not matter for it: the dump's bound is what counts.
    q -d $src -c "SELECT idempotency.next_key('orders')" >/dev/null
    local db=${src}_r
    if [[ $FORMAT == plain ]]; then
      fresh_db ${db}1
      run_restore "$src: psql -f" ${db}1 pgtool psql -X -v ON_ERROR_STOP=1 -q -d ${db}1 -f "$dump"
      check_restored "$WORK/snap-$src" ${db}1 "$src: psql -f"
      fresh_db ${db}2
      run_restore "$src: psql -1 -f" ${db}2 pgtool psql -X -v ON_ERROR_STOP=1 -q -1 -d ${db}2 -f "$dump"
      check_restored "$WORK/snap-$src" ${db}2 "$src: psql -1 -f"
      # pg_dump --clean --if-exists, replayed into the database it came from
      q -d $src -c "SELECT idempotency.forget('bk', 'done')" >/dev/null
      one=()
      [[ $src == src_m ]] && one=(-1)
      run_restore "$src: psql ${one[*]} of a --clean --if-exists dump into the same database" $src \
        pgtool psql -X -v ON_ERROR_STOP=1 -q "${one[@]}" -d $src -f "$dump.clean"
      check_restored "$WORK/snap-$src" $src "$src: --clean --if-exists into the same database"
    else
      fresh_db ${db}1
      run_restore "$src: pg_restore" ${db}1 pgtool pg_restore -d ${db}1 "$dump"
      check_restored "$WORK/snap-$src" ${db}1 "$src: pg_restore"
      fresh_db ${db}2
      run_restore "$src: pg_restore -1" ${db}2 pgtool pg_restore -1 -d ${db}2 "$dump"
      check_restored "$WORK/snap-$src" ${db}2 "$src: pg_restore -1"
      fresh_db ${db}3
      run_restore "$src: pg_restore -j 2" ${db}3 pgtool pg_restore -j 2 -d ${db}3 "$dump"
      check_restored "$WORK/snap-$src" ${db}3 "$src: pg_restore -j 2"
      q -d $src -c "SELECT idempotency.forget('bk', 'done')" >/dev/null
      # Into a database the worker maintains: in one transaction (README, "Backup and
      # restore"), or the worker may make a partition between CREATE EXTENSION and the dump's.
      one=()
      [[ $src == src_m ]] && one=(-1)
      run_restore "$src: pg_restore --clean --if-exists ${one[*]} into the same database" $src \
        pgtool pg_restore --clean --if-exists "${one[@]}" -d $src "$dump"
      check_restored "$WORK/snap-$src" $src "$src: pg_restore --clean --if-exists"
    fi
  done
  if grep -Eq 'PANIC|server process .* was terminated|terminated by signal' "$CLUSTER_LOG"; then
    fail "the server log shows a crash"
  fi
  echo "backup_$FORMAT: $CHECKS checks passed"
}
