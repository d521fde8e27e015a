"""pg_idempotency.observe: a ClaimEvent per run_once / run_external call (new, replay, the 422
of a mismatch, the 409 of a key in progress, with the attempt; the key only when asked), the
DEBUG log record, and prometheus_client's counter and histogram fed from them."""
import logging
import uuid

import prometheus_client
import psycopg
import pytest

import pg_idempotency as pi
from pg_idempotency import observe

SCOPE = "acct_observe"
STATEMENT = "SELECT $1::text AS item"


@pytest.fixture
def events():
    got = []
    observe.add_claim_listener(got.append)
    yield got
    observe.remove_claim_listener(got.append)
    observe.record_keys(False)


def test_each_outcome_is_an_event(conn, conn2, events):
    key = str(uuid.uuid4())
    conn.autocommit = True
    pi.run_once(conn, SCOPE, key, request={"item": "lamp"}, statement=STATEMENT, params=["lamp"])
    pi.run_once(conn, SCOPE, key, request={"item": "lamp"}, statement=STATEMENT, params=["lamp"])
    with pytest.raises(pi.KeyMismatch) as mismatch:
        pi.run_once(conn, SCOPE, key, request={"item": "sofa"}, statement=STATEMENT,
                    params=["sofa"])
    held = str(uuid.uuid4())
    with conn2.transaction():
        pi.reserve(conn2, SCOPE, held)
        observe.record_keys(True)
        with pytest.raises(pi.KeyInProgress) as in_progress:
            pi.run_once(conn, SCOPE, held, statement=STATEMENT, params=["x"])
        observe.record_keys(False)
    pi.run_external(conn, SCOPE, str(uuid.uuid4()), lambda attempt: (200, None))
    assert [(e.helper, e.outcome, e.key) for e in events] == [
        ("run_once", "new", None), ("run_once", "replay", None), ("run_once", "mismatch", None),
        ("run_once", "in_progress", held), ("run_external", "new", None)]
    assert all(e.scope == SCOPE and e.seconds > 0 for e in events)
    assert events[0].attempt == 1 and events[0].error is None and events[1].error is None
    assert events[2].error is mismatch.value and mismatch.value.http_status == 422
    assert events[3].error is in_progress.value and in_progress.value.http_status == 409


def test_a_failing_listener_is_not_the_calls_failure(conn, caplog):
    def broken(event):
        raise RuntimeError("a listener's bug")
    observe.add_claim_listener(broken)
    try:
        conn.autocommit = True
        with caplog.at_level(logging.ERROR, logger="pg_idempotency.claims"):
            r = pi.run_once(conn, SCOPE, str(uuid.uuid4()), statement=STATEMENT, params=["x"])
    finally:
        observe.remove_claim_listener(broken)
    assert not r.replayed
    assert "a claim listener failed" in caplog.text


def test_the_debug_log_record(conn, caplog):
    conn.autocommit = True
    with caplog.at_level(logging.DEBUG, logger="pg_idempotency.claims"):
        pi.run_once(conn, SCOPE, str(uuid.uuid4()), statement=STATEMENT, params=["x"])
    [record] = [r for r in caplog.records if r.name == "pg_idempotency.claims"]
    assert record.idempotency["outcome"] == "new" and record.idempotency["key"] is None
    assert record.idempotency["helper"] == "run_once"


def test_prometheus_metrics(conn):
    registry = prometheus_client.CollectorRegistry()
    listener, _, _ = observe.prometheus_metrics(registry)
    try:
        conn.autocommit = True
        key = str(uuid.uuid4())
        for _ in range(3):
            pi.run_once(conn, SCOPE, key, statement=STATEMENT, params=["x"])
    finally:
        observe.remove_claim_listener(listener)
    value = registry.get_sample_value
    assert value("idempotency_client_claims_total",
                 {"helper": "run_once", "outcome": "new"}) == 1
    assert value("idempotency_client_claims_total",
                 {"helper": "run_once", "outcome": "replay"}) == 2
    assert value("idempotency_client_call_seconds_count",
                 {"helper": "run_once", "outcome": "replay"}) == 2


