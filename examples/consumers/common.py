"""What the Python consumers and the producer share: settings from the environment, the queue's
declaration (with its dead-letter exchange), the message's effect and the log."""
import json
import os
import sys

AMQP_URL = os.environ.get("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
GROUP = os.environ.get("CONSUMER_GROUP", "ledger")  # the scope of the keys / the consumer
# A message whose work fails this many times is dead-lettered (a poison message).
MAX_ATTEMPTS = int(os.environ.get("MAX_ATTEMPTS", "5"))


def declare_queue(channel, queue):
    """The queue, durable, whose rejected messages go to the fanout exchange <queue>.dlx and
    from there to the queue <queue>.dead. Producer and consumers declare it alike (RabbitMQ
    refuses a second declaration with other arguments)."""
    channel.exchange_declare(f"{queue}.dlx", "fanout", durable=True)
    channel.queue_declare(f"{queue}.dead", durable=True)
    channel.queue_bind(f"{queue}.dead", f"{queue}.dlx")
    channel.queue_declare(queue, durable=True,
                          arguments={"x-dead-letter-exchange": f"{queue}.dlx"})


def declare_stream(channel, stream):
    channel.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})


def apply(conn, message_id, body):
    """The message's effect, in the caller's transaction."""
    m = json.loads(body)
    conn.execute("INSERT INTO ledger (consumer, message_id, account, amount) "
                 "VALUES (%s, %s, %s, %s)", (GROUP, message_id, m["account"], m["amount"]))


def log(*words):
    """One line per message handled, on stderr: what was applied, skipped, retried or
    dead-lettered."""
    print(*words, file=sys.stderr, flush=True)


def no_phase(phase, ident):
    """on_phase(phase, ident) is called at each step: for crash tests."""
