"""What the WSGI and ASGI middlewares send, read off the wire with libpq's own trace: a replay
is one round trip (reserve_begin) and a new key two besides the handler's statements
(reserve_begin; complete + COMMIT, pipelined: one Sync), with no BEGIN of psycopg's own, and
every value bound. The connection goes back
with the autocommit setting it came with. A server that refuses reserve_begin (here: renamed
away, as on a server before 0.3.0) gets BEGIN + reserve, and the refusal is met once. A
connection with an isolation level of its own gets psycopg's BEGIN, which carries it."""
import contextlib
import json
import re
import tempfile
import uuid

import psycopg
import pytest
from psycopg.pq import Trace

from conftest import MANAGED, REASON_REPEATABLE_READ, REASON_RESERVE_BEGIN
from pg_idempotency import observe
from pg_idempotency.statements import EDITION as EDITION_SQL
from pg_idempotency.statements import RESERVE

INSERT = "INSERT INTO rt_orders (k, item) VALUES (%s, %s) RETURNING id"


class Wire:
    """The statements each connection sent (Query and Parse texts) and its round trips
    (ReadyForQuery messages), one entry per connection closed."""

    def __init__(self):
        self.connections = []
        self.editions_asked = 0  # the middleware asks the server's edition once, kept apart

    def record(self, trace: str):
        statements = [m.group(1) for m in re.finditer(
            r'^F\t\d+\t(?:Query|Parse)\t (?:"[^"]*" )?"(.*)"', trace, re.M)]
        round_trips = len(re.findall(r"^B\t\d+\tReadyForQuery\t", trace, re.M))
        if statements and statements[0] == EDITION_SQL:
            statements, round_trips = statements[1:], round_trips - 1
            self.editions_asked += 1
        self.connections.append((statements, round_trips))

    def last(self):
        return self.connections[-1]


def _start_trace(conn):
    f = tempfile.TemporaryFile()
    conn.pgconn.trace(f.fileno())
    conn.pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS | Trace.REGRESS_MODE)
    return f


def _end_trace(conn, f, wire, seen):
    conn.pgconn.untrace()
    f.seek(0)
    wire.record(f.read().decode("utf-8", "replace"))
    f.close()
    seen.append((conn.autocommit, conn.info.transaction_status))


