# shellcheck shell=bash
# For the maintenance worker's tests; the test defines q (psql on its cluster) and fail.
# wait_for SECONDS DESCRIPTION SQL: polls (in database $DB, default postgres) until SQL
# returns t, then prints "ok: DESCRIPTION"; fails after SECONDS.
wait_for() {
  local limit=$1 what=$2 sql=$3 i
  for ((i = 0; i < limit * 10; i++)); do
    [[ $(q -d "${DB:-postgres}" -c "$sql") == t ]] && { echo "ok: $what"; return 0; }
    sleep 0.1
  done
  fail "$what (waited ${limit}s)"
}
launcher_pid() { q -d postgres -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'idempotency launcher'"; }
