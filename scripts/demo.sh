#!/usr/bin/env bash
# Command 1: install what is missing, build and install the extension, start a
# throwaway cluster (port 54329, data in .cluster/), create the extension and run
# demo/demo.sql.
#   bash scripts/demo.sh         set up and run the demo (leaves the cluster running)
#   bash scripts/demo.sh stop    stop the demo cluster
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$IDEM_ROOT"

cluster_setup cluster 54329
cluster=("$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK")

case ${1:-} in
  "") ;;
  stop)
    if [[ -d $CLUSTER_DATA ]] && cluster_running "$CLUSTER_DATA"; then
      cluster_stop "${cluster[@]}"
      echo "demo cluster stopped (data kept in $CLUSTER_DATA)"
    else
      echo "demo cluster is not running"
    fi
    exit 0
    ;;
  *)
    echo "usage: bash scripts/demo.sh [stop]" >&2
    exit 2
    ;;
esac

ensure_packages
build_and_install

log "starting a throwaway cluster in $CLUSTER_DATA"
cluster_init "${cluster[@]}"
cluster_start "${cluster[@]}"
cluster_psql "${cluster[@]}" -d postgres -q -c 'CREATE EXTENSION idempotency'

log "running demo/demo.sql"
cluster_psql "${cluster[@]}" -d postgres -f demo/demo.sql

cat <<EOF

The demo cluster is still running (server log: $CLUSTER_LOG).
Connect with:
  $PGBIN/psql -h $CLUSTER_SOCK -p $CLUSTER_PORT -U postgres -d postgres
Stop it with:
  bash scripts/demo.sh stop
EOF
