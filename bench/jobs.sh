#!/usr/bin/env bash
# Background jobs: jobs per second of a Celery task (RabbitMQ) and a BullMQ job (Redis) that
# apply their effect exactly once against the same task or job with its own bare insert
# (bench/jobs/run.py says how). Writes bench/jobs.md.
#   bash bench/jobs.sh             full run (BENCH_ROUNDS=4 rounds of BENCH_COUNT=1000)
#   bash bench/jobs.sh --smoke     one round of 30; its report goes under bench/out/ only
#   BENCH_FRAMEWORKS=bullmq        one framework only (default "celery bullmq")
# BENCH_PORT: PostgreSQL, default 54460 + IDEM_PORT_OFFSET (--smoke: 54461 + ...);
# the brokers on 20190 + IDEM_PORT_OFFSET and up (--smoke: 20200 + ...).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
BENCH=$IDEM_ROOT/bench
SMOKE=0
[[ ${1:-} == --smoke ]] && SMOKE=1
ROUNDS=${BENCH_ROUNDS:-4} COUNT=${BENCH_COUNT:-1000}
[[ $SMOKE == 1 ]] && ROUNDS=1 COUNT=30
PORT=${BENCH_PORT:-$((54460 + SMOKE + ${IDEM_PORT_OFFSET:-0}))}
OUT=$BENCH/out/$([[ $SMOKE == 1 ]] && echo jobs-smoke || echo jobs)
REPORT=${BENCH_REPORT:-$BENCH/jobs.md}
[[ $SMOKE == 1 ]] && REPORT=$OUT/jobs.md

ensure_jobs >&2
"$IDEM_ROOT/scripts/npm_ci.sh" "$IDEM_ROOT/examples/consumers" >&2
DATA=/tmp/idempotency-bench-jobs-$PORT/data
SOCK=/tmp/idempotency-$PORT
rm -rf "$OUT"
mkdir -p "$OUT"
trap 'cluster_stop "$DATA" || true' EXIT
log "starting a throwaway cluster on port $PORT ($DATA)"
cluster_init "$DATA" "$PORT" "$SOCK"
cluster_start "$DATA" "$PORT" "$SOCK"
PGHOST=$SOCK PGPORT=$PORT PGUSER=postgres PGDATABASE=postgres JOBS_DB=bench_jobs \
  JOBS_PORT=$((20190 + 10 * SMOKE + ${IDEM_PORT_OFFSET:-0})) JOBS_DIR=$OUT \
  /usr/bin/python3 "$BENCH/jobs/run.py" "$ROUNDS" "$COUNT" "$REPORT"
log "report: ${REPORT#"$IDEM_ROOT"/}"
