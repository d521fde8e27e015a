"""The brokers suite: the reference consumers of examples/consumers (Python and Node, queue and
stream) against a real RabbitMQ, killed (SIGKILL) at each phase and at random moments,
competing, replayed from older offsets, across a broker restart. At the end of each scenario,
per message: effects applied (exactly 1), lost (0), refused that should have been applied (0).
A control consumer that acks before its commit must show a loss.

Takes PGHOST/PGPORT/PGUSER from the environment (a cluster with the extension installed),
BROKER_PORT (the AMQP port of a private broker it starts and stops through rabbitmq.sh) and
BROKER_DIR. Prints "ok N - scenario" / "not ok N - scenario" lines and "# passed P failed F";
exits 0 only if every scenario passed. SEED fixes the random kills (it is printed)."""
import json
import os
import pathlib
import random
import signal
import subprocess
import sys
import threading
import time

import pika
import psycopg

ROOT = pathlib.Path(__file__).resolve().parents[2]
HERE = ROOT / "test/brokers"
EXAMPLES = ROOT / "examples/consumers"
sys.path.insert(0, str(EXAMPLES))
from common import declare_queue, declare_stream  # noqa: E402  (the consumers' declarations)
DB = os.environ.get("BROKERS_DB", "brokers_test")
PORT = int(os.environ["BROKER_PORT"])
BROKER_DIR = pathlib.Path(os.environ["BROKER_DIR"])
AMQP_URL = f"amqp://guest:guest@127.0.0.1:{PORT}/%2F"
LOGS = BROKER_DIR / "consumers"
SEED = int(os.environ.get("SEED", str(random.randrange(1 << 30))))
rng = random.Random(SEED)
WAIT = 90  # seconds: the bound of every wait on a condition


class Failure(Exception):
    pass


