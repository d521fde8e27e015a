#!/usr/bin/env bash
# The monitoring suite: the alert rules' unit tests (promtool), then a live chain on a cluster
# of its own (the worker maintaining one database every second): postgres_exporter with
# examples/metrics/postgres_exporter.yml for the extension and another with
# postgres_exporter_managed.yml for the managed edition (installed with psql -f in a second
# database), each as a role holding only the grants of docs/operations.md, and Prometheus
# scraping both with the project's alert rules (test/monitoring/monitoring_test.py).
# Prints "ok"/"FAILED" per check and ends with "# passed N failed M".
set -uo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
cd "$IDEM_ROOT" || exit 1

if ! ensure_monitoring; then
  echo "FAILED install of $MONITORING_PACKAGES"
  echo "# passed 0 failed 1"
  exit 1
fi
cluster_setup monitoring 54450
trap 'cluster_stop "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" >/dev/null 2>&1 || true' EXIT
if ! cluster_init "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" \
  "idempotency.database = 'monitoring'" "idempotency.maintenance_interval = '1s'" ||
  ! cluster_start "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK"; then
  echo "FAILED the monitoring cluster did not start"
  echo "# passed 0 failed 1"
  exit 1
fi
MONITORING_DIR=$IDEM_ROOT/build/monitoring
rm -rf "$MONITORING_DIR" && mkdir -p "$MONITORING_DIR"
PGHOST=$CLUSTER_SOCK PGPORT=$CLUSTER_PORT PGUSER=postgres \
  MONITORING_DIR=$MONITORING_DIR \
  PROMETHEUS_PORT=$((21090 + ${IDEM_PORT_OFFSET:-0})) \
  EXPORTER_PORT=$((21187 + ${IDEM_PORT_OFFSET:-0})) \
  MANAGED_EXPORTER_PORT=$((21188 + ${IDEM_PORT_OFFSET:-0})) \
  /usr/bin/python3 test/monitoring/monitoring_test.py
