"""Drives bench/brokers.sh: per round, for each client (py, node), model (queue, stream) and
mode (bare, ext, bare-batch, ext-batch, and for queues ext-runonce, the run_once consumer
before claim_once; the order rotated each round), publishes COUNT
messages into a fresh queue or stream, runs one consumer over them (consume.py /
consume.mjs), and checks that every message was applied once. Prints the table and writes
REPORT (markdown).
    python3 run.py ROUNDS COUNT BATCH REPORT   (AMQP_URL, PG* from the environment)"""
import os
import pathlib
import statistics
import subprocess
import sys
import time

import pika
import psycopg

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
rounds, count, batch, report = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
CLIENTS, MODELS = ["py", "node"], ["queue", "stream"]
MODES = ["bare", "ext", "bare-batch", "ext-batch"]
MODES_OF = {"queue": MODES + ["ext-runonce"], "stream": MODES}
AMQP_URL = os.environ["AMQP_URL"]
runs = 0


def publish(name, stream):
    channel = pika.BlockingConnection(pika.URLParameters(AMQP_URL)).channel()
    channel.queue_declare(name, durable=True,
                          arguments={"x-queue-type": "stream"} if stream else None)
    for k in range(count):
        if k == count - 1:
            # Confirms from here on: the broker handles a channel's messages in order, so the
            # last one's confirm means all of them are in the queue before the consumer starts.
            channel.confirm_delivery()
        channel.basic_publish("", name, b'{"account": "acct", "amount": 1}',
                              pika.BasicProperties(message_id=f"{name}-{k}", delivery_mode=2))
    channel.connection.close()


def consume(client, model, mode):
    global runs
    runs += 1
    name = f"bench_{runs}_{client}_{model}_{mode}"
    publish(name, model == "stream")
    cmd = ([sys.executable, str(HERE / "consume.py")] if client == "py"
           else ["node", str(HERE / "consume.mjs")]) + [model, mode, str(count), str(batch)]
    env = dict(os.environ, NAME=name, PYTHONPATH=str(ROOT / "clients/python"))
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if out.returncode != 0 or line is None:
        sys.exit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    with psycopg.connect(autocommit=True) as c:
        n, distinct = c.execute("SELECT count(*), count(DISTINCT message_id) FROM ledger "
                                "WHERE message_id LIKE %s", (name + "-%",)).fetchone()
    if (n, distinct) != (count, count):
        sys.exit(f"{name}: {n} effects of {distinct} messages, expected {count} once each")
    seconds, cpu = float(line.split()[5]), float(line.split()[6])
    return count / seconds, cpu / count


def loadavg():
    return open("/proc/loadavg").read().split()[0]


def main():
    load_before = loadavg()
    began = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    rate, cpu = {}, {}
    for r in range(rounds):
        for client in CLIENTS:
            for model in MODELS:
                all_modes = MODES_OF[model]
                modes = all_modes[r % len(all_modes):] + all_modes[:r % len(all_modes)]  # rotate
                for mode in modes:
                    mps, us = consume(client, model, mode)
                    rate.setdefault((client, model, mode), []).append(mps)
                    cpu.setdefault((client, model, mode), []).append(us)
                    print(f"round {r + 1} {client} {model} {mode}: {mps:.0f} msg/s, "
                          f"{us:.0f} us CPU/msg", flush=True)
    load_after = loadavg()

    def ratio(key_a, key_b, what):
        """Median over rounds of the per-round ratio a / b (min to max)."""
        values = [a / b for a, b in zip(what[key_a], what[key_b])]
        return statistics.median(values), min(values), max(values)

    def fmt(t):
        return f"{t[0]:.2f} ({t[1]:.2f} to {t[2]:.2f})"

    med = {k: statistics.median(v) for k, v in rate.items()}
    medcpu = {k: statistics.median(v) for k, v in cpu.items()}
    lines = [f"Run of {began}: {rounds} round(s) of {count} messages per consumer, batches of "
             f"{batch}; 1-minute load average {load_before} at the start, {load_after} at the "
             "end.", "",
             "ext: consume_once (claim_once) for a queue, apply_once for a stream; run_once: the "
             "queue consumer before claim_once (reserve + complete), measured in the same rounds.",
             "",
             "| client | model | bare msg/s | ext msg/s | ext / bare | bare CPU us/msg | "
             "ext CPU us/msg | run_once msg/s | run_once / bare | run_once CPU us/msg | "
             "bare-batch msg/s | ext-batch msg/s | ext-batch / bare-batch | ext-batch / ext |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for client in CLIENTS:
        for model in MODELS:
            k = lambda mode: (client, model, mode)  # noqa: E731
            before = (f"{med[k('ext-runonce')]:.0f} | "
                      f"{fmt(ratio(k('ext-runonce'), k('bare'), rate))} | "
                      f"{medcpu[k('ext-runonce')]:.0f}") if k('ext-runonce') in med else "- | - | -"
            lines.append(
                f"| {client} | {model} | {med[k('bare')]:.0f} | {med[k('ext')]:.0f} | "
                f"{fmt(ratio(k('ext'), k('bare'), rate))} | {medcpu[k('bare')]:.0f} | "
                f"{medcpu[k('ext')]:.0f} | {before} | {med[k('bare-batch')]:.0f} | "
                f"{med[k('ext-batch')]:.0f} | "
                f"{fmt(ratio(k('ext-batch'), k('bare-batch'), rate))} | "
                f"{fmt(ratio(k('ext-batch'), k('ext'), rate))} |")
    for client in CLIENTS:
        for model in MODELS:
            r = ratio((client, model, "ext"), (client, model, "bare"), rate)[0]
            print(f"target {client} {model}: ext / bare {r:.2f} (>= 0.80: "
                  f"{'met' if r >= 0.8 else 'NOT met'})")
    text = "\n".join(lines) + "\n"
    print(text)
    pathlib.Path(report).write_text(text)


main()
