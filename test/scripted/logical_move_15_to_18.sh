#!/usr/bin/env bash
# idem: same on every major (the IDEM_PG=15 run runs it; see scripts/test.sh)
# docs/replication.md's "Moving to another server or major version" across majors: logical_move.sh with the
# old server on PostgreSQL 15 and the new one on 18 (built from Debian's source package on
# first use), whatever major the rest of the run tests.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
build_pg_major 18
PG15_CONFIG=/usr/lib/postgresql/15/bin/pg_config
PG18_CONFIG=$(pg_major_prefix 18)/bin/pg_config
install_extension_with "$PG15_CONFIG"
install_extension_with "$PG18_CONFIG"
echo "old server: $("$PG15_CONFIG" --version), new server: $("$PG18_CONFIG" --version)"
# Ports apart from logical_move.sh's own.
PG_CONFIG=$PG15_CONFIG SUBSCRIBER_PG_CONFIG=$PG18_CONFIG \
  IDEM_PORT_OFFSET=$((${IDEM_PORT_OFFSET:-0} + 10)) \
  exec bash "$(dirname "${BASH_SOURCE[0]}")/logical_move.sh"
