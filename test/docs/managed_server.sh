#!/usr/bin/env bash
# The docs suite's server for a page that asks for one without the library
# (<!-- server: managed ... -->, test/docs/run_snippets.py): the managed suite's copy of
# $PG_CONFIG's PostgreSQL (test/managed/lib.sh: pg_tle built in, every file of the idempotency
# extension removed), a cluster of its own on port 54483 + IDEM_PORT_OFFSET.
#   bash test/docs/managed_server.sh start   builds the copy if needed, starts the cluster and
#                                            prints "SOCKET PORT BINDIR" as its last line
#   bash test/docs/managed_server.sh stop
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
# shellcheck source=test/managed/lib.sh
source "$IDEM_ROOT/test/managed/lib.sh"
managed_server >&2
cluster_setup test-cluster/docs-managed 54483
MPORT=$CLUSTER_PORT MSOCK=$CLUSTER_SOCK MDATA=$CLUSTER_DATA
case ${1:-} in
  start)
    PGBIN=$MPGBIN cluster_init "$MDATA" "$MPORT" "$MSOCK" \
      "shared_preload_libraries = 'pg_tle'" "fsync = off" >&2
    PGBIN=$MPGBIN cluster_start "$MDATA" >&2
    # Nothing of the extension is loadable here (managed_server removed its files).
    if compgen -G "$MANAGED_ROOT$("$PG_CONFIG" --pkglibdir)/idempotency*" >/dev/null; then
      echo "the server copy has an idempotency library" >&2
      exit 1
    fi
    echo "$MSOCK $MPORT $MPGBIN"
    ;;
  stop) PGBIN=$MPGBIN cluster_stop "$MDATA" ;;
  *)
    echo "usage: bash test/docs/managed_server.sh start|stop" >&2
    exit 2
    ;;
esac
