#!/usr/bin/env bash
# idempotency.stats / metrics counters survive a clean restart (written at shutdown, read at
# start, as pg_stat_statements does) and start from zero after a crash.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"

cluster_setup test-cluster/stats-restart 54491
source "$(dirname "${BASH_SOURCE[0]}")/lib/prelude.sh" cluster
cluster_init "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK"
cluster_start "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK"

counters() {
  q -d "$1" -c "SELECT reserves_new || '/' || reserves_replay || '/' || completes || '/' || fails
    || '/' || shared_memory FROM idempotency.stats"
}
metric() {
  q -d "$1" -c "SELECT value FROM idempotency.metrics WHERE name = 'idempotency_reserves_total'
    AND labels = '{\"outcome\": \"replay\"}'"
}

q -d postgres -c "CREATE EXTENSION idempotency"
q -d postgres -c "CREATE DATABASE second"
q -d second -c "CREATE EXTENSION idempotency"
for i in 1 2 3; do
  q -d postgres -c "SELECT outcome FROM idempotency.reserve('s', 'k$i')" \
    -c "SELECT idempotency.complete('s', 'k$i', 200, '{}')" \
    -c "SELECT outcome FROM idempotency.reserve('s', 'k$i')" >/dev/null
done
q -d second -c "SELECT outcome FROM idempotency.reserve('s', 'x')" -c "SELECT idempotency.fail('s', 'x')" >/dev/null
before=$(counters postgres) before2=$(counters second)
since=$(q -d postgres -c "SELECT since FROM idempotency.stats")
[[ $before == 3/3/3/0/true && $before2 == 1/0/0/1/true ]] ||
  fail "unexpected counters before the restart: $before, $before2"

# A clean restart: the same counters, the same 'since', per database.
cluster_stop "$CLUSTER_DATA"
[[ -f $CLUSTER_DATA/pg_stat/idempotency.stat ]] || fail "no counters file after a clean shutdown"
cluster_start "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK"
[[ ! -f $CLUSTER_DATA/pg_stat/idempotency.stat ]] || fail "the counters file was not removed once read"
[[ $(counters postgres) == "$before" ]] || fail "after a clean restart: $(counters postgres), before: $before"
[[ $(counters second) == "$before2" ]] || fail "after a clean restart, second: $(counters second), before: $before2"
[[ $(q -d postgres -c "SELECT since FROM idempotency.stats") == "$since" ]] || fail "'since' changed"
[[ $(metric postgres) == 3 ]] || fail "metrics shows $(metric postgres) replays, not 3"
passed "counters survive a clean restart ($before; second: $before2; since $since)"

# And they keep counting from there.
q -d postgres -c "SELECT outcome FROM idempotency.reserve('s', 'k1')" >/dev/null
[[ $(counters postgres) == 3/4/3/0/true ]] || fail "counting after the restart: $(counters postgres)"

# A crash (a backend killed: the postmaster resets shared memory): nothing is written, the
# counters start from zero.
(q -d postgres -c "SELECT pg_sleep(60)" >/dev/null 2>&1 || true) &
sleeper=$!
victim_found() {
  victim=$(q -d postgres -c "SELECT pid FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(60)' AND pid <> pg_backend_pid()")
  [[ -n $victim ]]
}
poll --try 60 victim_found || fail "no backend to kill"
kill -KILL "$victim"
wait "$sleeper" || true
answers() { q -d postgres -c "SELECT 1" >/dev/null 2>&1; }
poll --try 120 answers || true
grep -q "terminated by signal 9" "$CLUSTER_LOG" || fail "the backend was not killed"
[[ ! -f $CLUSTER_DATA/pg_stat/idempotency.stat ]] || fail "a counters file was written at a crash"
[[ $(counters postgres) == 0/0/0/0/true ]] || fail "after a crash: $(counters postgres)"
passed "a crash loses the counters (they restart at zero)"

# After the crash's reset, a clean restart keeps counters again.
q -d postgres -c "SELECT outcome FROM idempotency.reserve('s', 'k7')" >/dev/null
cluster_stop "$CLUSTER_DATA"
cluster_start "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK"
[[ $(counters postgres) == 1/0/0/0/true ]] || fail "after crash and clean restart: $(counters postgres)"
passed "after the crash, a clean restart keeps the counters again"

# A damaged file is ignored (logged), not loaded.
q -d postgres -c "SELECT outcome FROM idempotency.reserve('s', 'k9')" >/dev/null
cluster_stop "$CLUSTER_DATA"
printf 'garbage' >"$CLUSTER_DATA/pg_stat/idempotency.stat"
cluster_start "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK"
[[ $(counters postgres) == 0/0/0/0/true ]] || fail "a damaged file was loaded: $(counters postgres)"
grep -q 'idempotency: ignored invalid file "pg_stat/idempotency.stat"' "$CLUSTER_LOG" ||
  fail "no log line for the damaged file"
passed "a damaged counters file is ignored"
echo "stats_restart: $CHECKS checks passed"
