# shellcheck shell=bash
# For the maintenance worker's tests, after the prelude (q on the test's cluster).
#   launcher_pid   the pid of the idempotency launcher, empty when there is none
launcher_pid() { q -d postgres -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'idempotency launcher'"; }
