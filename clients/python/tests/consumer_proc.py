"""A consumer process for the SIGKILL tests: applies outbox messages into table `applied` of the
target database (one row per application; the table has no unique constraint, so a message
applied twice would show as two rows).

    consumer_proc.py SOURCE_DSN TARGET_DSN SLOT run|drain N|kill PHASE K
run: forever; drain: until N rows are applied (exit 0) or 60 s pass (exit 3);
kill: SIGKILL itself at the K-th time it reaches PHASE (see OutboxConsumer's on_phase)."""
import os
import pathlib
import random
import signal
import sys
import time

try:
    import pg_idempotency  # noqa: F401
except ImportError:
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import psycopg  # noqa: E402

from pg_idempotency import OutboxConsumer  # noqa: E402

source_dsn, target_dsn, slot, mode, *rest = sys.argv[1:]
source = psycopg.connect(source_dsn, autocommit=True)
target = psycopg.connect(target_dsn)
seen = {}


def on_phase(phase, item):
    if mode == "kill" and phase == rest[0]:
        seen[phase] = seen.get(phase, 0) + 1
        if seen[phase] == int(rest[1]):
            os.kill(os.getpid(), signal.SIGKILL)


def handle(conn, msg):
    conn.execute("INSERT INTO applied (key, payload_id) VALUES (%s, %s)",
                 (msg.key, msg.payload["id"]))
    if random.random() < 0.3:
        time.sleep(random.random() * 0.01)


consumer = OutboxConsumer(source, target, slot=slot, consumer="billing", batch=20,
                          on_phase=on_phase)
deadline = time.monotonic() + 60
while True:
    consumer.poll(handle)
    if mode == "drain":
        n = target.execute("SELECT count(*) FROM applied").fetchone()[0]
        target.rollback()
        if n >= int(rest[0]):
            sys.exit(0)
        if time.monotonic() > deadline:
            sys.exit(3)
    time.sleep(0.02)
