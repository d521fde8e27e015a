"""The CONTROL consumer: the queue consumer of examples/consumers done wrong, acknowledging
before its COMMIT. Killed between the two, its message is gone: acked, so never redelivered,
and never committed. The test must see that loss (else it could not see one at all)."""
import os

import pika
import psycopg

from common import AMQP_URL, GROUP, apply, declare_queue, no_phase
from pg_idempotency import run_once

QUEUE = os.environ.get("QUEUE", "payments")


def main(on_phase=no_phase):
    conn = psycopg.connect(autocommit=True)
    channel = pika.BlockingConnection(pika.URLParameters(AMQP_URL)).channel()
    declare_queue(channel, QUEUE)
    channel.basic_qos(prefetch_count=10)

    def on_message(ch, method, props, body):
        on_phase("received", props.message_id)
        ch.basic_ack(method.delivery_tag)  # WRONG: before the commit (pika sends it now)
        on_phase("acked", props.message_id)
        result = run_once(conn, GROUP, props.message_id,
                          lambda: (apply(conn, props.message_id, body), (200, None))[1])
        on_phase("duplicate" if result.replayed else "committed", props.message_id)

    channel.basic_consume(QUEUE, on_message)
    channel.start_consuming()