def wait_for(what, predicate, timeout=WAIT):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise Failure(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


# ---- the broker ----

def broker(cmd):
    args = ["bash", str(HERE / "rabbitmq.sh"), cmd, str(BROKER_DIR)]
    subprocess.run(args + ([str(PORT)] if cmd == "start" else []), check=True)


def amqp_channel():
    return pika.BlockingConnection(pika.URLParameters(AMQP_URL)).channel()


def declare(channel, name, stream):
    """As the consumers declare it: a queue with its dead-letter exchange, or a stream."""
    (declare_stream if stream else declare_queue)(channel, name)


def produce(name, ids, stream=False, poison=()):
    """Publishes persistent messages with publisher confirms: each id is on the broker. The
    ids in poison get a body that is not JSON: no consumer can apply them."""
    channel = amqp_channel()
    declare(channel, name, stream)
    channel.confirm_delivery()
    for i in ids:
        body = json.dumps({"account": f"acct-{hash(i) % 7}", "amount": 1})
        if i in poison:
            body = "{not json"
        channel.basic_publish("", name, body, pika.BasicProperties(
            message_id=i, delivery_mode=2))
    channel.connection.close()


def available(name):
    """True once the broker serves the queue (a stream takes a moment after a restart)."""
    try:
        channel = amqp_channel()
    except pika.exceptions.AMQPConnectionError:
        return False
    try:
        channel.queue_declare(name, passive=True)
        channel.connection.close()
        return True
    except pika.exceptions.ChannelClosedByBroker:
        return False


def ready(name):
    """Messages ready for delivery, once the broker has seen every consumer of the queue go
    (their unacked messages are then ready again)."""
    def count():
        channel = amqp_channel()
        try:
            ok = channel.queue_declare(name, passive=True).method
            return None if ok.consumer_count else (ok.message_count,)
        finally:
            channel.connection.close()
    return wait_for(f"{name}: no consumer left", count)[0]


# ---- the database ----

def db(dbname=DB):
    return psycopg.connect(dbname=dbname, autocommit=True)


def reset_database():
    with db(os.environ.get("PGDATABASE", "postgres")) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {DB}")
    with db() as c:
        c.execute((EXAMPLES / "schema.sql").read_text())


def effects(group):
    with db() as c:
        return dict(c.execute("SELECT message_id, count(*) FROM ledger WHERE consumer = %s "
                              "GROUP BY 1", (group,)).fetchall())


# ---- consumers ----

class Consumer:
    """One consumer (client, model, settings); each start is a new process with its own log."""
    runs = 0
    every = []

    def __init__(self, client, model, **env):
        self.client, self.model, self.env = client, model, env
        self.proc, self.logs = None, []
        Consumer.every.append(self)

    def start(self, **extra):
        self.kill()  # one process per consumer at a time
        Consumer.runs += 1
        log = LOGS / f"{Consumer.runs:03d}-{self.client}-{self.model}.log"
        self.logs.append(log)
        if self.client == "py":
            cmd = [sys.executable, str(HERE / "consumer.py"), self.model]
        else:
            cmd = ["node", str(HERE / "consumer.mjs"), self.model]
        env = dict(os.environ, PGDATABASE=DB, AMQP_URL=AMQP_URL,
                   PYTHONPATH=str(ROOT / "clients/python"), **self.env, **extra)
        with open(log, "w") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        return self

    def lines(self, current_only=False):
        out = []
        for log in self.logs[-1:] if current_only else self.logs:
            out += log.read_text().splitlines()
        return out

    def phases(self, phase, current_only=False):
        return [ln.split()[2] for ln in self.lines(current_only)
                if ln.startswith(f"PHASE {phase} ")]

    def wait_stopped(self):
        """Waits for the phase hook's STOPPED line; returns the message id it stopped at."""
        line = wait_for(f"{self.client} {self.model} to reach its STOP_PHASE",
                        lambda: next((ln for ln in self.lines(True)
                                      if ln.startswith("STOPPED ")), None)
                        or self.exited())
        return line.split()[2]

    def exited(self):
        if self.proc.poll() is not None:
            raise Failure(f"{self.client} {self.model} consumer exited ({self.proc.returncode}):"
                          f"\n{self.logs[-1].read_text()[-2000:]}")

    def kill(self):
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        if self.proc:
            self.proc.wait()

    def settled(self):
        """Everything this run received it has acked, requeued or rejected."""
        self.exited()
        return len(self.phases("received", True)) == sum(
            len(self.phases(p, True)) for p in ("acked", "requeued", "rejected"))


def refused(consumers):
    return {i for c in consumers for i in c.phases("duplicate")}


def verdict(group, ids, consumers):
    """(applied exactly once, applied twice or more, lost, refused though never applied,
    effects of unknown messages) for one consumer group."""
    found = effects(group)
    once = sum(1 for i in ids if found.get(i) == 1)
    dup = sum(1 for i in ids if found.get(i, 0) > 1)
    lost = [i for i in ids if i not in found]
    wrongly_refused = sum(1 for i in lost if i in refused(consumers))
    unknown = len(set(found) - set(ids))
    return once, dup, len(lost), wrongly_refused, unknown


def check(group, ids, consumers, expect_lost=0):
    once, dup, lost, wrong, unknown = verdict(group, ids, consumers)
    print(f"#   {group}: {len(ids)} messages: applied once {once}, more than once {dup}, "
          f"lost {lost}, refused though never applied {wrong}, unknown {unknown}")
    if (once, dup, lost, wrong, unknown) != (len(ids) - expect_lost, 0, expect_lost, 0, 0):
        raise Failure(f"{group}: expected every message applied exactly once"
                      + (f" but {expect_lost} lost" if expect_lost else ""))


def drain_queue(queue, group, ids, consumer):
    """Runs consumer until every message has its effect and nothing is left in the queue to
    redeliver: kill, look at the queue, run it again for what is left (bounded)."""
    consumer.start()
    wait_for(f"{group}: every message applied",
             lambda: consumer.exited() or set(ids) <= set(effects(group)))
    for _ in range(10):
        wait_for(f"{group}: every delivery acked", consumer.settled)
        consumer.kill()
        left = ready(queue)
        if left == 0:
            return
        consumer.start()
        wait_for(f"{group}: the {left} redeliveries received",
                 lambda: consumer.exited() or len(consumer.phases("received", True)) >= left)
    raise Failure(f"{queue}: messages still in the queue after 10 rounds")


def drain_stream(group, last_id, consumer, **env):
    """Runs consumer until the stream's last message is applied and all it got is acked (with
    START_OFFSET in env: until this run has handled the last message itself)."""
    consumer.start(**env)
    if env.get("START_OFFSET"):
        wait_for(f"{group}: {last_id} handled again",
                 lambda: consumer.exited() or last_id in consumer.phases("acked", True))
    else:
        wait_for(f"{group}: {last_id} applied",
                 lambda: consumer.exited() or last_id in effects(group))
        wait_for(f"{group}: every delivery acked", consumer.settled)
    consumer.kill()


def message_ids(prefix, n, start=0):
    return [f"{prefix}-{k}" for k in range(start, start + n)]


# ---- scenarios ----

PHASES = ["received", "effect_written", "committed"]  # committed = committed, not yet acked


def queue_phases(client):
    """SIGKILL at each phase (random n-th message), restart, redelivery: each applied once."""
    queue = group = f"q_phases_{client}"
    ids = message_ids(queue, 40)
    produce(queue, ids)
    c = Consumer(client, "queue", QUEUE=queue, CONSUMER_GROUP=group)
    for phase in PHASES:
        c.start(STOP_PHASE=phase, STOP_NTH=str(rng.randint(1, 8)))
        stopped = c.wait_stopped()
        c.kill()
        if phase == "committed" and effects(group).get(stopped) != 1:
            raise Failure(f"{stopped}: killed after its commit, but its effect is not stored")
    drain_queue(queue, group, ids, c)
    check(group, ids, [c])


def queue_competing():
    """A Python and a Node consumer on one queue; the Node one dies holding unacked messages
    (with an effect written, uncommitted) and the Python one gets them."""
    queue = group = "q_competing"
    ids = message_ids(queue, 60)
    produce(queue, ids)
    env = dict(QUEUE=queue, CONSUMER_GROUP=group)
    py, node = Consumer("py", "queue", **env), Consumer("node", "queue", **env)
    # The Node consumer first, until it holds its nth message: started together, the Python
    # one could take every message before the Node one got n of them (seen in CI).
    node.start(STOP_PHASE="effect_written", STOP_NTH=str(rng.randint(2, 6)))
    stopped = node.wait_stopped()
    py.start()
    node.kill()
    wait_for(f"{stopped} redelivered to the other consumer and applied",
             lambda: py.exited() or stopped in py.phases("committed"))
    drain_queue(queue, group, ids, py)
    check(group, ids, [py, node])


def stream_phases(client):
    """SIGKILL at each phase, restart after the watermark; then from an older offset than the
    watermark, and from `first`: each applied once, nothing refused that was not applied."""
    stream = group = f"s_phases_{client}"
    ids = message_ids(stream, 40)
    produce(stream, ids, stream=True)
    c = Consumer(client, "stream", STREAM=stream, CONSUMER_GROUP=group)
    for phase in PHASES:
        c.start(STOP_PHASE=phase, STOP_NTH=str(rng.randint(1, 8)))
        c.wait_stopped()
        c.kill()
    # Some applied now. From an offset older than the watermark (offset = index here):
    applied = len(effects(group))
    if not 0 < applied < len(ids):
        raise Failure(f"{group}: {applied} applied before the replay; the test needs some")
    older = rng.randint(0, applied - 1)
    c.start(START_OFFSET=str(older), STOP_PHASE="committed")
    c.wait_stopped()
    if not c.phases("duplicate", True):
        raise Failure(f"{group}: a restart from offset {older} refused nothing")
    c.kill()
    drain_stream(group, ids[-1], c)
    drain_stream(group, ids[-1], c, START_OFFSET="first")
    if len(c.phases("duplicate", True)) != len(ids):
        raise Failure(f"{group}: the replay from first did not refuse all {len(ids)} messages")
    check(group, ids, [c])


def random_kills():
    """Producer running; competing queue consumers (Python and Node) and a stream consumer per
    client, SIGKILLed at random moments and restarted."""
    queue, stream = "q_random", "s_random"
    ids = message_ids("random", 600)
    produce(stream, [], stream=True)
    qenv = dict(QUEUE=queue, CONSUMER_GROUP=queue)
    consumers = [Consumer("py", "queue", **qenv), Consumer("node", "queue", **qenv),
                 Consumer("py", "stream", STREAM=stream, CONSUMER_GROUP="s_random_py"),
                 Consumer("node", "stream", STREAM=stream, CONSUMER_GROUP="s_random_node")]
    for c in consumers:
        c.start()

    def producer():
        for k in range(0, len(ids), 20):
            produce(queue, ids[k:k + 20])
            produce(stream, ids[k:k + 20], stream=True)

    t = threading.Thread(target=producer)
    t.start()
    kills = 0
    while kills < 12:
        victim = rng.choice(consumers)
        # A random moment while it is working: after a random number of its steps.
        steps = len(victim.lines(True)) + rng.randint(1, 60)
        try:
            wait_for("consumer progress", lambda: victim.exited() or
                     len(victim.lines(True)) >= steps, timeout=5)
        except Failure:
            break  # it has nothing left to consume
        victim.kill()
        victim.start()
        kills += 1
    t.join()
    if kills < 4:
        raise Failure(f"only {kills} kills happened while the consumers were working")
    print(f"#   {kills} random kills")
    for c in consumers:
        c.kill()
    drain_queue(queue, queue, ids, consumers[0])
    for c in consumers[2:]:
        drain_stream(c.env["CONSUMER_GROUP"], ids[-1], c)
    check(queue, ids, consumers[:2])
    for c in consumers[2:]:
        check(c.env["CONSUMER_GROUP"], ids, [c])


def broker_restart():
    """The broker stops (cleanly) and starts again in the middle of a run: consumers lose
    their connections, are restarted, and nothing persistent is lost or applied twice."""
    queue, stream = "q_restart", "s_restart"
    ids = message_ids("restart", 80)
    produce(queue, ids[:40])
    produce(stream, ids[:40], stream=True)
    q = Consumer("py", "queue", QUEUE=queue, CONSUMER_GROUP=queue)
    s = Consumer("node", "stream", STREAM=stream, CONSUMER_GROUP=stream)
    q.start()
    s.start()
    wait_for("some messages applied before the restart",
             lambda: len(effects(queue)) >= 5 and len(effects(stream)) >= 5)
    broker("stop")
    for c in (q, s):
        try:
            wait_for("the consumer to exit with its broker connection",
                     lambda: c.proc.poll() is not None, timeout=30)
        except Failure:
            c.kill()
    broker("start")
    for name in (queue, stream):
        wait_for(f"{name} available again", lambda: available(name))
    produce(queue, ids[40:])
    produce(stream, ids[40:], stream=True)
    drain_queue(queue, queue, ids, q)
    drain_stream(stream, ids[-1], s)
    check(queue, ids, [q])
    check(stream, ids, [s])


def control_acks_first():
    """The control: a consumer that acks before its commit, killed between the two, loses the
    message, and this test's count sees it (one lost)."""
    queue = group = "q_control"
    ids = message_ids(queue, 20)
    produce(queue, ids)
    bad = Consumer("py", "ack_first", QUEUE=queue, CONSUMER_GROUP=group)
    bad.start(STOP_PHASE="acked", STOP_NTH=str(rng.randint(1, 5)))
    stopped = bad.wait_stopped()
    bad.kill()
    good = Consumer("py", "queue", QUEUE=queue, CONSUMER_GROUP=group)
    drain_queue(queue, group, [i for i in ids if i != stopped], good)
    check(group, ids, [bad, good], expect_lost=1)
    if stopped in effects(group):
        raise Failure(f"{stopped} should be the lost one")


def failed_key(scope, key):
    with db() as c:
        return c.execute("SELECT attempt, dead, error FROM idempotency.failed_keys "
                         "WHERE scope = %s AND key = %s", (scope, key)).fetchone()


def dead_letters(queue):
    """The messages in <queue>.dead: their ids, taken off the queue (acked)."""
    channel = amqp_channel()
    out = []
    try:
        while True:
            method, props, _ = channel.basic_get(f"{queue}.dead")
            if method is None:
                return out
            out.append(props.message_id)
            channel.basic_ack(method.delivery_tag)
    finally:
        channel.connection.close()


def dead_letter_count(queue):
    channel = amqp_channel()
    try:
        return channel.queue_declare(f"{queue}.dead", passive=True).method.message_count
    finally:
        channel.connection.close()


def check_dead(scope, key, min_attempt):
    row = failed_key(scope, key)
    if row is None or not row[1] or row[0] < min_attempt or "JSON" not in json.dumps(row[2]) \
            and "Expecting" not in row[2]["error"]:
        raise Failure(f"{scope} {key}: expected a dead failed key with the JSON error, got {row}")
    print(f"#   {scope}: {key} dead after {row[0]} attempts: {row[2]['error'][:60]}")


def poison():
    """A poison message (its body is not JSON) among good ones, MAX_ATTEMPTS=3, on a queue read
    by a Python and a Node consumer and on a stream per client, consumers SIGKILLed as before
    (one of them after recording the poison message dead, before dead-lettering it): every good
    message applied exactly once, the poison one never, dead-lettered once with its error (a
    queue: one message in <queue>.dead; a stream: the watermark moved past it), nothing lost."""
    queue, stream = "q_poison", "s_poison"
    ids = message_ids("poison", 40)
    bad = ids[rng.randint(2, 8)]
    good = [i for i in ids if i != bad]
    produce(queue, ids, poison={bad})
    produce(stream, ids, stream=True, poison={bad})
    env = dict(MAX_ATTEMPTS="3")

    # Queue: the Python consumer is killed once the poison message is recorded dead, before
    # its reject; the Node one at a random phase; the redelivery is dead at once and rejected.
    py = Consumer("py", "queue", QUEUE=queue, CONSUMER_GROUP=queue, **env)
    node = Consumer("node", "queue", QUEUE=queue, CONSUMER_GROUP=queue, **env)
    py.start(STOP_PHASE="dead_lettered")
    if py.wait_stopped() != bad:
        raise Failure(f"{queue}: the consumer stopped at another message than {bad}")
    py.kill()
    check_dead(queue, bad, 3)
    if dead_letter_count(queue) != 0:
        raise Failure(f"{queue}: dead-lettered although killed before its reject")
    node.start(STOP_PHASE=rng.choice(PHASES), STOP_NTH=str(rng.randint(1, 5)))
    node.wait_stopped()
    node.kill()
    drain_queue(queue, queue, good, py)
    check(queue, good, [py, node])
    if bad in effects(queue):
        raise Failure(f"{queue}: the poison message {bad} has an effect")
    check_dead(queue, bad, 3)
    wait_for(f"{queue}.dead: the poison message", lambda: dead_letter_count(queue) >= 1)
    letters = dead_letters(queue)
    rejected = sum(1 for c in (py, node) for i in c.phases("rejected") if i == bad)
    print(f"#   {queue}: dead letters {letters}, rejects of {bad}: {rejected}")
    if letters != [bad] or rejected != 1:
        raise Failure(f"{queue}: expected {bad} dead-lettered once, got {letters}")

    # Stream: per client, the poison position recorded and passed (one consumer killed right
    # after that, the other at a random phase), then drained and replayed from first.
    offset = ids.index(bad)  # a new stream's offsets are the publish order
    for client in ("py", "node"):
        group = f"{stream}_{client}"
        c = Consumer(client, "stream", STREAM=stream, CONSUMER_GROUP=group, **env)
        if client == "py":
            c.start(STOP_PHASE="dead_lettered")
            if c.wait_stopped() != bad:
                raise Failure(f"{group}: the consumer stopped at another message than {bad}")
        else:
            c.start(STOP_PHASE=rng.choice(PHASES), STOP_NTH=str(rng.randint(1, 20)))
            c.wait_stopped()
        c.kill()
        drain_stream(group, ids[-1], c)
        drain_stream(group, ids[-1], c, START_OFFSET="first")
        check(group, good, [c])
        if bad in effects(group):
            raise Failure(f"{group}: the poison message {bad} has an effect")
        check_dead(group, f"{stream}@{offset}", 3)
        passed = sum(1 for i in c.phases("dead_lettered") if i == bad)
        if passed != 1:
            raise Failure(f"{group}: {bad} recorded dead {passed} times, expected once")


SCENARIOS = [
    ("queue, Python: SIGKILL at each phase", lambda: queue_phases("py")),
    ("queue, Node: SIGKILL at each phase", lambda: queue_phases("node")),
    ("queue: competing consumers, one dies", queue_competing),
    ("stream, Python: SIGKILL at each phase, older offset, first", lambda: stream_phases("py")),
    ("stream, Node: SIGKILL at each phase, older offset, first", lambda: stream_phases("node")),
    ("queue and stream, both clients: SIGKILL at random moments", random_kills),
    ("queue and stream: broker restart mid-run", broker_restart),
    ("control: ack before commit loses a message, and the count sees it", control_acks_first),
    ("poison message among good ones: dead-lettered once, the rest applied once", poison),
]


def main():
    only = os.environ.get("BROKERS_ONLY")
    LOGS.mkdir(parents=True, exist_ok=True)
    print(f"# SEED={SEED}")
    reset_database()
    began = time.monotonic()
    broker("start")
    print(f"# RabbitMQ started in {time.monotonic() - began:.1f} s", flush=True)
    passed = failed = 0
    try:
        for n, (name, run) in enumerate(SCENARIOS, 1):
            if only and only not in name:
                continue
            began = time.monotonic()
            try:
                run()
                passed += 1
                print(f"ok {n} - {name} ({time.monotonic() - began:.1f} s)", flush=True)
            except Exception as e:  # noqa: BLE001  (a scenario's failure is reported)
                failed += 1
                print(f"not ok {n} - {name}: {type(e).__name__}: {e}", flush=True)
            finally:
                for c in Consumer.every:
                    c.kill()
    finally:
        broker("stop")
    print(f"# passed {passed} failed {failed}")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
