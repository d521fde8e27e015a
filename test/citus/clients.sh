#!/usr/bin/env bash
# The Python and Node clients, unchanged, against the coordinator of a Citus cluster: their
# test databases are made Citus databases (test/citus/lib/client_db.sh, through the fixtures'
# IDEM_TEST_DB_SETUP hook) with idempotency.keys distributed by scope, so every key call the
# clients make is delegated to a worker. Runs the request helpers (Python run_once, claim,
# decorator, run_external, errors; Node requests and the Express middleware) and the
# fingerprint vectors. Left out, for what Citus does differently (docs/citus.md):
# reserve(NULL, 'k') (Python) and the Node test of server errors that includes it, as a NULL
# distribution argument crashes Citus 12.1.12's function call delegation (it hashes the NULL); reserve in a READ ONLY transaction, which Citus does not
# pass on to the worker (the claim is taken); the lock_timeout test, as a session's SET is not
# sent to the worker where the key lock is waited for; the typed refusals of execute_once,
# which Citus-distributed keys refuse as a whole (0A000, docs/citus.md; its own test is in
# lifecycle). The consumer tests are not run here:
# on Citus the outbox is each worker's WAL, read through a slot on each worker (docs/citus.md,
# Outbox, tested by outbox.sh), which these tests do not set up.
set -euo pipefail
CITUS_NAME=citus-clients CITUS_PORT=54494
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
citus_cluster_start || fail "the Citus cluster did not start"
export PGHOST=$COORD_SOCK PGPORT=$COORD_PORT PGUSER=postgres PGDATABASE=postgres
export COORD_PORT COORD_SOCK W1_PORT W1_SOCK W2_PORT W2_SOCK PGBIN
export IDEM_TEST_DB_SETUP=$IDEM_ROOT/test/citus/lib/client_db.sh IDEM_TEST_CITUS=1
LOG=$(mktemp -d /tmp/idem-citus-clients.XXXXXX)
on_exit 'rm -rf "$LOG"'

# Python: the package installed into a venv that sees Debian's psycopg and pytest, as
# scripts/test.sh's clients suite does.
venv=$IDEM_ROOT/build/py-venv-citus
rc=0
{
  rm -rf "$venv" &&
    /usr/bin/python3 -m venv --without-pip --system-site-packages "$venv" &&
    "$venv/bin/python" -m pip install --no-build-isolation --no-index --no-deps --quiet \
      "$IDEM_ROOT/clients/python" &&
    (cd "$IDEM_ROOT/clients/python" && timeout -k 10 600 "$venv/bin/python" -m pytest -q \
      -p no:cacheprovider -rfE tests/test_helpers.py tests/test_fingerprint.py \
      -k 'not (test_sqlstates_become_typed_exceptions and (params0 or params5 or execute_once)) and not test_lock_timeout_is_typed')
} >"$LOG/py.log" 2>&1 || rc=$?
tail -n 15 "$LOG/py.log"
line=$(grep -E '^=*.*[0-9]+ (passed|failed|error).* in [0-9.]+s' "$LOG/py.log" | tail -n1)
[[ $rc -eq 0 && $line == *passed* && $line != *failed* && $line != *error* ]] ||
  fail "Python client tests on Citus: exit $rc, ${line:-no summary}"
expect "Python client tests pass against the coordinator ($line)" ok ok

# Node: the locked dev dependencies (scripts/npm_ci.sh), node --test with the TAP reporter.
rc=0
{
  "$IDEM_ROOT/scripts/npm_ci.sh" "$IDEM_ROOT/clients/node" &&
    (cd "$IDEM_ROOT/clients/node" && timeout -k 10 600 node --test --test-reporter=tap \
      --test-concurrency=1 --test-timeout=120000 test/requests.test.js \
      test/middleware.test.js test/fingerprint.test.js)
} >"$LOG/node.log" 2>&1 || rc=$?
grep -E '^(not ok|# (tests|pass|fail|cancelled) )' "$LOG/node.log" | tail -n 15
pass=$(sed -nE 's/^# pass ([0-9]+)$/\1/p' "$LOG/node.log" | tail -n1)
failed=$(sed -nE 's/^# fail ([0-9]+)$/\1/p' "$LOG/node.log" | tail -n1)
cancelled=$(sed -nE 's/^# cancelled ([0-9]+)$/\1/p' "$LOG/node.log" | tail -n1)
[[ $rc -eq 0 && ${pass:-0} -gt 0 && ${failed:-1} -eq 0 && ${cancelled:-1} -eq 0 ]] || {
  grep -E -B2 -A20 '^not ok' "$LOG/node.log" | head -n 80
  fail "Node client tests on Citus: exit $rc, pass ${pass:-?}, fail ${failed:-?}"
}
expect "Node client tests pass against the coordinator ($pass passed, middleware included)" ok ok

# The keys the clients made live in the workers' shards, none in the coordinator's shell.
keys=$(citus_node coord -qAt -d pyclient_test -c "SELECT count(*) FROM idempotency.keys")
[[ $keys -gt 0 ]] || fail "the Python tests left no key in the distributed table"
expect "Python tests' keys are in the shards, the shell is empty" \
  "$(citus_node coord -qAt -d pyclient_test -c "SELECT coalesce(sum(pg_relation_size(relid)), 0)
     FROM pg_partition_tree('idempotency.keys')")" "0"
