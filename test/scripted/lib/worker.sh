# shellcheck shell=bash
# For the maintenance worker's tests; the test defines q (psql on its cluster) and fail, and
# has sourced checks.sh (one_cluster.sh does both).
# wait_for SECONDS DESCRIPTION SQL: polls (in database $DB, default postgres) until SQL
# returns t, then passes "DESCRIPTION"; fails after SECONDS.
wait_for() {
  local limit=$1 what=$2 sql=$3
  sql_is_true() { [[ $(q -d "${DB:-postgres}" -c "$sql") == t ]]; }
  eventually "$limit" "$what" sql_is_true
}
launcher_pid() { q -d postgres -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'idempotency launcher'"; }
