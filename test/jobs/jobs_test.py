"""The jobs suite: Celery (RabbitMQ), BullMQ (Redis) and NATS JetStream workers against real
brokers, each task's effect a ledger line (examples/consumers/schema.sql).

Celery's contract, one scenario each: a redelivered task returns the stored value without
running, a business key, self.retry, a soft time limit, a raising task, a poison task
(dead-lettered after max_attempts), a pool child killed mid-task (reject_on_worker_lost), a
hard time limit (failed and acked, nothing kept), a chord member, a configuration that would
lose tasks refused.

Chaos, per framework: JOBS_N tasks (default 300; the issue's figure is 2000) with producer
duplicates, workers SIGKILLed again and again (about JOBS_KILLS times, default 12: each kill
waits for N / JOBS_KILLS more effects since the last),
the broker and PostgreSQL restarted once each mid-run: every key's effect exactly once. The
same run with the framework's own dedup only (Celery's result-backend dedup, BullMQ's job id)
is counted the same way and must show doubles.

Environment: PG* (a cluster with the extension), PG_RESTART (a command that restarts it),
JOBS_PORT (base of the brokers' loopback ports), JOBS_DIR; JOBS_ONLY=TEXT runs only the scenarios whose name holds TEXT. Prints "ok N - scenario" /
"not ok N - scenario" and "# passed P failed F"; exits 0 only if every scenario passed."""
import os
import pathlib
import random
import signal
import subprocess
import sys
import time
import traceback
import uuid

import psycopg

ROOT = pathlib.Path(__file__).resolve().parents[2]
HERE = ROOT / "test/jobs"
EXAMPLES = ROOT / "examples/consumers"
BASE = int(os.environ["JOBS_PORT"])
AMQP_PORT, REDIS_PORT, NATS_PORT = BASE, BASE + 4, BASE + 5
DIR = pathlib.Path(os.environ["JOBS_DIR"])
DB = os.environ.get("JOBS_DB", "jobs_test")
N = int(os.environ.get("JOBS_N", "300"))
KILLS = int(os.environ.get("JOBS_KILLS", "12"))  # chaos actions per run: a kill or a restart
SEED = int(os.environ.get("SEED", str(random.randrange(1 << 30))))
rng = random.Random(SEED)
WAIT = 180
AMQP_URL = f"amqp://guest:guest@127.0.0.1:{AMQP_PORT}/%2F"
REDIS_URL = f"redis://127.0.0.1:{REDIS_PORT}/0"
ENV = dict(os.environ, PGDATABASE=DB, AMQP_URL=AMQP_URL, REDIS_URL=REDIS_URL,
           REDIS_PORT=str(REDIS_PORT), NATS_URL=f"127.0.0.1:{NATS_PORT}",
           PYTHONPATH=f"{ROOT / 'clients/python'}:{HERE}",
           WORK_MS=os.environ.get("WORK_MS", "50"), PYTHONUNBUFFERED="1")


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


def answers(port):
    import socket
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


# ---- servers ----

class Server:
    """A broker of our own on loopback, in a process group of its own."""

    def __init__(self, name, port, cmd):
        self.name, self.port, self.cmd, self.proc = name, port, cmd, None

    def start(self):
        (DIR / self.name).mkdir(parents=True, exist_ok=True)
        if self.name == "rabbitmq":
            subprocess.run(["bash", str(ROOT / "test/brokers/rabbitmq.sh"), "start",
                            str(DIR / "rabbitmq"), str(self.port)], check=True)
            return
        out = open(DIR / f"{self.name}.log", "a")
        self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        wait_for(f"{self.name} on {self.port}", lambda: answers(self.port) or self._exited())

    def _exited(self):
        if self.proc.poll() is not None:
            raise Failure(f"{self.name} exited: {(DIR / f'{self.name}.log').read_text()[-1500:]}")

    def stop(self):
        if self.name == "rabbitmq":
            subprocess.run(["bash", str(ROOT / "test/brokers/rabbitmq.sh"), "stop",
                            str(DIR / "rabbitmq")], check=False)
            return
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def restart(self):
        self.stop()
        self.start()


