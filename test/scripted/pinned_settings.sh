#!/usr/bin/env bash
# idem: same on every major (whether each test file sets the settings it depends on; the IDEM_PG=15 run runs it, see .ci/run)
# `make installcheck` (the regression and isolation suites) against a server where every
# idempotency.* setting has a non-default value: each test sets what it depends on. A setting
# added later and not listed below fails this test until it is given a non-default value here.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
cluster_setup test-cluster/pinned-settings 54475
source "$(dirname "${BASH_SOURCE[0]}")/lib/prelude.sh" cluster

SETTINGS=(
  "idempotency.partition_width = '2h'"
  "idempotency.premake = 5"
  "idempotency.max_retention = '40d'"
  "idempotency.maintenance_lock_timeout = '250ms'"
  "idempotency.maintenance_interval = '30s'"
  "idempotency.database = 'idem_pinned_no_such_db'" # the worker idles: no database to maintain
  "idempotency.direct_storage = off"
  "idempotency.max_streams = 64"
)
rm -f "$CLUSTER_LOG"
cluster_init "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" "fsync = off" "${SETTINGS[@]}"
cluster_start "$CLUSTER_DATA"
defaults=$(q -c "SELECT string_agg(name, ', ' ORDER BY name) FROM pg_settings
                 WHERE name LIKE 'idempotency.%' AND setting IS NOT DISTINCT FROM boot_val")
[[ -z $defaults ]] || fail "settings still at their default (give them a value above): $defaults"
echo "ok: every idempotency.* setting differs from its default:"
q -c "SELECT name || ' = ' || setting || coalesce(unit, '') || ' (default ' || boot_val || ')'
      FROM pg_settings WHERE name LIKE 'idempotency.%' ORDER BY name" | sed 's/^/    /'

WORK=$(mktemp -d /tmp/idem-pinned-XXXXXX)
export PGHOST=$CLUSTER_SOCK PGPORT=$CLUSTER_PORT PGUSER=postgres
rc=0
make -C "$IDEM_ROOT" installcheck PG_CONFIG="$PG_CONFIG" ISOLATION= TAP_TESTS= >"$WORK/regress.log" 2>&1 || rc=$?
grep -E '^(test +| +)[^ ]+ +\.\.\. ' "$WORK/regress.log" || true
if [[ $rc -ne 0 ]]; then
  [[ -f $IDEM_ROOT/regression.diffs ]] && head -n 80 "$IDEM_ROOT/regression.diffs"
  fail "the regression suite fails on a server with non-default settings"
fi
echo "ok: regression suite"
rc=0
make -C "$IDEM_ROOT" installcheck PG_CONFIG="$PG_CONFIG" REGRESS= TAP_TESTS= >"$WORK/isolation.log" 2>&1 || rc=$?
grep -E '^(test +| +)[^ ]+ +\.\.\. ' "$WORK/isolation.log" || true
if [[ $rc -ne 0 ]]; then
  [[ -f $IDEM_ROOT/output_iso/regression.diffs ]] && head -n 80 "$IDEM_ROOT/output_iso/regression.diffs"
  fail "the isolation suite fails on a server with non-default settings"
fi
echo "ok: isolation suite"
echo "pinned_settings: passed"
