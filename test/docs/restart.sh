#!/usr/bin/env bash
# Restarts the cluster of the PG* environment (the test command's cluster), as a production
# database restarts under a running application: the docs suite's checks call it (through
# IDEM_DOCS_RESTART) to see that an example keeps serving afterwards.
#   bash test/docs/restart.sh fast        pg_ctl restart -m fast: sessions are ended (57P01)
#   bash test/docs/restart.sh immediate   a crash (-m immediate), then a start with recovery
# Returns once the server accepts connections again.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
data=$("$PGBIN/psql" -X -d postgres -Atc 'SHOW data_directory')
log=$(dirname "$data")/server.log
case ${1:-} in
  fast) as_pg "$PGBIN/pg_ctl" -D "$data" -m fast -w -l "$log" restart >/dev/null ;;
  immediate)
    as_pg "$PGBIN/pg_ctl" -D "$data" -m immediate -w stop >/dev/null
    as_pg "$PGBIN/pg_ctl" -D "$data" -w -l "$log" start >/dev/null
    ;;
  *)
    echo "usage: bash test/docs/restart.sh fast|immediate" >&2
    exit 2
    ;;
esac
