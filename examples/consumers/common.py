"""What both Python consumers share: settings from the environment and the message's effect."""
import json
import os

AMQP_URL = os.environ.get("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
GROUP = os.environ.get("CONSUMER_GROUP", "ledger")  # the scope of the keys / the consumer


def apply(conn, message_id, body):
    """The message's effect, in the caller's transaction."""
    m = json.loads(body)
    conn.execute("INSERT INTO ledger (consumer, message_id, account, amount) "
                 "VALUES (%s, %s, %s, %s)", (GROUP, message_id, m["account"], m["amount"]))


def no_phase(phase, ident):
    """on_phase(phase, ident) is called at each step: for logging and for crash tests."""
