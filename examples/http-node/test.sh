#!/usr/bin/env bash
# End-to-end tests of the HTTP example against a running cluster with the extension preloaded.
# Takes PGHOST, PGPORT, PGUSER (and PGDATABASE, used only to connect for setup) from the
# environment; creates the database $HTTP_EXAMPLE_DB (default http_example) afresh, installs
# the npm dependencies, starts the server on a free loopback port, runs `node --test`.
# Exit 0 only if every test passes.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

DB=${HTTP_EXAMPLE_DB:-http_example}
SETUP_DB=${PGDATABASE:-postgres}
[[ $SETUP_DB == "$DB" ]] && SETUP_DB=postgres
LOG_DIR=$(mktemp -d "${TMPDIR:-/tmp}/http-node-test.XXXXXX")
SERVER_PID=

cleanup() {
  if [[ -n $SERVER_PID ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  rm -rf "$LOG_DIR"
}
trap cleanup EXIT

command -v node >/dev/null || { echo "node is not installed" >&2; exit 1; }

# Dependencies (pg, and @idempotency/client linked from clients/node): npm ci unless
# node_modules was installed from this very lock file.
../../scripts/npm_ci.sh "$PWD"

echo "==> database $DB"
psql -X -q -v ON_ERROR_STOP=1 -d "$SETUP_DB" \
  -c 'SET client_min_messages = warning' \
  -c "DROP DATABASE IF EXISTS \"$DB\" WITH (FORCE)" \
  -c "CREATE DATABASE \"$DB\""
psql -X -q -v ON_ERROR_STOP=1 -d "$DB" -c 'CREATE EXTENSION IF NOT EXISTS idempotency'
export PGDATABASE=$DB

echo "==> starting the server"
: >"$LOG_DIR/server.log"
HOST=127.0.0.1 PORT=0 LOG_REQUESTS=1 node src/server.js >"$LOG_DIR/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 600); do # up to a minute on a loaded machine
  ORDERS_URL=$(sed -n 's/^listening on \(http:[^ ]*\).*/\1/p' "$LOG_DIR/server.log")
  [[ -n $ORDERS_URL ]] && break
  kill -0 "$SERVER_PID" 2>/dev/null || break
  sleep 0.1
done
if [[ -z $ORDERS_URL ]]; then
  echo "the server did not start:" >&2
  cat "$LOG_DIR/server.log" >&2
  exit 1
fi
export ORDERS_URL
echo "==> server at $ORDERS_URL"

rc=0
node --test --test-reporter=tap --test-timeout=60000 test/*.test.js || rc=$?

kill "$SERVER_PID" 2>/dev/null || true
wait "$SERVER_PID" 2>/dev/null || true
SERVER_PID=
if [[ $rc -ne 0 ]]; then
  echo "==> server log"
  cat "$LOG_DIR/server.log"
fi
exit "$rc"