RABBIT = Server("rabbitmq", AMQP_PORT, None)
REDIS = Server("redis", REDIS_PORT, [
    "redis-server", "--port", str(REDIS_PORT), "--bind", "127.0.0.1", "--dir", str(DIR / "redis"),
    "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no"])
NATS = Server("nats", NATS_PORT, [
    "nats-server", "-a", "127.0.0.1", "-p", str(NATS_PORT), "-js", "-sd", str(DIR / "nats")])


def restart_postgres():
    subprocess.run(["bash", "-c", os.environ["PG_RESTART"]], check=True)


# ---- the database ----

def db(dbname=DB):
    return psycopg.connect(dbname=dbname, autocommit=True)


def reset_database():
    with db(os.environ.get("PGDATABASE", "postgres")) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {DB}")
    with db() as c:
        c.execute((EXAMPLES / "schema.sql").read_text())


def effects(run):
    deadline = time.monotonic() + WAIT
    while True:  # the database may be restarting
        try:
            with db() as c:
                return dict(c.execute("SELECT message_id, count(*) FROM ledger "
                                      "WHERE consumer = %s GROUP BY 1", (run,)).fetchall())
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise Failure(f"the database did not come back within {WAIT} s")
            time.sleep(0.1)


def counts(run, keys):
    found = effects(run)
    once = sum(1 for k in keys if found.get(k) == 1)
    doubled = sum(1 for k in keys if found.get(k, 0) > 1)
    lost = sum(1 for k in keys if k not in found)
    unknown = len(set(found) - set(keys))
    return once, doubled, lost, unknown


# ---- workers ----

