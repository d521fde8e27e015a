"""A RabbitMQ queue consumer that applies each message exactly once (by its message id).

    QUEUE=payments AMQP_URL=amqp://... PGDATABASE=... python3 queue_consumer.py

The broker redelivers a message whose ack it has not received (the consumer died, its channel
closed), perhaps to another consumer and out of order. The message id is the key: consume_once
claims it and marks it done (idempotency.claim_once, one statement) in the same transaction as
the effect, and the ack goes out only after COMMIT. Died before COMMIT: nothing of it is stored,
the redelivery applies it. Died after COMMIT, before the ack: the redelivery finds the key
completed (consume_once returns False) and is only acknowledged.
Producers must set a message id that stays the same on every retry of theirs."""
import os

import pika
import psycopg

from common import AMQP_URL, GROUP, apply, no_phase
from pg_idempotency import consume_once

QUEUE = os.environ.get("QUEUE", "payments")


def main(on_phase=no_phase):
    conn = psycopg.connect(autocommit=True)  # the helpers open their own transactions
    channel = pika.BlockingConnection(pika.URLParameters(AMQP_URL)).channel()
    channel.queue_declare(QUEUE, durable=True)
    channel.basic_qos(prefetch_count=10)

    def on_message(ch, method, props, body):
        on_phase("received", props.message_id)

        def work(c):
            apply(c, props.message_id, body)
            on_phase("effect_written", props.message_id)

        # wait: a competing consumer may hold the key (its transaction still open) for a moment.
        applied = consume_once(conn, GROUP, props.message_id, work, wait="30 seconds")
        on_phase("committed" if applied else "duplicate", props.message_id)
        ch.basic_ack(method.delivery_tag)  # only now: after COMMIT
        on_phase("acked", props.message_id)

    channel.basic_consume(QUEUE, on_message)
    channel.start_consuming()  # a closed connection raises: let a supervisor restart us


if __name__ == "__main__":
    main()
