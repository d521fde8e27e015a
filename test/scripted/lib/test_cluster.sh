# shellcheck shell=bash
# For a test in databases of its own on the test command's cluster (PGHOST, PGPORT, PGUSER
# from scripts/test.sh). It gives
#   own_database DB  (re)creates DB, dropped (WITH FORCE) at exit
#   q ARGS...        psql -qAt on $DB (postgres if DB is unset); a -d of its own wins
#   fail MESSAGE     prints it and exits 1
#   BG+=(PID)        background processes killed at exit; WORK (if set) removed at exit
# and the checks of checks.sh.
PGBIN=${PGBIN:-$(pg_config --bindir)}
WORK=
BG=()
OWN_DATABASES=()
q() { "$PGBIN/psql" -X -v ON_ERROR_STOP=1 -qAt -d "${DB:-postgres}" "$@"; }
fail() {
  echo "FAIL: $*"
  exit 1
}
own_database() {
  q -d postgres -c "SET client_min_messages = warning" \
    -c "DROP DATABASE IF EXISTS $1 WITH (FORCE)" -c "CREATE DATABASE $1"
  OWN_DATABASES+=("$1")
}
cleanup() {
  local p db
  for p in "${BG[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for db in "${OWN_DATABASES[@]}"; do
    q -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
  done
  if [[ -n $WORK ]]; then rm -rf "$WORK"; fi
}
trap cleanup EXIT
source "$(dirname "${BASH_SOURCE[0]}")/checks.sh"
