#!/usr/bin/env bash
# Message consumers against RabbitMQ: messages per second and CPU per message (the
# consumer process and its PostgreSQL backend) of a consumer that applies each message exactly
# once with the extension (examples/consumers' pattern: consume_once, i.e. claim_once, by
# message id for a queue, apply_once by offset for a stream) against the same consumer with no
# deduplication, a transaction per message; the queue consumer with run_once (reserve and
# complete: the pattern before claim_once) in the same rounds; and what batching buys (BATCH
# messages per transaction: a claim_once per message for a queue, one accept per stream).
# Python (pika) and Node (amqplib), one run,
# ratios within a round, the order of the modes rotated each round. Method:
# bench/pages/consumers.md. Writes bench/brokers.md.
#
#   bash bench/brokers.sh            full run (4 to 8 minutes on 2 cores)
#   bash bench/brokers.sh --smoke    a few seconds; its report goes under bench/out/ only
#
# Knobs (environment):
#   BENCH_ROUNDS=5   BENCH_COUNT=5000 (messages per consumer run: runs of 2 to 4 s; with 1000,
#                    the first messages of a new process and backend weighed on the ratio)
#                    BENCH_BATCH=50
#   BENCH_SYNC=on    synchronous_commit of the cluster: on, as the pattern needs (an ack after
#                    a commit that a crash can still undo loses the message); off shows the
#                    CPU-bound case
#   BENCH_PORT       PostgreSQL, default 54457 + IDEM_PORT_OFFSET (--smoke: 54458 + ...)
#   BENCH_AMQP_PORT  RabbitMQ (AMQP; the next two ports too), default 20080 + IDEM_PORT_OFFSET
#                    (--smoke: 20083 + ...)
#   BENCH_BUILD=0    1: build and install the extension first (0: the installed one)
#   BENCH_REPORT     where the report goes (default bench/brokers.md)
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
BENCH=$IDEM_ROOT/bench

SMOKE=0
[[ ${1:-} == --smoke ]] && SMOKE=1
ROUNDS=${BENCH_ROUNDS:-5} COUNT=${BENCH_COUNT:-5000} BATCH=${BENCH_BATCH:-50}
[[ $SMOKE == 1 ]] && ROUNDS=1 COUNT=40 BATCH=10
SYNC=${BENCH_SYNC:-on}
# --smoke on ports of its own: the brokers suite runs it while a full run may be going.
PORT=${BENCH_PORT:-$((54457 + SMOKE + ${IDEM_PORT_OFFSET:-0}))}
AMQP_PORT=${BENCH_AMQP_PORT:-$((20080 + 3 * SMOKE + ${IDEM_PORT_OFFSET:-0}))}
OUT=$BENCH/out/$([[ $SMOKE == 1 ]] && echo brokers-smoke || echo brokers)
REPORT=${BENCH_REPORT:-$BENCH/brokers.md}
[[ $SMOKE == 1 ]] && REPORT=$OUT/brokers.md
PYTHON=${BENCH_PYTHON:-/usr/bin/python3} # Debian's, with python3-psycopg and python3-pika

ensure_rabbitmq >&2
"$IDEM_ROOT/scripts/npm_ci.sh" "$IDEM_ROOT/examples/consumers" >&2

log "PostgreSQL $("$PG_CONFIG" --version | awk '{ print $2 }') ($PG_CONFIG)"
[[ ${BENCH_BUILD:-0} == 1 ]] && IDEM_WERROR=1 build_and_install >&2
DATA=/tmp/idempotency-bench-brokers-$PORT/data
SOCK=/tmp/idempotency-$PORT
rm -rf "$OUT"
mkdir -p "$OUT"
stop_all() {
  bash "$IDEM_ROOT/test/brokers/rabbitmq.sh" stop "$OUT/rabbitmq" || true
  cluster_stop "$DATA" || true
}
trap stop_all EXIT
log "starting a throwaway cluster on port $PORT ($DATA), synchronous_commit = $SYNC"
cluster_init "$DATA" "$PORT" "$SOCK" "synchronous_commit = $SYNC"
cluster_start "$DATA" "$PORT" "$SOCK"
export PGHOST=$SOCK PGPORT=$PORT PGUSER=postgres PGDATABASE=postgres
"$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -f "$IDEM_ROOT/examples/consumers/schema.sql"
log "starting RabbitMQ on 127.0.0.1:$AMQP_PORT"
bash "$IDEM_ROOT/test/brokers/rabbitmq.sh" start "$OUT/rabbitmq" "$AMQP_PORT"
AMQP_URL="amqp://guest:guest@127.0.0.1:$AMQP_PORT/%2F" \
  "$PYTHON" "$BENCH/brokers/run.py" "$ROUNDS" "$COUNT" "$BATCH" "$REPORT"
log "report: ${REPORT#"$IDEM_ROOT"/}"
