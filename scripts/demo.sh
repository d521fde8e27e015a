#!/usr/bin/env bash
# Command 1: install what is missing, build and install the extension, start a
# throwaway cluster (port 54329, data in .cluster/), create the extension and run
# demo/demo.sql.
#   bash scripts/demo.sh         set up and run the demo on a fresh cluster (leaves it
#                                running); the data of an earlier demo cluster is removed
#   bash scripts/demo.sh stop    stop the demo cluster (its data is kept)
#   bash scripts/demo.sh start   start the stopped demo cluster again, with its data
# IDEM_DEMO_CLUSTER and IDEM_DEMO_PORT (default cluster and 54329) name another cluster (the
# test of this script uses them, so as not to touch the reader's).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$IDEM_ROOT"

cluster_setup "${IDEM_DEMO_CLUSTER:-cluster}" "${IDEM_DEMO_PORT:-54329}"
cluster=("$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK")

connect_hint() {
  echo "Connect with:"
  echo "  $PGBIN/psql -h $CLUSTER_SOCK -p $CLUSTER_PORT -U postgres -d postgres"
  echo "Stop it with:"
  echo "  bash scripts/demo.sh stop"
}

case ${1:-} in
  "") ;;
  stop)
    if [[ -d $CLUSTER_DATA ]] && cluster_running "$CLUSTER_DATA"; then
      cluster_stop "${cluster[@]}"
      echo "demo cluster stopped; its data is kept in $CLUSTER_DATA:"
      echo "  bash scripts/demo.sh start   starts it again, with that data"
      echo "  bash scripts/demo.sh         starts a fresh demo cluster (that data is removed)"
    else
      echo "demo cluster is not running"
    fi
    exit 0
    ;;
  start)
    if [[ ! -f $CLUSTER_DATA/PG_VERSION ]]; then
      echo "there is no demo cluster in $CLUSTER_DATA: run bash scripts/demo.sh" >&2
      exit 1
    fi
    if cluster_running "$CLUSTER_DATA"; then
      echo "demo cluster is running already (data in $CLUSTER_DATA)"
    else
      cluster_start "${cluster[@]}"
      echo "demo cluster started again with its data (in $CLUSTER_DATA)"
    fi
    connect_hint
    exit 0
    ;;
  *)
    echo "usage: bash scripts/demo.sh [stop|start]" >&2
    exit 2
    ;;
esac

if [[ -f $CLUSTER_DATA/PG_VERSION ]]; then
  log "starting afresh: the data of the earlier demo cluster in $CLUSTER_DATA is removed" \
    "(to keep it instead: bash scripts/demo.sh start)"
fi

ensure_packages
build_and_install

log "starting a throwaway cluster in $CLUSTER_DATA"
cluster_init "${cluster[@]}"
cluster_start "${cluster[@]}"
cluster_psql "${cluster[@]}" -d postgres -q -c 'CREATE EXTENSION idempotency'

log "running demo/demo.sql"
cluster_psql "${cluster[@]}" -d postgres -f demo/demo.sql

echo
echo "The demo cluster is still running (server log: $CLUSTER_LOG)."
connect_hint
