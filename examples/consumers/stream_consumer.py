"""A RabbitMQ stream consumer that applies each message exactly once (by its offset).

    STREAM=events AMQP_URL=amqp://... PGDATABASE=... python3 stream_consumer.py

A stream is an append-only log read from an offset, as a Kafka partition. The offset is the
position: apply_once runs accept(group, stream, offset) in the same transaction as the effect,
so the watermark moves with it, and a message at or below the watermark is skipped. The
consumer starts after its watermark (START_OFFSET=first or a number overrides it: a replay
from an older offset applies nothing twice), and acks after COMMIT (acks only pace a stream)."""
import os

import pika
import psycopg

from common import AMQP_URL, GROUP, apply, no_phase
from pg_idempotency import apply_once, watermark

STREAM = os.environ.get("STREAM", "events")


def start_offset(conn):
    start = os.environ.get("START_OFFSET")
    if start:
        return start if start in ("first", "last", "next") else int(start)
    w = watermark(conn, GROUP, STREAM)
    return "first" if w is None else w + 1


def main(on_phase=no_phase):
    conn = psycopg.connect(autocommit=True)
    channel = pika.BlockingConnection(pika.URLParameters(AMQP_URL)).channel()
    channel.queue_declare(STREAM, durable=True, arguments={"x-queue-type": "stream"})
    channel.basic_qos(prefetch_count=100)  # a stream consumer needs a prefetch

    def on_message(ch, method, props, body):
        offset = props.headers["x-stream-offset"]
        on_phase("received", props.message_id)

        def work(conn):
            apply(conn, props.message_id, body)  # the key is the offset
            on_phase("effect_written", props.message_id)

        applied = apply_once(conn, GROUP, STREAM, offset, work)
        on_phase("committed" if applied else "duplicate", props.message_id)
        ch.basic_ack(method.delivery_tag)
        on_phase("acked", props.message_id)

    channel.basic_consume(STREAM, on_message,
                          arguments={"x-stream-offset": start_offset(conn)})
    channel.start_consuming()


if __name__ == "__main__":
    main()
