#!/usr/bin/env bash
# client_db.sh DATABASE: makes a database that the client tests just created on the
# coordinator (with the extension) a Citus database: the same database with citus and
# idempotency on both workers, the workers added, and idempotency.keys distributed by scope
# (co-located with a small table distributed by a text tenant). Called by the clients' test
# fixtures through IDEM_TEST_DB_SETUP (test/citus/clients.sh sets it, with the ports).
set -euo pipefail
db=$1
psql_on() { # psql_on PORT SOCK DATABASE SQL...
  local port=$1 sock=$2 d=$3
  shift 3
  local args=()
  for sql in "$@"; do args+=(-c "$sql"); done
  "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$sock" -p "$port" -U postgres -d "$d" "${args[@]}" >/dev/null
}
for w in "$W1_PORT $W1_SOCK" "$W2_PORT $W2_SOCK"; do
  read -r port sock <<<"$w"
  psql_on "$port" "$sock" postgres "DROP DATABASE IF EXISTS $db WITH (FORCE)" "CREATE DATABASE $db"
  psql_on "$port" "$sock" "$db" "CREATE EXTENSION citus" "CREATE EXTENSION idempotency"
done
psql_on "$COORD_PORT" "$COORD_SOCK" "$db" "SET client_min_messages = warning" \
  "CREATE EXTENSION citus" \
  "SELECT citus_set_coordinator_host('127.0.0.1', $COORD_PORT)" \
  "SELECT citus_add_node('127.0.0.1', $W1_PORT)" "SELECT citus_add_node('127.0.0.1', $W2_PORT)" \
  "CREATE TABLE idem_tenants (tenant text PRIMARY KEY)" \
  "SELECT create_distributed_table('idem_tenants', 'tenant')" \
  "SELECT count(*) FROM idempotency.maintain()" \
  "SELECT idempotency.distribute(colocate_with => 'idem_tenants')"
