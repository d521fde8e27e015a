#!/usr/bin/env bash
# next_key and synchronous replication: a new block's bound must reach the synchronous
# standbys before any value of the block is handed out. With a standby that never answers
# (synchronous_standby_names = 'ghost'), a statement_timeout cuts the wait short; next_key
# must then fail (57014), not return a value the standby never acknowledged, and the block
# is lost (the bound stays raised), never handed out later.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
cluster_setup test-cluster/next-key-syncrep "${IDEM_NEXT_KEY_SYNCREP_PORT:-54425}"
source "$(dirname "${BASH_SOURCE[0]}")/lib/prelude.sh" cluster

# Does a commit wait for the (absent) synchronous standby? statement_timeout does not cover
# the commit: psql is interrupted after 1 s instead (it sends a cancel, which ends the wait).
commit_waits() {
  local rc=0
  timeout -s INT 1 "$PGBIN/psql" -X -qAt -h "$CLUSTER_SOCK" -p "$CLUSTER_PORT" -U postgres \
    -d postgres -c "SELECT pg_logical_emit_message(true, 'probe', '')" >/dev/null 2>&1 || rc=$?
  [[ $rc == 124 ]]
}

cluster_init "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK"
cluster_start "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK"
q -c "CREATE EXTENSION idempotency" -c "SELECT idempotency.create_stream('sync', 10)"

q -c "ALTER SYSTEM SET synchronous_standby_names = 'ghost'" -c "SELECT pg_reload_conf()" >/dev/null
poll --try 60 commit_waits || fail "commits do not wait for the ghost standby"

for attempt in autocommit transaction; do
  if [[ $attempt == autocommit ]]; then
    sql="SELECT idempotency.next_key('sync');"
  else
    sql="BEGIN; SELECT idempotency.next_key('sync'); COMMIT;"
  fi
  set +e
  out=$(q -v ON_ERROR_STOP=1 -v VERBOSITY=verbose -c "SET statement_timeout = '1s'" -c "$sql" 2>"$CLUSTER_LOG.err")
  rc=$?
  set -e
  err=$(cat "$CLUSTER_LOG.err")
  [[ $rc != 0 && -z $out ]] || fail "$attempt: next_key returned '$out' (rc $rc) without the standby"
  grep -q "57014: next_key was canceled while waiting for synchronous standbys" <<<"$err" ||
    fail "$attempt: unexpected error: $err"
  passed "$attempt: next_key failed with 57014 and returned nothing"
done

q -c "ALTER SYSTEM RESET synchronous_standby_names" -c "SELECT pg_reload_conf()" >/dev/null
commit_goes_through() { ! commit_waits; }
poll --try 60 commit_goes_through || fail "commits still wait after the reset"

# Two blocks (1-10, 11-20) were lost with the two canceled calls; the next call starts above.
value=$(q -c "SELECT idempotency.next_key('sync')")
[[ $value == 21 ]] || fail "next_key after the reset returned $value, expected 21"
passed "next value after the reset is $value (canceled blocks never handed out)"
rm -f "$CLUSTER_LOG.err"
echo "PASS"
