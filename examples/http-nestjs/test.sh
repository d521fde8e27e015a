#!/usr/bin/env bash
# End-to-end tests of the NestJS example, on the Express and then the Fastify adapter, against a
# running cluster with the extension preloaded (PGHOST, PGPORT, PGUSER from the environment;
# PGDATABASE only to connect for setup). Creates the database $NESTJS_EXAMPLE_DB (default
# http_nestjs_example) afresh, installs the npm dependencies (the example's, and the linked
# client's own, which it imports through the link), starts the server on a free loopback port and
# runs `node --test` against it, once per adapter. Exit 0 only if every test passes.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

DB=${NESTJS_EXAMPLE_DB:-http_nestjs_example}
SETUP_DB=${PGDATABASE:-postgres}
[[ $SETUP_DB == "$DB" ]] && SETUP_DB=postgres
LOG_DIR=$(mktemp -d "${TMPDIR:-/tmp}/http-nestjs-test.XXXXXX")
SERVER_PID=

stop_server() {
  if [[ -n $SERVER_PID ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=
}
trap 'stop_server; rm -rf "$LOG_DIR"' EXIT

command -v node >/dev/null || { echo "node is not installed" >&2; exit 1; }
../../scripts/npm_ci.sh "$PWD/../../clients/node"
../../scripts/npm_ci.sh "$PWD"

echo "==> database $DB"
psql -X -q -v ON_ERROR_STOP=1 -d "$SETUP_DB" \
  -c 'SET client_min_messages = warning' \
  -c "DROP DATABASE IF EXISTS \"$DB\" WITH (FORCE)" \
  -c "CREATE DATABASE \"$DB\""
export PGDATABASE=$DB

rc=0
for adapter in express fastify; do
  echo "==> starting the server on the $adapter adapter"
  log=$LOG_DIR/server-$adapter.log
  : >"$log"
  ADAPTER=$adapter HOST=127.0.0.1 PORT=0 node src/server.js >"$log" 2>&1 &
  SERVER_PID=$!
  ORDERS_URL=
  for _ in $(seq 600); do # up to a minute on a loaded machine
    ORDERS_URL=$(sed -n 's/^listening on \(http:[^ ]*\).*/\1/p' "$log")
    [[ -n $ORDERS_URL ]] && break
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  if [[ -z $ORDERS_URL ]]; then
    echo "the server did not start on the $adapter adapter:" >&2
    cat "$log" >&2
    exit 1
  fi
  echo "==> server at $ORDERS_URL"
  ORDERS_URL=$ORDERS_URL node --test --test-reporter=tap --test-timeout=60000 test/*.test.js || {
    rc=1
    echo "==> server log ($adapter)"
    cat "$log"
  }
  stop_server
done
exit "$rc"
