"""The outbox consumer under SIGKILL: 0 lost, 0 applied twice."""
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import psycopg
import pytest

import pg_idempotency as pi
from conftest import REASON_OUTBOX

pytestmark = pytest.mark.extension_only(REASON_OUTBOX)  # the outbox consumer, every test

PROC = str(Path(__file__).with_name("consumer_proc.py"))


@pytest.fixture
def setup(databases):
    source_dsn, target_dsn = databases
    slot = "py_" + uuid.uuid4().hex[:10]
    with psycopg.connect(source_dsn, autocommit=True) as s:
        s.execute("SELECT pg_create_logical_replication_slot(%s, 'idempotency')", (slot,))
    with psycopg.connect(target_dsn, autocommit=True) as t:
        t.execute("DROP TABLE IF EXISTS applied")
        t.execute("CREATE TABLE applied (key uuid, payload_id int)")   # no unique constraint
    yield source_dsn, target_dsn, slot
    with psycopg.connect(source_dsn, autocommit=True) as s:
        s.execute("SELECT pg_drop_replication_slot(%s)", (slot,))


class Producer:
    def __init__(self, dsn):
        self.conn = psycopg.connect(dsn)
        self.next_id = 0

    def produce(self, transactions, pause=0.0):
        for _ in range(transactions):
            with self.conn.transaction():
                for _ in range(random.randint(1, 3)):
                    self.next_id += 1
                    pi.emit(self.conn, "orders", {"id": self.next_id})
            if pause:
                time.sleep(pause)


def run_proc(source_dsn, target_dsn, slot, *args, wait=True):
    p = subprocess.Popen([sys.executable, PROC, source_dsn, target_dsn, slot, *map(str, args)])
    if wait:
        p.wait(timeout=120)
    return p


def check_exactly_once(target_dsn, produced):
    with psycopg.connect(target_dsn) as t:
        total, distinct_ids, distinct_keys = t.execute(
            "SELECT count(*), count(DISTINCT payload_id), count(DISTINCT key) FROM applied").fetchone()
        ids = {r[0] for r in t.execute("SELECT payload_id FROM applied").fetchall()}
    lost = produced - len(ids & set(range(1, produced + 1)))
    doubled = total - distinct_ids
    print(f"produced {produced}, applied rows {total}, lost {lost}, doubled {doubled}")
    assert (lost, doubled) == (0, 0)
    assert distinct_keys == total == produced


def test_consumer_applies_in_order_and_confirms(setup):
    source_dsn, target_dsn, slot = setup
    producer = Producer(source_dsn)
    producer.produce(5)
    with psycopg.connect(source_dsn, autocommit=True) as s, psycopg.connect(target_dsn) as t:
        got = []
        consumer = pi.OutboxConsumer(s, t, slot=slot, consumer="inline")
        assert consumer.poll(lambda c, m: got.append(m)) == producer.next_id
        assert [m.payload["id"] for m in got] == list(range(1, producer.next_id + 1))
        assert all(a.key < b.key for a, b in zip(got, got[1:]))
        m = got[-1]
        assert isinstance(m.key, uuid.UUID) and m.position == pi.lsn_key_parts(m.key)
        assert m.lsn <= m.commit_lsn and m.topic == "orders"
        assert pi.watermark(t, "inline", slot) == m.key.int
        t.rollback()
        # confirmed: nothing comes again
        assert consumer.poll(lambda c, m: got.append(m)) == 0
        peek = s.execute("SELECT count(*) FROM pg_logical_slot_peek_changes(%s, NULL, NULL)",
                         (slot,)).fetchone()[0]
        assert peek == 0


@pytest.mark.parametrize("phase", ["peeked", "applied_uncommitted", "committed",
                                   "before_advance", "advanced"])
def test_sigkill_at_each_phase(setup, phase):
    source_dsn, target_dsn, slot = setup
    producer = Producer(source_dsn)
    producer.produce(8)
    p = run_proc(source_dsn, target_dsn, slot, "kill", phase, 3)
    assert p.returncode == -signal.SIGKILL
    producer.produce(4)
    assert run_proc(source_dsn, target_dsn, slot, "drain", producer.next_id).returncode == 0
    check_exactly_once(target_dsn, producer.next_id)


def test_sigkill_at_random_moments_under_load(setup):
    source_dsn, target_dsn, slot = setup
    producer = Producer(source_dsn)
    done = threading.Event()
    t = threading.Thread(target=lambda: (producer.produce(250, pause=0.02), done.set()))
    t.start()
    kills = 0
    rnd = random.Random()
    try:
        while not done.is_set() or kills < 12:
            p = run_proc(source_dsn, target_dsn, slot, "run", wait=False)
            time.sleep(rnd.uniform(0.2, 0.9))
            p.send_signal(signal.SIGKILL)
            p.wait(timeout=30)
            kills += 1
    finally:
        t.join()
    assert run_proc(source_dsn, target_dsn, slot, "drain", producer.next_id).returncode == 0
    print(f"{kills} SIGKILLs")
    check_exactly_once(target_dsn, producer.next_id)
    assert producer.next_id >= 250


def test_control_a_confirm_first_reader_loses_messages(setup):
    """The check above can fail: a reader that confirms on read (pg_logical_slot_get_changes,
    like pg_recvlogical confirming what it wrote) and dies before applying loses what it read."""
    source_dsn, target_dsn, slot = setup
    producer = Producer(source_dsn)
    producer.produce(5)
    with psycopg.connect(source_dsn, autocommit=True) as s:
        s.execute("SELECT * FROM pg_logical_slot_get_changes(%s, NULL, 2)", (slot,)).fetchall()
    # ... and crashes here, before applying. The reference consumer drains the rest.
    run_proc(source_dsn, target_dsn, slot, "drain", 1)
    time.sleep(0.5)
    with pytest.raises(AssertionError):
        check_exactly_once(target_dsn, producer.next_id)