class Worker:
    runs = 0
    every = []

    def __init__(self, name, cmd, **env):
        self.name, self.cmd, self.env, self.proc, self.log = name, cmd, env, None, None
        Worker.every.append(self)

    def start(self):
        self.kill()
        Worker.runs += 1
        self.log = DIR / "workers" / f"{Worker.runs:03d}-{self.name}.log"
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=subprocess.STDOUT,
                                         env=dict(ENV, **self.env), stdin=subprocess.DEVNULL,
                                         start_new_session=True, cwd=str(HERE))
        return self

    def kill(self):
        """SIGKILL to the whole group: a Celery worker and its pool children at once."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        if self.proc:
            self.proc.wait()

    def kill_child(self):
        """SIGKILL to one pool child (Celery prefork): the parent sees it lost mid-task."""
        out = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True,
                             text=True).stdout.split()
        if out:
            os.kill(int(rng.choice(out)), signal.SIGKILL)

    def text(self):
        return self.log.read_text() if self.log else ""


def celery_worker(name, queue, concurrency=2, **env):
    return Worker(name, [sys.executable, "-m", "celery", "-A", "celery_app", "worker",
                         "-Q", queue, "-c", str(concurrency), "-P", "prefork", "-l", "INFO",
                         "--without-gossip", "--without-mingle", "--without-heartbeat",
                         "-n", f"{name}@%h"], CELERY_QUEUE=queue, **env)


def celery_app(queue):
    os.environ.update(AMQP_URL=AMQP_URL, REDIS_URL=REDIS_URL, CELERY_QUEUE=queue,
                      PGDATABASE=DB)
    for path in (str(HERE), str(ROOT / "clients/python")):
        if path not in sys.path:
            sys.path.insert(0, path)
    import celery_app as module
    module.app.conf.task_default_queue = queue
    module.app.conf.task_queues = [module.queue(queue)]
    return module


def node_tool(script, *args):
    return subprocess.run(["node", str(EXAMPLES / script), *args], check=True, env=ENV,
                          capture_output=True, text=True, timeout=WAIT).stdout


def node_count(script, *args):
    """A count a Node tool prints, or None while it cannot tell (the broker restarting, the
    consumer not declared yet)."""
    try:
        return int(node_tool(script, *args))
    except (subprocess.CalledProcessError, ValueError):
        return None


def node_worker(name, script, **env):
    return Worker(name, ["node", str(EXAMPLES / script)], **env)


# ---- Celery's contract ----

def celery_contract():
    """One worker; each behaviour of ExactlyOnceTask against RabbitMQ and PostgreSQL."""
    m = celery_app("contract")
    w = celery_worker("celery-contract", "contract").start()
    try:
        run = "contract"
        # A task's first run stores its value; the same task id sent again (a producer retry,
        # or a redelivery) returns it without running.
        tid = str(uuid.uuid4())
        first = m.add.apply_async((run, "k1"), task_id=tid).get(timeout=WAIT)
        again = m.add.apply_async((run, "k1"), task_id=tid).get(timeout=WAIT)
        expect(first == again == {"effect": 1, "key": "k1"}, f"stored value {first} / {again}")
        # A business key: two task ids, one order: applied once, both get the value.
        a = m.add_by_order.delay(run, {"id": "order-7"}).get(timeout=WAIT)
        b = m.add_by_order.delay(run, {"id": "order-7"}).get(timeout=WAIT)
        expect(a == b == {"effect": 1}, f"business key {a} / {b}")
        # self.retry: the first run's write rolls back with its claim, the retry applies it.
        r = m.retry_once.delay(run, "retried").get(timeout=WAIT)
        expect(r == {"retries": 1}, f"retry result {r}")
        # A raising task (max_attempts 3): requeued twice, then dead-lettered; nothing kept.
        dead_letters("contract")  # the dead-letter exchange and queue, before anything dies
        res = m.always_fails.delay(run, "poison")
        wait_for("the poison task in idempotency.failed_keys",
                 lambda: dead_key("always_fails", res.id))
        wait_for("the poison task in contract.dead", lambda: dead_letters("contract") == 1)
        # A soft time limit: the body is interrupted, its write rolled back; at its
        # max_attempts (2) dead-lettered.
        res2 = m.soft_limited.delay(run, "slow")
        wait_for("the soft-limited task recorded dead", lambda: dead_key("soft_limited", res2.id))
        # A pool child killed mid-task, its transaction open: requeued, run again, once.
        marker = DIR / f"killed-{uuid.uuid4()}"
        k = m.kill_first_run.delay(run, "killed", str(marker)).get(timeout=WAIT)
        expect(k == "survived" and marker.exists(), f"kill_first_run gave {k}")
        hard_time_limit(m, w, run)
        # A chord: its members and its body, each once.
        from celery import chord
        total = chord([m.add.s(run, f"member-{i}") for i in range(5)])(
            m.total.s(run, "chord-body")).get(timeout=WAIT)
        expect(total == 5, f"chord total {total}")
        found = effects(run)
        want = {"k1": 1, "order-7": 1, "retried": 1, "killed": 1, "hard": 1, "chord-body": 1,
                **{f"member-{i}": 1 for i in range(5)}}
        expect(found == want, f"effects {found}, expected {want}")
    finally:
        w.kill()


def hard_time_limit(m, w, run, lock=57057):
    """A task past its hard time limit (time_limit=10), its body blocked on a lock the test
    holds: the pool kills the child (SIGTERM, then SIGKILL) and Celery records FAILURE
    (TimeLimitExceeded) and acks the message, so nothing runs it again by itself. The child's
    server session, blocked in a statement, notices the closed connection only when that
    statement ends (here: the lock released); it then rolls the claim's transaction back with
    the body's write. Sent again under the same task id (no key was stored), it runs, once."""
    with db() as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (lock,))
        res = m.hard_limited.delay(run, "hard", lock)
        pid, child = wait_for("the body waiting for the lock", lambda: holder.execute(
            "SELECT l.pid, a.application_name FROM pg_locks l JOIN pg_stat_activity a "
            "USING (pid) WHERE l.locktype = 'advisory' AND NOT l.granted AND l.objid = %s",
            (lock,)).fetchone())
        res.get(timeout=WAIT, propagate=False)
        expect(res.state == "FAILURE" and type(res.result).__name__ == "TimeLimitExceeded",
               f"past the hard time limit: {res.state} {res.result!r}")
        wait_for("the pool child killed", lambda: not process_exists(int(child)))
        holder.execute("SELECT pg_advisory_unlock(%s)", (lock,))
        wait_for("the killed child's session gone", lambda: holder.execute(
            "SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = %s)",
            (pid,)).fetchone()[0])
        found = effects(run).get("hard")
        record = holder.execute("SELECT state FROM idempotency.lookup(%s, %s)",
                                (scope_name("hard_limited"), res.id)).fetchone()
        expect(found is None and record is None,
               f"after the kill: {found} effects, the key {record} (nothing kept expected)")
    res.forget()  # the failure's result, which would answer the get() below at once
    again = m.hard_limited.apply_async((run, "hard", lock), task_id=res.id).get(timeout=WAIT)
    expect(again == "unlocked", f"the task sent again gave {again}")
    received = w.text().count(f"[{res.id}] received")
    expect(received == 2, f"the task was received {received} times (2 expected: the first "
                          "delivery and the one sent again; a redelivery would be a third)")


