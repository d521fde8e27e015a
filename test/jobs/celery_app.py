"""The jobs suite's Celery application: RabbitMQ as the broker (AMQP_URL), Redis as the result
backend (REDIS_URL, for chords and for Celery's own dedup), PostgreSQL from the PG* environment.

Every effect is a ledger line (consumer: the run, message_id: the key): the suite counts them per key.
  exactly-once tasks (ExactlyOnceTask): add, add_by_order, retry_once, soft_limited,
    always_fails (poison), kill_first_run (a pool child killed mid-task), hard_limited (past its
    hard time limit), total (chord body)
  framework-only: plain_add (acks_late, reject_on_worker_lost, Celery's result-backend dedup)
"""
import os
import signal
import time

import psycopg
from celery import Celery
from kombu import Exchange, Queue

from pg_idempotency.celery import ExactlyOnceTask

app = Celery("jobs_test", broker=os.environ.get("AMQP_URL"), backend=os.environ.get("REDIS_URL"))
QUEUE = os.environ.get("CELERY_QUEUE", "jobs")


def queue(name):
    """The queue, declared alike by producer and worker: a rejected (dead-lettered) task
    goes to <queue>.dlx, then the queue <queue>.dead."""
    return Queue(name, Exchange(name), routing_key=name,
                 queue_arguments={"x-dead-letter-exchange": f"{name}.dlx"})


app.conf.update(
    task_default_queue=QUEUE,
    task_queues=[queue(QUEUE)],
    worker_prefetch_multiplier=1,
    # A worker that loses the broker stops its acks_late tasks (their messages are redelivered)
    worker_cancel_long_running_tasks_on_connection_loss=True,
    worker_deduplicate_successful_tasks=True,  # the framework-only run's dedup
    broker_connection_retry=True,
    broker_connection_max_retries=None,
    result_expires=3600,
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
)

WORK_MS = int(os.environ.get("WORK_MS", "0"))
_plain = {}


def plain_db():
    """The framework-only tasks' connection (one per process)."""
    conn = _plain.get(os.getpid())
    if conn is None or conn.closed or conn.broken:
        conn = _plain[os.getpid()] = psycopg.connect("")
    return conn


def effect(conn, run, key):
    """The task's effect: a ledger line (examples/consumers/schema.sql) for (run, key), after
    WORK_MS milliseconds of simulated work in the transaction."""
    time.sleep(WORK_MS / 1000)
    conn.execute("INSERT INTO ledger (consumer, message_id, account, amount) "
                 "VALUES (%s, %s, 'acct', 1)", (run, key))
    return 1


@app.task(base=ExactlyOnceTask, bind=True)
def add(self, run, key):
    return {"effect": effect(self.db, run, key), "key": key}


@app.task(base=ExactlyOnceTask, bind=True, idempotency_key=lambda run, order: order["id"])
def add_by_order(self, run, order):
    return {"effect": effect(self.db, run, order["id"])}


@app.task(base=ExactlyOnceTask, bind=True, max_retries=3, default_retry_delay=0)
def retry_once(self, run, key):
    effect(self.db, run, key)  # rolled back with the claim when it retries
    if self.request.retries == 0:
        raise self.retry(countdown=0)
    return {"retries": self.request.retries}


@app.task(base=ExactlyOnceTask, bind=True, soft_time_limit=1, max_attempts=2)
def soft_limited(self, run, key):
    effect(self.db, run, key)
    time.sleep(30)  # interrupted by SoftTimeLimitExceeded after 1 s


@app.task(base=ExactlyOnceTask, bind=True, max_attempts=3)
def always_fails(self, run, key):
    effect(self.db, run, key)
    raise ValueError(f"cannot process {key}")


@app.task(base=ExactlyOnceTask, bind=True)
def kill_first_run(self, run, key, marker):
    effect(self.db, run, key)
    if not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)  # the pool child dies with the transaction open
    return "survived"


@app.task(base=ExactlyOnceTask, bind=True, time_limit=10)
def hard_limited(self, run, key, lock):
    effect(self.db, run, key)
    # Names its process for the test, then waits for an advisory lock the test holds past the
    # time limit: the pool kills the child.
    self.db.execute("SELECT set_config('application_name', %s, true)", (str(os.getpid()),))
    self.db.execute("SELECT pg_advisory_xact_lock(%s)", (lock,))
    return "unlocked"


@app.task(base=ExactlyOnceTask, bind=True)
def total(self, results, run, key):
    effect(self.db, run, key)
    return sum(r["effect"] for r in results)


@app.task(bind=True, acks_late=True, reject_on_worker_lost=True)
def plain_add(self, run, key):
    conn = plain_db()
    with conn.transaction():
        return {"effect": effect(conn, run, key), "key": key}