@pytest.fixture(scope="module")
def rt_table(databases):
    with psycopg.connect(databases[0], autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS rt_orders")
        c.execute("CREATE TABLE rt_orders (id serial PRIMARY KEY, k text, item text)")
    return databases[0]


def options():
    return dict(scope="acct_rt", lock_ttl="30 seconds")


def flask_client(_closers, dsn, wire, seen, isolation=None, **connect_args):
    import flask
    from pg_idempotency.wsgi import IdempotencyMiddleware

    @contextlib.contextmanager
    def connect():
        # prepare_threshold None: every statement goes out with its text (no server-side
        # prepared statement hides one)
        conn = psycopg.connect(dsn, prepare_threshold=None, **connect_args)
        conn.isolation_level = isolation
        f = _start_trace(conn)
        try:
            yield conn
        finally:
            _end_trace(conn, f, wire, seen)
            conn.close()

    app = flask.Flask("rt")

    @app.post("/orders")
    def orders():
        ctx = flask.request.environ["idempotency"]
        item = flask.request.get_json()["item"]
        order_id = ctx.conn.execute(INSERT, (ctx.key, item)).fetchone()[0]
        return flask.jsonify({"id": order_id}), 201

    app.wsgi_app = IdempotencyMiddleware(app.wsgi_app, connect=connect, **options())
    client = app.test_client()  # nothing to close

    def post(key, item="widget"):
        r = client.post("/orders", data=json.dumps({"item": item}),
                        headers={"Content-Type": "application/json", "Idempotency-Key": key})
        return r.status_code, r.get_json(), dict(r.headers)
    return post


def starlette_client(closers, dsn, wire, seen, isolation=None, **connect_args):
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient
    from pg_idempotency.asgi import IdempotencyMiddleware

    @contextlib.asynccontextmanager
    async def connect():
        conn = await psycopg.AsyncConnection.connect(dsn, prepare_threshold=None,
                                                     **connect_args)
        await conn.set_isolation_level(isolation)
        f = _start_trace(conn)
        try:
            yield conn
        finally:
            _end_trace(conn, f, wire, seen)
            await conn.close()

    async def orders(request: Request):
        ctx = request.state.idempotency
        item = (await request.json())["item"]
        cur = await ctx.conn.execute(INSERT, (ctx.key, item))
        return JSONResponse({"id": (await cur.fetchone())[0]}, status_code=201)

    app = Starlette(routes=[Route("/orders", orders, methods=["POST"])])
    app.add_middleware(IdempotencyMiddleware, connect=connect, **options())
    client = TestClient(app)
    client.__enter__()
    closers.append(lambda: client.__exit__(None, None, None))

    def post(key, item="widget"):
        r = client.post("/orders", content=json.dumps({"item": item}),
                        headers={"Content-Type": "application/json", "Idempotency-Key": key})
        return r.status_code, r.json(), dict(r.headers)
    return post


CLIENTS = {"flask": flask_client, "starlette": starlette_client}


@pytest.fixture
def client_of():
    """client_of(framework, dsn, wire, seen, ...) -> post; the clients end with the test."""
    closers = []
    yield lambda framework, *args, **kwargs: CLIENTS[framework](closers, *args, **kwargs)
    for close in closers:
        close()


@pytest.mark.extension_only(REASON_RESERVE_BEGIN)
@pytest.mark.parametrize("framework", CLIENTS)
def test_new_key_and_replay_round_trips(framework, rt_table, client_of):
    wire, seen, events = Wire(), [], []
    post = client_of(framework, rt_table, wire, seen)
    key = str(uuid.uuid4())

    observe.add_claim_listener(events.append)
    try:
        status, body, _ = post(key)
        first_round_trips = wire.last()[1]
        post(key)
    finally:
        observe.remove_claim_listener(events.append)
    # the events count the middleware's own round trips (not the handler's INSERT), the
    # server's edition asked on the first request included
    assert [(e.outcome, e.round_trips) for e in events] == [
        ("new", first_round_trips - 1 + 1), ("replay", wire.last()[1])]
    assert [e.round_trips for e in events] == [3, 1]

    wire, seen = Wire(), []
    post = client_of(framework, rt_table, wire, seen)
    key = str(uuid.uuid4())
    status, body, _ = post(key)
    assert status == 201
    statements, round_trips = wire.last()
    assert round_trips == 3, statements
    assert "reserve_begin(" in statements[0]
    assert statements[1] == INSERT.replace("%s", "$1", 1).replace("%s", "$2", 1)
    assert statements[2].startswith("SELECT idempotency.complete($1,") and \
        statements[3] == "COMMIT" and len(statements) == 4, statements
    assert not any(s.strip().upper().startswith("BEGIN") for s in statements), statements
    assert seen[-1] == (False, psycopg.pq.TransactionStatus.IDLE)

    status, again, headers = post(key)
    assert status == 201 and again == body
    assert headers.get("idempotent-replayed", headers.get("Idempotent-Replayed")) == "true"
    statements, round_trips = wire.last()
    assert round_trips == 1 and len(statements) == 1 and "reserve_begin(" in statements[0]
    assert seen[-1] == (False, psycopg.pq.TransactionStatus.IDLE)
    assert wire.editions_asked == 1

    with psycopg.connect(rt_table) as check:
        assert check.execute("SELECT count(*) FROM rt_orders WHERE k = %s",
                             (key,)).fetchone()[0] == 1


@pytest.mark.extension_only(REASON_RESERVE_BEGIN)
@pytest.mark.parametrize("framework", CLIENTS)
def test_autocommit_connection_comes_back_autocommit(framework, rt_table, client_of):
    wire, seen = Wire(), []
    post = client_of(framework, rt_table, wire, seen, autocommit=True)
    key = str(uuid.uuid4())
    assert post(key)[0] == 201
    statements, round_trips = wire.last()
    # reserve_begin opened the transaction that the INSERT and complete + COMMIT ran in
    assert round_trips == 3 and "reserve_begin(" in statements[0], statements
    assert statements[-2].startswith("SELECT idempotency.complete($1,") and \
        statements[-1] == "COMMIT"
    assert post(key)[0] == 201
    assert wire.last()[1] == 1
    assert seen == [(True, psycopg.pq.TransactionStatus.IDLE)] * 2


@pytest.mark.extension_only(REASON_REPEATABLE_READ)
@pytest.mark.parametrize("framework", CLIENTS)
def test_isolation_level_of_the_connection_is_kept(framework, rt_table, client_of):
    wire, seen = Wire(), []
    post = client_of(framework, rt_table, wire, seen,
                     isolation=psycopg.IsolationLevel.REPEATABLE_READ)
    key = str(uuid.uuid4())
    assert post(key)[0] == 201
    statements, _ = wire.last()
    assert statements[0] == "BEGIN ISOLATION LEVEL REPEATABLE READ", statements
    assert "idempotency.reserve(" in statements[1]
    assert not any("reserve_begin(" in s for s in statements)
    assert post(key)[0] == 201  # the replay: BEGIN, reserve, ROLLBACK
    assert [s.split("(")[0] for s in wire.last()[0]] == [
        "BEGIN ISOLATION LEVEL REPEATABLE READ",
        RESERVE.split("(")[0], "ROLLBACK"]


@pytest.mark.extension_only(REASON_RESERVE_BEGIN)
@pytest.mark.parametrize("autocommit", [False, True])
@pytest.mark.parametrize("framework", CLIENTS)
def test_server_that_refuses_reserve_begin_gets_begin_and_reserve(framework, autocommit,
                                                                rt_table, client_of):
    wire, seen = Wire(), []
    post = client_of(framework, rt_table, wire, seen, autocommit=autocommit)
    assert post(str(uuid.uuid4()))[0] == 201  # the edition, asked once, offers reserve_begin
    with psycopg.connect(rt_table, autocommit=True) as admin:
        admin.execute("ALTER FUNCTION idempotency.reserve_begin RENAME TO reserve_begin_away")
        try:
            key = str(uuid.uuid4())
            status, body, _ = post(key)
            assert status == 201
            statements, _ = wire.last()
            assert "reserve_begin(" in statements[0]        # refused: 42883
            # BEGIN: psycopg's, or the middleware's own on an autocommit connection
            assert statements[1] == "BEGIN" and "idempotency.reserve(" in statements[2]
            assert statements[-2].startswith("SELECT idempotency.complete($1,") and \
                statements[-1] == "COMMIT"
            assert seen[-1] == (autocommit, psycopg.pq.TransactionStatus.IDLE)
            status, again, _ = post(key)                   # the refusal is remembered
            assert status == 201 and again == body
            assert [s.split("(")[0] for s in wire.last()[0]] == [
                "BEGIN", RESERVE.split("(")[0], "ROLLBACK"]
        finally:
            admin.execute("ALTER FUNCTION idempotency.reserve_begin_away RENAME TO reserve_begin")
    with psycopg.connect(rt_table) as check:
        assert check.execute("SELECT count(*) FROM rt_orders WHERE k = %s",
                             (key,)).fetchone()[0] == 1


@contextlib.contextmanager
def _without_reserve_begin(dsn):
    """A server without reserve_begin: the managed edition has none; the extension's is
    renamed away for the test (as on a server before 0.3.0)."""
    if MANAGED:
        yield
        return
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("ALTER FUNCTION idempotency.reserve_begin RENAME TO reserve_begin_away")
        try:
            yield
        finally:
            admin.execute("ALTER FUNCTION idempotency.reserve_begin_away RENAME TO reserve_begin")


@pytest.mark.parametrize("autocommit", [False, True])
@pytest.mark.parametrize("framework", CLIENTS)
def test_server_without_reserve_begin_is_asked_once_never_refused(framework, autocommit,
                                                                  rt_table, client_of):
    wire, seen = Wire(), []
    post = client_of(framework, rt_table, wire, seen, autocommit=autocommit)
    with _without_reserve_begin(rt_table):
        key = str(uuid.uuid4())
        status, body, _ = post(key)
        assert status == 201
        statements, round_trips = wire.last()
        # the edition's statement (kept apart by Wire), then BEGIN + reserve: reserve_begin is
        # never sent, so never refused
        assert wire.editions_asked == 1
        assert statements[0] == "BEGIN" and "idempotency.reserve(" in statements[1], statements
        assert not any("reserve_begin" in s for s in statements), statements
        assert statements[-2].startswith("SELECT idempotency.complete($1,") and \
            statements[-1] == "COMMIT"
        assert seen[-1] == (autocommit, psycopg.pq.TransactionStatus.IDLE)
        status, again, _ = post(key)
        assert status == 201 and again == body
        assert [s.split("(")[0] for s in wire.last()[0]] == [
            "BEGIN", RESERVE.split("(")[0], "ROLLBACK"]
        assert wire.editions_asked == 1  # asked once per middleware