def process_exists(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def celery_refused():
    """acks_late=False or reject_on_worker_lost=False cannot run exactly once: refused."""
    m = celery_app("contract")
    from pg_idempotency.celery import ExactlyOnceConfigError, ExactlyOnceTask
    for option in ("acks_late", "reject_on_worker_lost"):
        try:
            @m.app.task(base=ExactlyOnceTask, name=f"lossy_{option}", **{option: False})
            def lossy():
                pass
            lossy.run  # noqa: B018 — Celery creates the class lazily
        except ExactlyOnceConfigError as e:
            expect(option in str(e), f"the error names {option}: {e}")
        else:
            raise Failure(f"{option}=False was accepted")


def dead_key(scope, key):
    with db() as c:
        row = c.execute("SELECT last_error FROM idempotency.lookup(%s, %s)",
                        (scope_name(scope), key)).fetchone()
    return row is not None and row[0] is not None and row[0].get("dead")


def scope_name(task):
    return f"celery_app.{task}"


def dead_letters(queue):
    import kombu
    with kombu.Connection(AMQP_URL) as conn:
        ch = conn.channel()
        ch.exchange_declare(f"{queue}.dlx", "fanout", durable=True)
        ch.queue_declare(f"{queue}.dead", durable=True)
        ch.queue_bind(f"{queue}.dead", f"{queue}.dlx", "")
        return ch.queue_declare(f"{queue}.dead", passive=True).message_count


def expect(ok, what):
    if not ok:
        raise Failure(what)


# ---- chaos ----

def chaos(framework, mode, workers, produce, kill, restart_broker, pending,
          settled=lambda workers: True):
    """Produces N keys (every 10th twice), then kills a worker each time progress has been
    made since the last kill, restarting the broker once and PostgreSQL once; when every key
    has its effect (or the broker has nothing left to deliver), drains: workers killed, the
    broker asked what is left (unacked deliveries are then back), workers run again until
    nothing is. Returns (once, doubled, lost, unknown, kills)."""
    run = f"{framework}-{mode}"
    keys = [f"{run}-{i}" for i in range(N)]
    produce(run, keys, [k for i, k in enumerate(keys) if i % 10 == 0])
    for w in workers:
        w.start()
    kills, step, last, restarted = 0, max(N // KILLS, 5), 0, set()
    while True:
        done = effects(run)
        if set(keys) <= set(done):
            break
        progress = len(done)
        if progress >= last + step:
            last = progress
            if "broker" not in restarted and progress > N // 3:
                restarted.add("broker")
                restart_broker()
            elif "postgres" not in restarted and progress > N // 2:
                restarted.add("postgres")
                restart_postgres()
            else:
                kills += 1
                kill(rng.choice(workers))
        restart_exited(workers)
        # Progress, or nothing left for the workers (the framework-only run loses tasks: a
        # task failed by a lost database connection is acknowledged as done). The broker is
        # asked only after 20 polls without progress: asking can take seconds on a loaded
        # machine (BullMQ's count is a node process), and a run polled that slowly could end
        # before its chaos.
        polls = [0]

        def progressed_or_idle():
            if restart_exited(workers) or len(effects(run)) > progress:
                return "progress"
            polls[0] += 1
            return polls[0] % 20 == 0 and pending(False) == 0 and "idle"

        if wait_for(f"{run}: progress", progressed_or_idle) == "idle":
            break
    for _ in range(10):
        for w in workers:
            w.kill()
        left = wait_for(f"{run}: the broker's count of what is left",
                        lambda: (lambda n: None if n is None else (n,))(pending(True)))[0]
        if left == 0:
            if restarted != {"broker", "postgres"} or kills < 2:
                raise Failure(f"{run}: the run ended before its chaos: {kills} kills, "
                              f"restarted {sorted(restarted) or 'nothing'} (raise WORK_MS)")
            return (*counts(run, keys), kills)
        for w in workers:
            w.start()
        wait_for(f"{run}: the {left} left handled", lambda: restart_exited(workers)
                 or pending(False) == 0 and settled(workers))
    raise Failure(f"{run}: work still pending after 10 rounds")


def restart_exited(workers):
    """Restarts a worker that exited on its own (a lost connection); never true."""
    for w in workers:
        if w.proc.poll() is not None:
            w.start()
    return False


def trace(run):
    """For a failed exactly-once run: each key lost or doubled, with the lines of every
    worker log that name it or its Celery task id (the logs are gone after a CI run)."""
    found = effects(run)
    bad = [k for k in (f"{run}-{i}" for i in range(N)) if found.get(k, 0) != 1]
    logs = sorted((DIR / "workers").glob("*.log"))
    for key in bad[:5]:
        names = (key, str(uuid.uuid5(uuid.NAMESPACE_URL, key)))
        print(f"#   {key}: {found.get(key, 0)} effects; worker log lines naming it:", flush=True)
        for log in logs:
            for line in log.read_text(errors="replace").splitlines():
                if any(n in line for n in names):
                    print(f"#     {log.name}: {line[:300]}", flush=True)


def report(framework, mode, result):
    once, doubled, lost, unknown, kills = result
    print(f"#   {framework} {mode}: {N} keys, {kills} kills, once {once}, doubled {doubled}, "
          f"lost {lost}, unknown {unknown}", flush=True)


def celery_chaos(mode):
    queue = f"chaos-{mode}"
    m = celery_app(queue)
    task = m.add if mode == "exactly-once" else m.plain_add

    def produce(run, keys, twice):
        for k in keys:
            tid = str(uuid.uuid5(uuid.NAMESPACE_URL, k))
            for _ in range(2 if k in twice else 1):
                task.apply_async((run, k), task_id=tid, queue=m.queue(queue))

    workers = [celery_worker(f"celery-{mode}-{i}", queue) for i in range(2)]

    def kill(w):
        if rng.random() < 0.5:
            w.kill_child()
        else:
            w.kill()
            w.start()

    def pending(stopped):
        """Ready messages; with the workers stopped, once the broker has seen them go (their
        unacked messages are then ready again). None while the broker cannot tell."""
        import pika
        try:
            conn = pika.BlockingConnection(pika.URLParameters(
                f"{AMQP_URL}?socket_timeout=5&blocked_connection_timeout=5"))
        except pika.exceptions.AMQPError:
            return None
        try:
            ok = conn.channel().queue_declare(queue, passive=True).method
            return None if stopped and ok.consumer_count else ok.message_count
        except pika.exceptions.AMQPError:
            return None
        finally:
            if conn.is_open:
                conn.close()

    return chaos("celery", mode, workers, produce, kill, RABBIT.restart, pending,
                 celery_settled)


def celery_settled(workers):
    """Every task the workers' current runs received has an outcome in their logs (the
    broker's ready count does not see the messages a worker holds)."""
    import re
    received, finished = set(), set()
    for w in workers:
        for m in re.finditer(r"Task [\w.]+\[([0-9a-f-]+)\] (\w+)", w.text()):
            (received if m.group(2) == "received" else finished).add(m.group(1))
    return received <= finished


def bullmq_chaos(mode):
    queue = f"chaos-{mode}"
    run = f"bullmq-{mode}"
    env = dict(BULLMQ_QUEUE=queue, CONSUMER_GROUP=run, LOCK_MS="2000", STALLED_MS="1000",
               CONCURRENCY="2",
               **({"DEDUP": "bullmq"} if mode == "framework-only" else {}))

    def produce(run, keys, twice):
        node_tool("bullmq_producer.js", "add", queue, ",".join(keys), ",".join(twice))

    workers = [node_worker(f"bullmq-{mode}-{i}", "bullmq_worker.js", **env) for i in range(2)]

    def kill(w):
        w.kill()
        w.start()

    return chaos("bullmq", mode, workers, produce, kill, REDIS.restart,
                 lambda stopped: node_count("bullmq_producer.js", "pending", queue))


def jetstream_chaos(key_by):
    stream = f"chaos_{key_by}"
    run = f"jetstream-{key_by}"
    env = dict(STREAM=stream, DURABLE=run, CONSUMER_GROUP=run, KEY_BY=key_by,
               ACK_WAIT_MS="2000")

    def produce(run, keys, twice):
        node_tool("jetstream_producer.js", "publish", stream, ",".join(keys), ",".join(twice))

    workers = [node_worker(f"jetstream-{key_by}", "jetstream_consumer.js", **env)]

    def kill(w):
        w.kill()
        w.start()

    return chaos("jetstream", key_by, workers, produce, kill, NATS.restart,
                 lambda stopped: node_count("jetstream_producer.js", "pending", stream, run))


# ---- main ----

def main():
    print(f"# SEED={SEED} JOBS_N={N}", flush=True)
    DIR.mkdir(parents=True, exist_ok=True)
    reset_database()
    servers = [RABBIT, REDIS, NATS]
    passed = failed = 0
    n = 0

    def scenario(name, fn):
        nonlocal passed, failed, n
        n += 1
        if os.environ.get("JOBS_ONLY") and os.environ["JOBS_ONLY"] not in name:
            return
        started = time.monotonic()
        try:
            fn()
            passed += 1
            print(f"ok {n} - {name} ({time.monotonic() - started:.0f} s)", flush=True)
        except Exception as e:  # noqa: BLE001 — one scenario's failure is reported, not fatal
            failed += 1
            print(f"not ok {n} - {name}: {e}", flush=True)
            traceback.print_exc(file=sys.stdout)

    def exactly_once(result_of, framework, mode):
        def run():
            result = result_of(mode)
            report(framework, mode, result)
            once, doubled, lost, unknown, _ = result
            if (doubled, lost, unknown) != (0, 0, 0):
                trace(f"{framework}-{mode}")
            expect((doubled, lost, unknown) == (0, 0, 0) and once == N,
                   f"{framework} {mode}: {doubled} doubled, {lost} lost, {unknown} unknown")
        return run

    def framework_only(result_of, framework):
        def run():
            result = result_of("framework-only")
            report(framework, "framework-only", result)
            expect(result[1] > 0, f"{framework} without the wrapper doubled nothing: the "
                                  "chaos run cannot tell the wrapper's work from none")
        return run

    try:
        for s in servers:
            s.start()
        scenario("celery: the contract of ExactlyOnceTask", celery_contract)
        scenario("celery: lossy configurations refused", celery_refused)
        scenario("celery chaos: exactly once", exactly_once(celery_chaos, "celery",
                                                           "exactly-once"))
        scenario("celery chaos: result-backend dedup only doubles",
                 framework_only(celery_chaos, "celery"))
        scenario("bullmq chaos: exactly once", exactly_once(bullmq_chaos, "bullmq",
                                                           "exactly-once"))
        scenario("bullmq chaos: job id dedup only doubles",
                 framework_only(bullmq_chaos, "bullmq"))
        for key_by in ("sequence", "msgid"):
            scenario(f"jetstream chaos: exactly once by {key_by}",
                     exactly_once(jetstream_chaos, "jetstream", key_by))
    finally:
        for w in Worker.every:  # none may outlive the run (it would consume the next one's)
            w.kill()
        for s in servers:
            s.stop()
    print(f"# passed {passed} failed {failed}", flush=True)
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    # A SIGTERM (the test command's timeout) ends the run through main's clean-up.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    sys.exit(main())