def test_the_consumers_and_claim(conn, conn2, events):
    key, held, dead = (str(uuid.uuid4()) for _ in range(3))
    conn.autocommit = True

    def work(c):
        c.execute("SELECT 1")

    def poison(c):
        raise ValueError("not JSON")
    assert pi.consume_once(conn, SCOPE, key, work) is True
    assert pi.consume_once(conn, SCOPE, key, work) is False
    with conn2.transaction():
        pi.reserve(conn2, SCOPE, held)
        with pytest.raises(pi.KeyInProgress) as in_progress:
            pi.consume_once(conn, SCOPE, held, work)
    with pytest.raises(pi.PoisonMessage) as poisoned:
        pi.consume_once(conn, SCOPE, dead, poison, max_attempts=1)
    with conn.transaction():
        assert pi.claim_once(conn, SCOPE, str(uuid.uuid4())) is True
    observe.record_keys(True)
    assert pi.apply_once(conn, "observe_stream", "p0", 7, work) is True
    assert pi.apply_once(conn, "observe_stream", "p0", 7, work) is False
    observe.record_keys(False)
    with pi.claim(conn, SCOPE, str(uuid.uuid4())) as c:
        c.complete(201, {"ok": True})
    assert [(e.helper, e.outcome, e.key) for e in events] == [
        ("consume_once", "new", None), ("consume_once", "replay", None),
        ("consume_once", "in_progress", None), ("consume_once", None, None),
        ("claim_once", "new", None),
        ("apply_once", "new", pi.position_key("p0", 7)),
        ("apply_once", "replay", pi.position_key("p0", 7)),
        ("claim", "new", None)]
    assert events[2].error is in_progress.value and in_progress.value.http_status == 409
    assert events[3].error is poisoned.value and events[3].attempt == 1
    assert events[5].scope == "observe_stream" and events[7].attempt == 1


def test_round_trips_are_the_helpers_own_as_on_the_wire(dsn, events):
    """Each event's round_trips is what the wire shows (libpq's trace: a Sync or simple Query
    per round trip) less the work's own statements (one each here)."""
    from test_wire import Traced, round_trips

    from pg_idempotency.versions import edition
    traced = Traced(dsn, autocommit=True)
    conn = traced.conn
    try:
        edition(conn)  # asked once per connection: not in the calls below
        calls = []

        def call(fn, work_trips=0):
            traced.messages()
            events.clear()
            fn()
            [event] = events
            calls.append((event.helper, event.outcome, event.round_trips,
                          round_trips(traced.messages()) - work_trips))

        def work():
            conn.execute("SELECT 1")
            return 201, {"ok": True}

        key, stmt_key, ext_key, msg, held = (str(uuid.uuid4()) for _ in range(5))
        call(lambda: pi.run_once(conn, SCOPE, stmt_key, statement=STATEMENT, params=["x"]))
        call(lambda: pi.run_once(conn, SCOPE, stmt_key, statement=STATEMENT, params=["x"]))
        call(lambda: pi.run_once(conn, SCOPE, key, work), work_trips=1)
        call(lambda: pi.run_once(conn, SCOPE, key, work))
        call(lambda: pi.run_external(conn, SCOPE, ext_key, lambda a: work()), work_trips=1)
        call(lambda: pi.consume_once(conn, SCOPE, msg, lambda c: work()), work_trips=1)
        call(lambda: pi.consume_once(conn, SCOPE, msg, lambda c: work()))

        def claimed_once():
            with conn.transaction():
                pi.claim_once(conn, SCOPE, str(uuid.uuid4()))
        call(claimed_once, work_trips=2)  # the caller's BEGIN and COMMIT
        call(lambda: pi.apply_once(conn, "observe_stream", "p1", 9, lambda c: work()),
             work_trips=1)

        def claimed():
            with pi.claim(conn, SCOPE, str(uuid.uuid4())) as c:
                c.complete(201, {"ok": True})
        call(claimed)
        with psycopg.connect(dsn) as holder, holder.transaction():
            pi.reserve(holder, SCOPE, held)
            call(lambda: pytest.raises(pi.KeyInProgress, pi.run_once, conn, SCOPE, held, work,
                                       wait="0 seconds"))
    finally:
        traced.close()
    assert [(helper, outcome) for helper, outcome, _, _ in calls] == [
        ("run_once", "new"), ("run_once", "replay"), ("run_once", "new"), ("run_once", "replay"),
        ("run_external", "new"), ("consume_once", "new"), ("consume_once", "replay"),
        ("claim_once", "new"), ("apply_once", "new"), ("claim", "new"),
        ("run_once", "in_progress")]
    assert [observed for _, _, observed, _ in calls] == [wire for _, _, _, wire in calls]
    # the statement form: one round trip for a new key and for a replay
    assert [observed for _, _, observed, _ in calls[:2]] == [1, 1]
