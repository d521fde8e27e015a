#!/usr/bin/env bash
# idem: 15 only: pg_cron is packaged for PostgreSQL 15 only (no pg-cron source tarball on the mirror)
# docs/storage.md's pg_cron recipe, for real, on a socket-only server (listen_addresses = ''): pg_cron
# (Debian's postgresql-15-cron) keeps its jobs in 'postgres' and runs maintain() in 'app'
# through cron.schedule_in_database, connecting over the unix socket (cron.host = the socket
# directory); the worker is off (idempotency.database = ''). The run shows in
# idempotency.maintenance_runs with caller 'pg_cron', and pg_cron reports success.
# pg_cron 1.4 schedules by the minute: this waits up to ~2 minutes.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"

[[ -f $("$PG_CONFIG" --pkglibdir)/pg_cron.so ]] ||
  die "pg_cron is not installed for $PG_CONFIG (Debian: postgresql-15-cron, in IDEM_PACKAGES)"

cluster_setup test-cluster/pg-cron 54481
source "$(dirname "${BASH_SOURCE[0]}")/lib/prelude.sh" cluster
cluster_init "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" \
  "shared_preload_libraries = 'idempotency, pg_cron'" \
  "cron.database_name = 'postgres'" "cron.host = '$CLUSTER_SOCK'" \
  "idempotency.database = ''"
cluster_start "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK"


[[ $(q -d postgres -c "SHOW listen_addresses") == "" ]] || fail "the server listens on TCP"
q -d postgres -c "CREATE EXTENSION pg_cron"
q -d postgres -c "CREATE DATABASE app"
q -d app -c "CREATE EXTENSION idempotency"
# The recipe (docs/storage.md, "Scheduling maintain() with pg_cron").
job=$(q -d postgres -c "SELECT cron.schedule_in_database('idempotency-maintain', '* * * * *',
  'SELECT count(*) FROM idempotency.maintain()', 'app')")
[[ $(q -d postgres -c "SELECT nodename FROM cron.job WHERE jobid = $job") == "$CLUSTER_SOCK" ]] ||
  fail "the job does not connect through the socket directory"
echo "job $job scheduled; waiting for its first run (up to 150 s)"

job_ran() {
  status=$(q -d postgres -c "SELECT status FROM cron.job_run_details WHERE jobid = $job
    AND status IN ('succeeded', 'failed') ORDER BY runid LIMIT 1")
  [[ -n $status ]]
}
poll --try 150 job_ran || fail "the pg_cron job did not run within 150 s"
details=$(q -d postgres -c "SELECT status || ': ' || coalesce(return_message, '') FROM cron.job_run_details WHERE jobid = $job ORDER BY runid LIMIT 1")
[[ $status == succeeded ]] || fail "the pg_cron job failed: $details"
echo "ok: pg_cron ran maintain() over the socket ($details)"

runs=$(q -d app -c "SELECT caller || '/' || result || '/' || jsonb_array_length(steps) FROM idempotency.maintenance_runs")
[[ $runs == pg_cron/ok/* ]] || fail "maintenance_runs shows '$runs', not a pg_cron run"
[[ $(q -d app -c "SELECT count(*) >= 4 FROM idempotency.partitions WHERE NOT is_default") == t ]] ||
  fail "the pg_cron run did not create the partitions"
echo "ok: maintenance_runs shows the run: $runs (caller/result/steps)"

# The worker was off: it never ran in 'app' (no 'worker' run), nor tried to.
[[ $(q -d app -c "SELECT count(*) FROM idempotency.maintenance_runs WHERE caller = 'worker'") == 0 ]] ||
  fail "the worker ran although idempotency.database = ''"
grep -q 'idempotency launcher started (interval 60 s, databases "")' "$CLUSTER_LOG" ||
  fail "the launcher did not start with an empty database list"
echo "ok: idempotency.database = '' kept the worker off"
