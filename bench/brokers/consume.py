"""One benchmark consumer (Python): consumes COUNT messages from a RabbitMQ queue or stream,
applies each (a ledger insert) in one of four modes, acks after COMMIT, and prints
    RESULT py MODEL MODE COUNT SECONDS CPU_US
(seconds from the first delivery to the last ack; CPU: this process's and its PostgreSQL
backend's user + system time over the same span).
  bare         a transaction per message, no deduplication
  ext          a transaction per message: consume_once (queue, claim_once of the message id) or
               apply_once (stream, accept of the offset), as examples/consumers does
  ext-runonce  (queue only) a transaction per message with run_once (reserve + complete): the
               consumer of examples/consumers before claim_once, for comparison
  bare-batch   BATCH messages per transaction, no deduplication
  ext-batch    BATCH messages per transaction: claim_once per message (queue), or one accept
               of the batch's last offset after skipping offsets at or below the watermark
               (stream; one consumer per stream and group at a time)
    python3 consume.py MODEL MODE COUNT BATCH   (AMQP_URL, NAME, PG* from the environment)"""
import os
import resource
import sys
import time

import pika
import psycopg

from pg_idempotency import apply_once, claim_once, consume_once, run_once, watermark

model, mode, count, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
NAME, GROUP = os.environ["NAME"], "bench"
if not mode.endswith("-batch"):
    batch = 1
INSERT = "INSERT INTO ledger (consumer, message_id, account, amount) VALUES (%s, %s, %s, %s)"

conn = psycopg.connect(autocommit=True)
backend = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
channel = pika.BlockingConnection(pika.URLParameters(os.environ["AMQP_URL"])).channel()
channel.basic_qos(prefetch_count=max(200, 2 * batch))


def cpu_us():
    me = resource.getrusage(resource.RUSAGE_SELF)
    with open(f"/proc/{backend}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    return (me.ru_utime + me.ru_stime) * 1e6 + ticks * 1e6 / os.sysconf("SC_CLK_TCK")


def apply(message_id):
    conn.execute(INSERT, (GROUP, message_id, "acct", 1))


def offset_of(props):
    return props.headers["x-stream-offset"]


def handle(pending):
    """Applies the pending deliveries [(method, props)], in one transaction or one each."""
    if mode == "bare" or mode == "bare-batch":
        with conn.transaction():
            for _, props in pending:
                apply(props.message_id)
    elif mode == "ext" and model == "queue":
        _, props = pending[0]
        consume_once(conn, GROUP, props.message_id, lambda c: apply(props.message_id))
    elif mode == "ext-runonce":
        _, props = pending[0]
        run_once(conn, GROUP, props.message_id, lambda: (apply(props.message_id), (200, None))[1])
    elif mode == "ext":
        _, props = pending[0]
        apply_once(conn, GROUP, NAME, offset_of(props), lambda c: apply(props.message_id))
    elif model == "queue":
        with conn.transaction():
            for _, props in pending:
                if claim_once(conn, GROUP, props.message_id):
                    apply(props.message_id)
    else:
        with conn.transaction():
            w = watermark(conn, GROUP, NAME)
            for _, props in pending:
                if w is None or offset_of(props) > w:
                    apply(props.message_id)
            conn.execute("SELECT idempotency.accept(%s, %s, %s::bigint)",
                         (GROUP, NAME, offset_of(pending[-1][1])))
    channel.basic_ack(pending[-1][0].delivery_tag, multiple=True)


state = {"pending": [], "done": 0, "began": None}


def on_message(ch, method, props, body):
    if state["began"] is None:
        state["began"] = (time.perf_counter(), cpu_us())
    state["pending"].append((method, props))
    if len(state["pending"]) >= batch or state["done"] + len(state["pending"]) >= count:
        handle(state["pending"])
        state["done"] += len(state["pending"])
        state["pending"] = []
        if state["done"] >= count:
            ch.stop_consuming()


args = {"x-stream-offset": "first"} if model == "stream" else None
channel.basic_consume(NAME, on_message, arguments=args)
channel.start_consuming()
t0, c0 = state["began"]
print(f"RESULT py {model} {mode} {count} {time.perf_counter() - t0:.6f} {cpu_us() - c0:.0f}")
