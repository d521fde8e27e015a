"""ExactlyOnceTask in Celery's eager mode (no broker: the jobs suite runs it under RabbitMQ):
the stored value on a rerun, a business key, a raising body rolled back, poison counting, and
the configurations refused."""
import celery  # python3-celery (scripts/lib.sh's IDEM_PACKAGES)
import psycopg
import pytest
from celery.exceptions import Reject

from pg_idempotency import InvalidTransactionTermination
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


class LevelSetTask(ExactlyOnceTask):
    """Runs on claim()'s path (conn.transaction(): psycopg's BEGIN carries the level). READ
    COMMITTED, set explicitly: the level the managed edition's reserve needs."""

    def connect(self):
        c = super().connect()
        c.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
        return c


@pytest.mark.parametrize("base", [ExactlyOnceTask, LevelSetTask])
@pytest.mark.parametrize("end", ["commit", "rollback", "autocommit"])
def test_the_body_cannot_end_the_runs_transaction(app, conn, end, base):
    """A body that commits (or rolls back, or turns autocommit off) and then dies: without the
    guard its insert is committed with no answer stored (a redelivery runs it again). With
    it, the body's call is refused and nothing is kept."""
    refused = []

    @app.task(base=base, bind=True, name=f"ends_{end}_{base.__name__}")
    def charge(self, order_id):
        self.db.execute("INSERT INTO charges VALUES (%s, 1)", (order_id,))
        try:
            if end == "autocommit":
                self.db.autocommit = not self.db.autocommit
            else:
                getattr(self.db, end)()
        except InvalidTransactionTermination as e:
            refused.append(e.sqlstate)
        raise RuntimeError("the worker died here")

    with pytest.raises(RuntimeError):
        charge.apply(("o-5",), task_id=f"t-5-{end}").get()
    assert charges(conn) == 0
    assert stored_result(conn, charge.name, f"t-5-{end}") is None
    assert refused == ["2D000"]


def test_the_body_keeps_its_savepoints_and_the_connection_its_class(app, conn):
    seen = []

    @app.task(base=ExactlyOnceTask, bind=True)
    def charge(self, order_id):
        self.db.execute("INSERT INTO charges VALUES (%s, 1)", (order_id,))
        try:
            with self.db.transaction():
                self.db.execute("INSERT INTO charges VALUES ('undone', 1)")
                raise ValueError("rolled back to the savepoint")
        except ValueError:
            pass
        seen.append(isinstance(self.db, psycopg.Connection))
        with self.db.cursor() as cur:
            try:
                cur.connection.commit()  # the same object: refused too
            except InvalidTransactionTermination:
                seen.append("refused")
        return 1

    assert charge.apply(("o-6",), task_id="t-6").get() == 1
    assert seen == [True, "refused"]
    assert conn.execute("SELECT array_agg(order_id) FROM charges").fetchone()[0] == ["o-6"]
    assert type(charge.db) is psycopg.Connection  # its own class again after the run


def test_a_commit_sent_as_sql_stores_the_answer_then_raises(app, conn):
    """SQL cannot be refused before it runs: after the body the run still stores the answer
    (else the claim, committed in progress, would be run again once its lock_ttl lapsed),
    then raises, and the failure is not counted towards max_attempts (nothing requeues it)."""
    ran = []

    @app.task(base=ExactlyOnceTask, bind=True, max_attempts=3)
    def charge(self, order_id):
        ran.append(order_id)
        self.db.execute("INSERT INTO charges VALUES (%s, 1)", (order_id,))
        self.db.execute("COMMIT")
        return {"charged": 1}

    result = charge.apply(("o-7",), task_id="t-7")
    assert isinstance(result.result, InvalidTransactionTermination), result.result
    assert stored_result(conn, charge.name, "t-7") == {"charged": 1}
    assert charge.apply(("o-7",), task_id="t-7").get() == {"charged": 1}  # replayed
    assert ran == ["o-7"] and charges(conn) == 1


def test_a_connection_an_interrupted_run_left_in_pipeline_mode_is_replaced(app, conn):
    """Celery terminating a task (its broker connection lost) or a signal in the pool child
    can interrupt psycopg inside pipeline mode, leaving the connection there: every later
    statement on it failed, and the child's later tasks were failed and acked (lost)."""
    @app.task(base=ExactlyOnceTask, bind=True)
    def charge(self, order_id):
        self.db.execute("INSERT INTO charges VALUES (%s, 1)", (order_id,))
        return 1

    assert charge.apply(("o-8",), task_id="t-8").get() == 1
    left = charge.db
    left.pgconn.enter_pipeline_mode()  # as an interrupted pipeline leaves it
    assert charge.apply(("o-9",), task_id="t-9").get() == 1
    assert left.closed and charge.db is not left
    assert charges(conn) == 2


@pytest.mark.parametrize("sqlstate", ["57P01", "57P02", "57P03", "08006"])
def test_a_server_going_away_requeues_though_the_connection_looks_usable(app, conn, sqlstate):
    """A terminated session's error (a server's fast shutdown or restart) reaches psycopg
    before libpq has read the socket's close, so the connection is not yet marked broken: the
    task must still be requeued, not failed (Celery acks a failed task: it would be lost)."""
    @app.task(base=ExactlyOnceTask, bind=True, reconnect_pause=0)
    def charge(self, order_id):
        self.db.execute("INSERT INTO charges VALUES (%s, 1)", (order_id,))
        assert not (self.db.broken or self.db.closed)
        raise psycopg.errors.lookup(sqlstate)("terminating connection due to administrator "
                                              "command")

    result = charge.apply(("o-10",), task_id="t-10")
    assert result.state == "REJECTED" and isinstance(result.result, Reject), result.result
    assert result.result.requeue is True
    assert charges(conn) == 0
    assert conn.execute("SELECT count(*) FROM idempotency.lookup(%s, 't-10') "
                        "WHERE state = 'completed'", (charge.name,)).fetchone()[0] == 0


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
    """The claim (reserve_begin, which opens the transaction) in one round trip, the body's
    insert, complete + COMMIT in one; a replay: the claim alone (nothing opened). Where the
    server has no reserve_begin (the managed edition): BEGIN + reserve in one, and a replay's
    COMMIT after it. Watched on the wire (libpq's trace), once the connection knows the
    server's edition (one query per connection)."""
    from test_wire import MARK, Traced, assert_bound_only, marked, round_trips

    from pg_idempotency import observe
    from pg_idempotency.versions import edition
    traced = Traced(dsn, autocommit=False)
    replay_round_trips = 1 if edition(traced.conn).offers("reserve_begin") else 2

    class TracedTask(ExactlyOnceTask):
        def connect(self):
            return traced.conn

    @app.task(base=TracedTask, bind=True, idempotency_scope=marked())
    def charge(self, order_id):
        self.db.execute("INSERT INTO charges VALUES (%s, 1)", (order_id,))
        return {"charged": marked()}

    events = []
    observe.add_claim_listener(events.append)
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
        assert round_trips(messages) == replay_round_trips, messages
        assert charges(conn) == 1
    finally:
        observe.remove_claim_listener(events.append)
        charge._connection().drop()
        traced.close()
    # the runs' own round trips: the body's insert is not one of them
    assert [(e.outcome, e.round_trips) for e in events] == [
        ("new", 2), ("replay", replay_round_trips)]


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
