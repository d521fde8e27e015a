"""Publishes payments for the consumers to apply: persistent messages with a message id and a
JSON body ({"account": ..., "amount": ...}), confirmed by the broker.

    AMQP_URL=amqp://... python3 producer.py --queue payments --count 5 [--poison 3]
    AMQP_URL=amqp://... python3 producer.py --stream events --count 5

Message ids are <prefix>-1 .. <prefix>-<count> (--prefix, default "pay"): running it again
publishes the same ids, as a producer that retries does, and the consumers skip them.
--poison N makes message N's body not JSON, a message no consumer can apply."""
import argparse
import json

import pika

from common import AMQP_URL, declare_queue, declare_stream


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--queue")
    where.add_argument("--stream")
    ap.add_argument("--count", type=int, default=5)
    ap.add_argument("--prefix", default="pay")
    ap.add_argument("--poison", type=int, action="append", default=[],
                    help="this message's body is not JSON (may be repeated)")
    args = ap.parse_args()
    connection = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    channel = connection.channel()
    if args.queue:
        declare_queue(channel, args.queue)
    else:
        declare_stream(channel, args.stream)
    channel.confirm_delivery()  # each publish returns once the broker has the message
    for n in range(1, args.count + 1):
        message_id = f"{args.prefix}-{n}"
        body = (b"{not json" if n in args.poison
                else json.dumps({"account": f"acct-{n % 3}", "amount": 10 * n}).encode())
        channel.basic_publish("", args.queue or args.stream, body,
                              pika.BasicProperties(message_id=message_id, delivery_mode=2,
                                                   content_type="application/json"))
        print(f"published {message_id}{' (not JSON)' if n in args.poison else ''}")
    connection.close()


if __name__ == "__main__":
    main()
