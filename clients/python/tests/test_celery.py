"""ExactlyOnceTask in Celery's eager mode (no broker: the jobs suite runs it under RabbitMQ):
the stored value on a rerun, a business key, a raising body rolled back, poison counting, and
the configurations refused."""
import celery  # python3-celery (scripts/lib.sh's IDEM_PACKAGES)
import pytest
from celery.exceptions import Reject

from pg_idempotency.celery import ExactlyOnceConfigError, ExactlyOnceTask, stored_result


@pytest.fixture
def app(dsn, conn):
    conn.execute("CREATE TABLE IF NOT EXISTS charges (order_id text, amount int)")
    conn.execute("TRUNCATE charges")
    conn.commit()
    a = celery.Celery("test_celery")
    a.conf.task_always_eager = True
    a.conf.idempotency_dsn = dsn
    return a


def charges(conn):
    return conn.execute("SELECT count(*) FROM charges").fetchone()[0]


def test_a_rerun_returns_the_stored_value_without_running(app, conn):
    ran = []

    @app.task(base=ExactlyOnceTask, bind=True)
    def charge(self, order_id, amount):
        ran.append(order_id)
        self.db.execute("INSERT INTO charges VALUES (%s, %s)", (order_id, amount))
        return {"charged": amount}

    assert charge.apply(("o-1", 5), task_id="t-1").get() == {"charged": 5}
    assert charge.apply(("o-1", 5), task_id="t-1").get() == {"charged": 5}
    assert ran == ["o-1"] and charges(conn) == 1
    assert stored_result(conn, charge.name, "t-1") == {"charged": 5}


def test_a_business_key_from_the_arguments(app, conn):
    @app.task(base=ExactlyOnceTask, bind=True, idempotency_key=lambda order_id, amount: order_id)
    def charge(self, order_id, amount):
        self.db.execute("INSERT INTO charges VALUES (%s, %s)", (order_id, amount))
        return amount

    assert charge.apply(("o-2", 7)).get() == 7
    assert charge.apply(("o-2", 7)).get() == 7  # another task id, the same order
    assert charges(conn) == 1


def test_a_raising_body_keeps_nothing(app, conn):
    @app.task(base=ExactlyOnceTask, bind=True)
    def charge(self, order_id):
        self.db.execute("INSERT INTO charges VALUES (%s, 1)", (order_id,))
        raise ValueError("declined")

    with pytest.raises(ValueError):
        charge.apply(("o-3",), task_id="t-3").get()
    assert charges(conn) == 0
    assert stored_result(conn, charge.name, "t-3") is None


def test_a_poison_task_is_requeued_then_rejected_without_requeue(app, conn):
    @app.task(base=ExactlyOnceTask, bind=True, max_attempts=2)
    def charge(self, order_id):
        self.db.execute("INSERT INTO charges VALUES (%s, 1)", (order_id,))
        raise ValueError("declined")

    outcomes = []
    for _ in range(2):
        result = charge.apply(("o-4",), task_id="t-4")
        assert result.state == "REJECTED" and isinstance(result.result, Reject)
        outcomes.append(result.result.requeue)
    assert outcomes == [True, False]
    assert charges(conn) == 0
    dead = conn.execute("SELECT last_error FROM idempotency.lookup(%s, 't-4')",
                        (charge.name,)).fetchone()[0]
    assert dead["dead"] is True and dead["attempt"] == 2


@pytest.mark.parametrize("option", ["acks_late", "reject_on_worker_lost"])
def test_settings_that_lose_tasks_are_refused(app, option):
    with pytest.raises(ExactlyOnceConfigError, match=option):
        @app.task(base=ExactlyOnceTask, name=f"lossy_{option}", **{option: False})
        def lossy():
            pass
        lossy.run  # noqa: B018 — Celery creates the task class lazily


def test_the_class_sets_what_at_least_once_delivery_needs():
    assert ExactlyOnceTask.acks_late is True and ExactlyOnceTask.reject_on_worker_lost is True


def test_a_new_task_takes_three_round_trips_its_values_bound(app, conn, dsn):
    """BEGIN + the claim in one round trip, the body's insert, complete + COMMIT in one; a
    replay: BEGIN + the claim, then COMMIT. Watched on the wire (libpq's trace)."""
    from test_wire import MARK, Traced, assert_bound_only, marked, round_trips
    traced = Traced(dsn, autocommit=False)

    class TracedTask(ExactlyOnceTask):
        def connect(self):
            return traced.conn

    @app.task(base=TracedTask, bind=True, idempotency_scope=marked())
    def charge(self, order_id):
        self.db.execute("INSERT INTO charges VALUES (%s, 1)", (order_id,))
        return {"charged": marked()}

    try:
        key = marked()
        traced.messages()
        assert charge.apply((marked(),), task_id=key).get()["charged"].startswith(MARK)
        messages = traced.messages()
        assert_bound_only(messages)
        assert round_trips(messages) == 3, " ".join(k for k, _ in messages)
        assert charge.apply((marked(),), task_id=key).get()["charged"].startswith(MARK)
        messages = traced.messages()
        assert_bound_only(messages)
        assert round_trips(messages) == 2, messages
        assert charges(conn) == 1
    finally:
        charge._connection().drop()
        traced.close()


@pytest.mark.parametrize("pipelined", [True, False])
def test_each_run_is_a_claim_event(app, conn, pipelined, monkeypatch):
    from pg_idempotency import observe
    monkeypatch.setattr(ExactlyOnceTask, "_pipelinable", staticmethod(lambda c: pipelined))

    @app.task(base=ExactlyOnceTask, bind=True)
    def observed_charge(self, order_id):
        return {"charged": order_id}

    events = []
    observe.add_claim_listener(events.append)
    try:
        task_id = f"t-observed-{pipelined}"
        observed_charge.apply(("o-1",), task_id=task_id).get()
        observed_charge.apply(("o-1",), task_id=task_id).get()
    finally:
        observe.remove_claim_listener(events.append)
    assert [(e.helper, e.scope, e.outcome, e.attempt) for e in events] == [
        ("celery", observed_charge.name, "new", 1), ("celery", observed_charge.name, "replay", 1)]
