"""A RabbitMQ stream consumer that applies each message exactly once (by its offset).

    STREAM=events AMQP_URL=amqp://... PGDATABASE=... python3 stream_consumer.py

A stream is an append-only log read from an offset, as a Kafka partition. The offset is the
position: apply_once runs accept(group, stream, offset) in the same transaction as the effect,
so the watermark moves with it, and a message at or below the watermark is skipped. The
consumer starts after its watermark (START_OFFSET=first or a number overrides it: a replay
from an older offset applies nothing twice), and acks after COMMIT (acks only pace a stream).
A message whose effect fails is tried again, its failure counted on the key
"<stream>@<offset>"; at MAX_ATTEMPTS the watermark moves past it with the failure recorded
(idempotency.failed_keys) and the consumer goes on: a log cannot hold one message back."""
import os
import time

import pika
import psycopg

from common import AMQP_URL, GROUP, MAX_ATTEMPTS, apply, declare_stream, log, no_phase
from pg_idempotency import ConnectionLost, PoisonMessage, apply_once, watermark

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
    declare_stream(channel, STREAM)
    channel.basic_qos(prefetch_count=100)  # a stream consumer needs a prefetch
    offset = start_offset(conn)
    log(f"consuming {STREAM} as {GROUP} from offset {offset}")

    def on_message(ch, method, props, body):
        offset = props.headers["x-stream-offset"]
        mid = props.message_id
        on_phase("received", mid)

        def work(conn):
            apply(conn, mid, body)  # the key is the offset
            on_phase("effect_written", mid)

        tries = 0
        while True:
            try:
                applied = apply_once(conn, GROUP, STREAM, offset, work,
                                     max_attempts=MAX_ATTEMPTS)
            except PoisonMessage as e:
                log(f"dead-lettered {mid} at offset {offset} after {e.attempt} attempts: "
                    f"{e.error['error']}")
                on_phase("dead_lettered", mid)
                break
            except (ConnectionLost, psycopg.OperationalError):
                raise  # the database is gone: exit, for a supervisor to restart us
            except Exception as e:  # noqa: BLE001  (counted on the key: try again)
                tries += 1
                log(f"failed {mid} at offset {offset}, trying again: {type(e).__name__}: {e}")
                on_phase("failed", mid)
                time.sleep(min(0.1 * tries, 2))  # a transient failure (not counted) may pass
                continue
            log(f"applied {mid} at offset {offset}" if applied
                else f"skipped {mid} at offset {offset}: at or below the watermark")
            on_phase("committed" if applied else "duplicate", mid)
            break
        ch.basic_ack(method.delivery_tag)
        on_phase("acked", mid)

    channel.basic_consume(STREAM, on_message, arguments={"x-stream-offset": offset})
    channel.start_consuming()


if __name__ == "__main__":
    main()
