"""A RabbitMQ queue consumer that applies each message exactly once (by its message id).

    QUEUE=payments AMQP_URL=amqp://... PGDATABASE=... python3 queue_consumer.py

The broker redelivers a message whose ack it has not received (the consumer died, its channel
closed), perhaps to another consumer and out of order. The message id is the key: consume_once
claims it and marks it done (idempotency.claim_once, one statement) in the same transaction as
the effect, and the ack goes out only after COMMIT. Died before COMMIT: nothing of it is stored,
the redelivery applies it. Died after COMMIT, before the ack: the redelivery finds the key
completed (consume_once returns False) and is only acknowledged.
A message whose effect fails is requeued, its failure counted on its key; at MAX_ATTEMPTS it is
rejected without requeue, to the queue's dead-letter exchange (<queue>.dlx, then the queue
<queue>.dead), and idempotency.failed_keys keeps its error.
Producers must set a message id that stays the same on every retry of theirs."""
import os

import pika
import psycopg

from common import AMQP_URL, GROUP, MAX_ATTEMPTS, apply, declare_queue, log, no_phase
from pg_idempotency import ConnectionLost, PoisonMessage, consume_once

QUEUE = os.environ.get("QUEUE", "payments")


def main(on_phase=no_phase):
    conn = psycopg.connect(autocommit=True)  # the helpers open their own transactions
    channel = pika.BlockingConnection(pika.URLParameters(AMQP_URL)).channel()
    declare_queue(channel, QUEUE)
    channel.basic_qos(prefetch_count=10)
    log(f"consuming {QUEUE} as {GROUP}")

    def on_message(ch, method, props, body):
        mid = props.message_id
        on_phase("received", mid)

        def work(c):
            apply(c, mid, body)
            on_phase("effect_written", mid)

        try:
            # wait: a competing consumer may hold the key (its transaction still open).
            applied = consume_once(conn, GROUP, mid, work, wait="30 seconds",
                                   max_attempts=MAX_ATTEMPTS)
        except PoisonMessage as e:
            log(f"dead-lettered {mid} after {e.attempt} attempts: {e.error['error']}")
            on_phase("dead_lettered", mid)
            ch.basic_reject(method.delivery_tag, requeue=False)  # to <queue>.dlx
            on_phase("rejected", mid)
            return
        except (ConnectionLost, psycopg.OperationalError):
            raise  # the database is gone: exit, unacked, for a supervisor to restart us
        except Exception as e:  # noqa: BLE001  (counted on the key: requeue for another try)
            log(f"failed {mid}, requeued: {type(e).__name__}: {e}")
            on_phase("failed", mid)
            ch.basic_nack(method.delivery_tag, requeue=True)
            on_phase("requeued", mid)
            return
        log(f"applied {mid}" if applied else f"skipped {mid}: applied before")
        on_phase("committed" if applied else "duplicate", mid)
        ch.basic_ack(method.delivery_tag)  # only now: after COMMIT
        on_phase("acked", mid)

    if os.environ.get("DRAIN"):
        # A batch run: until the queue has nothing ready and this consumer holds nothing.
        for method, props, body in channel.consume(QUEUE, inactivity_timeout=1):
            if method is not None:
                on_message(channel, method, props, body)
            elif channel.queue_declare(QUEUE, passive=True).method.message_count == 0:
                break
        channel.cancel()
        log(f"{QUEUE} has nothing left: done")
        return
    channel.basic_consume(QUEUE, on_message)
    channel.start_consuming()  # a closed connection raises: let a supervisor restart us


if __name__ == "__main__":
    main()
