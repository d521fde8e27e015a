"""A connection that breaks under the helpers (its backend terminated, as a server restart or a
cut network does) gives ConnectionLost, a psycopg.OperationalError too, and never more than
that: the process goes on, nothing of the broken transaction is kept, and a retry on a new
connection makes the one order."""
import uuid

import psycopg
import pytest

from pg_idempotency import (ConnectionLost, apply_once, claim, consume_once, execute, run_external,
                            run_once)


@pytest.fixture
def orders(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE TABLE IF NOT EXISTS fault_orders (id serial PRIMARY KEY, k text)")
    return dsn


def terminate(dsn, conn):
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))


def orders_of(dsn, key):
    with psycopg.connect(dsn) as c:
        return [r[0] for r in c.execute("SELECT id FROM fault_orders WHERE k = %s", (key,))]


def insert(conn, key):
    return conn.execute("INSERT INTO fault_orders (k) VALUES (%s) RETURNING id",
                        (key,)).fetchone()[0]


def test_run_once_backend_terminated_in_the_work(orders):
    key = str(uuid.uuid4())
    conn = psycopg.connect(orders)

    def work():
        order = insert(conn, key)
        terminate(orders, conn)
        conn.execute("SELECT 1")
        return 201, {"id": order}

    with pytest.raises(ConnectionLost) as caught:
        run_once(conn, "faults", key, work)
    assert isinstance(caught.value, psycopg.OperationalError)
    assert caught.value.http_status == 503 and caught.value.sqlstate == "08006"
    assert orders_of(orders, key) == []
    with psycopg.connect(orders) as again:
        r = run_once(again, "faults", key, lambda: (201, {"id": insert(again, key)}))
    assert r.status_code == 201 and orders_of(orders, key) == [r.response["id"]]


def test_claim_backend_terminated_before_complete(orders):
    key = str(uuid.uuid4())
    conn = psycopg.connect(orders)
    with pytest.raises(ConnectionLost):
        with claim(conn, "faults", key) as c:
            order = insert(conn, key)
            terminate(orders, conn)
            c.complete(201, {"id": order})
    assert orders_of(orders, key) == []


def test_run_external_backend_terminated_during_the_external_call(orders):
    key = str(uuid.uuid4())
    conn = psycopg.connect(orders)

    def work(attempt):
        terminate(orders, conn)
        return 201, {"paid": True}

    with pytest.raises(ConnectionLost):
        run_external(conn, "faults", key, work,
                     finish=lambda c, status, response: insert(c, key), lock_ttl="1 second")
    assert orders_of(orders, key) == []


@pytest.mark.parametrize("autocommit", [False, True])
def test_apply_once_and_execute_on_a_broken_connection(orders, autocommit):
    # autocommit: BEGIN and accept go out in one round trip (connection.begin_with)
    conn = psycopg.connect(orders, autocommit=autocommit)
    terminate(orders, conn)
    with pytest.raises(ConnectionLost):
        apply_once(conn, "faults", "p0", 1, lambda c: insert(c, "never"))
    with pytest.raises(ConnectionLost):
        consume_once(conn, "faults-queue", str(uuid.uuid4()), lambda c: insert(c, "never"))
    with pytest.raises(ConnectionLost):
        execute(conn, "SELECT 1")
    conn.close()
    with pytest.raises(ConnectionLost):
        execute(conn, "SELECT 1")


@pytest.mark.parametrize("autocommit", [False, True])
def test_consume_once_backend_terminated_in_the_work(orders, autocommit):
    key = str(uuid.uuid4())
    conn = psycopg.connect(orders, autocommit=autocommit)

    def work(c):
        insert(c, key)
        terminate(orders, conn)
        c.execute("SELECT 1")

    with pytest.raises(ConnectionLost) as caught:
        consume_once(conn, "faults-queue", key, work)
    assert isinstance(caught.value, psycopg.OperationalError) and caught.value.sqlstate == "08006"
    assert orders_of(orders, key) == []     # neither the effect nor the claim was kept
    with psycopg.connect(orders) as again:  # the broker redelivers: applied once
        assert consume_once(again, "faults-queue", key, lambda c: insert(c, key)) is True
        assert consume_once(again, "faults-queue", key, lambda c: insert(c, key)) is False
    assert len(orders_of(orders, key)) == 1
    with pytest.raises(ConnectionLost):     # and a connection already broken
        consume_once(conn, "faults-queue", key, lambda c: insert(c, key))
