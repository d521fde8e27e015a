"""The statement form: run_once(..., statement=...) and the middlewares' statement= option, on
idempotency.execute_once. One round trip for a new key and for a replay (read off the wire with
libpq's trace), the outcomes as run_once's, the parameters converted to the texts the server
reads, an error of the statement leaving the key new, a burst of one key making one row, a
replay sending the bytes of the first answer, and a server without execute_once (0.2.0) named
in the log with a 500."""
import concurrent.futures
import datetime as dt
import decimal
import json
import logging
import os
import threading
import uuid

import psycopg
import pytest

import pg_idempotency as pi
from conftest import REASON_REPEATABLE_READ, REASON_VERSIONS, conninfo
from test_middleware_round_trips import Wire, _end_trace, _start_trace

SCOPE = "acct_eo"
INSERT = "INSERT INTO eo_orders (k, item, qty) VALUES ($1, $2, $3) RETURNING id, item, qty"
OLD_ULID = "01ARZ3NDEKTSV4RRFFQ69G5FAV"   # made in 2016: older than any retention


EO_ORDERS = "CREATE TABLE eo_orders (id serial PRIMARY KEY, k text, item text, qty integer)"


@pytest.fixture(scope="module")
def eo_table(databases):
    with psycopg.connect(databases[0], autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS eo_orders; " + EO_ORDERS)
    return databases[0]


def rows_of(dsn, key):
    with psycopg.connect(dsn) as c:
        return c.execute("SELECT item, qty FROM eo_orders WHERE k = %s ORDER BY id",
                         (key,)).fetchall()


@pytest.fixture
def traced(eo_table):
    """A connection (not in autocommit) whose round trips are counted: wire.last() after
    done(), or count() at any time."""
    conn = psycopg.connect(eo_table, prepare_threshold=None)
    wire, seen = Wire(), []
    state = {"f": _start_trace(conn)}

    def count():
        _end_trace(conn, state["f"], wire, seen)
        state["f"] = _start_trace(conn)
        return wire.last()
    yield conn, count
    _end_trace(conn, state["f"], wire, seen)
    conn.close()


# ---- run_once's statement form ----

def test_new_key_and_replay_one_round_trip_each(traced, eo_table):
    conn, count = traced
    key = str(uuid.uuid4())
    first = pi.run_once(conn, SCOPE, key, statement=INSERT, params=[key, "widget", 3],
                        request={"item": "widget", "qty": 3})
    statements, round_trips = count()
    assert round_trips == 1 and len(statements) == 1, statements
    assert "idempotency.execute_once(" in statements[0]
    assert first.replayed is False and first.status_code == 201 and first.attempt == 1
    assert first.response["item"] == "widget" and first.response["qty"] == 3
    # committed by itself: another connection sees the row, and the connection is as it was
    assert rows_of(eo_table, key) == [("widget", 3)]
    assert conn.autocommit is False
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE

    again = pi.run_once(conn, SCOPE, key, statement=INSERT, params=[key, "widget", 3],
                        request={"item": "widget", "qty": 3}, status=200)
    statements, round_trips = count()
    assert round_trips == 1 and len(statements) == 1, statements
    assert again == pi.Result(201, first.response, True, 1)
    assert rows_of(eo_table, key) == [("widget", 3)]


def test_autocommit_connection_one_round_trip(eo_table):
    with psycopg.connect(eo_table, autocommit=True) as conn:
        key = str(uuid.uuid4())
        r = pi.run_once(conn, SCOPE, key, statement=INSERT, params=[key, "a", 1], status=202)
        assert r.status_code == 202 and not r.replayed
        assert conn.autocommit is True
    assert rows_of(eo_table, key) == [("a", 1)]


def test_inside_the_callers_transaction_it_rolls_back_with_it(traced, eo_table):
    conn, count = traced
    key = str(uuid.uuid4())
    conn.execute("SELECT 1")                      # the caller's transaction is open
    count()
    r = pi.run_once(conn, SCOPE, key, statement=INSERT, params=[key, "tx", 1])
    assert r.replayed is False
    statements, round_trips = count()
    assert round_trips == 1 and len(statements) == 1, statements
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
    conn.rollback()
    assert rows_of(eo_table, key) == [] and pi.lookup(conn, SCOPE, key) is None
    conn.rollback()


@pytest.mark.extension_only(REASON_REPEATABLE_READ)
def test_connection_with_an_isolation_level_gets_its_transaction(eo_table):
    with psycopg.connect(eo_table) as conn:
        conn.isolation_level = psycopg.IsolationLevel.SERIALIZABLE
        key = str(uuid.uuid4())
        r = pi.run_once(conn, SCOPE, key, statement="SELECT current_setting("
                        "'transaction_isolation') AS iso")
        assert r.response == {"iso": "serializable"}
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_read_only_connection_is_refused(eo_table):
    with psycopg.connect(eo_table) as conn:
        conn.read_only = True
        with pytest.raises(pi.ReadOnlySqlTransaction):
            pi.run_once(conn, SCOPE, str(uuid.uuid4()), statement=INSERT, params=["x", "x", 1])


def test_outcomes_raise_as_run_once(conn, conn2, eo_table):
    key = str(uuid.uuid4())
    pi.run_once(conn, SCOPE, key, statement=INSERT, params=[key, "a", 1], request={"n": 1})
    with pytest.raises(pi.KeyMismatch):
        pi.run_once(conn, SCOPE, key, statement=INSERT, params=[key, "b", 1], request={"n": 2})
    with pytest.raises(pi.KeyTooOld):
        pi.run_once(conn, SCOPE, OLD_ULID, statement=INSERT, params=[OLD_ULID, "c", 1])
    held = str(uuid.uuid4())
    pi.reserve(conn2, SCOPE, held)               # conn2's open transaction holds the key
    with pytest.raises(pi.KeyInProgress):
        pi.run_once(conn, SCOPE, held, statement=INSERT, params=[held, "d", 1])
    conn2.rollback()
    assert rows_of(eo_table, key) == [("a", 1)]
    assert rows_of(eo_table, OLD_ULID) == [] and rows_of(eo_table, held) == []
    with pytest.raises(TypeError):
        pi.run_once(conn, SCOPE, key)            # neither work nor statement
    with pytest.raises(TypeError):
        pi.run_once(conn, SCOPE, key, lambda: (200, None), statement="SELECT 1")


def test_parameters_typed_as_the_server_reads_them(conn):
    at = dt.datetime(2026, 1, 2, 3, 4, 5, 600000, tzinfo=dt.timezone.utc)
    u = uuid.UUID("0190a5d0-ac96-774b-bcce-b302099a8057")
    r = pi.run_once(
        conn, SCOPE, str(uuid.uuid4()),
        statement="SELECT $1 IS NULL AS null, $2::boolean AS yes, $3::boolean AS no, "
                  "$4::bigint + 1 AS big, $5::numeric * 2 AS dec, $6::float8 AS fl, "
                  "$7 AS txt, $8::timestamptz = '2026-01-02 03:04:05.6+00' AS at, "
                  "$9::date AS day, $10::uuid AS id, $11::jsonb AS doc, $12::jsonb AS arr, "
                  "$13::interval = '1 day 2 seconds' AS span, $14::bytea = '\\x00ff' AS raw",
        params=[None, True, False, 2**62, decimal.Decimal("1.25"), 0.1,
                "x'); DROP TABLE eo_orders; --", at, dt.date(2026, 3, 4), u,
                {"a": [1, "ä"]}, [1, None], dt.timedelta(days=1, seconds=2), b"\x00\xff"])
    assert r.response == {
        "null": True, "yes": True, "no": False, "big": 2**62 + 1, "dec": 2.50, "fl": 0.1,
        "txt": "x'); DROP TABLE eo_orders; --", "at": True, "day": "2026-03-04",
        "id": str(u), "doc": {"a": [1, "ä"]}, "arr": [1, None], "span": True, "raw": True}
    only_nulls = pi.run_once(conn, SCOPE, str(uuid.uuid4()),
                             statement="SELECT $1::int IS NULL AS a, $2 IS NULL AS b",
                             params=[None, None])
    assert only_nulls.response == {"a": True, "b": True}
    with pytest.raises(TypeError, match="object"):
        pi.run_once(conn, SCOPE, str(uuid.uuid4()), statement="SELECT $1", params=[object()])


def test_response_shapes(conn):
    one = pi.run_once(conn, SCOPE, str(uuid.uuid4()),
                      statement="SELECT jsonb_build_object('n', $1::int)", params=[7])
    assert one.response == {"n": 7}
    none = pi.run_once(conn, SCOPE, str(uuid.uuid4()), statement="SELECT 1 WHERE false",
                       status=404)
    assert none.response is None and none.status_code == 404
    key = str(uuid.uuid4())
    with pytest.raises(pi.CardinalityViolation):
        pi.run_once(conn, SCOPE, key, statement="SELECT generate_series(1, 2) AS g")
    assert pi.lookup(conn, SCOPE, key) is None


def test_an_error_of_the_statement_leaves_the_key_new(conn, eo_table):
    key = str(uuid.uuid4())
    with pytest.raises(psycopg.errors.DivisionByZero):
        pi.run_once(conn, SCOPE, key, statement="SELECT 1 / $1::int AS q", params=[0])
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert pi.lookup(conn, SCOPE, key) is None
    conn.rollback()
    r = pi.run_once(conn, SCOPE, key, statement="SELECT 1 / $1::int AS q", params=[1])
    assert r.response == {"q": 1} and r.replayed is False


def test_burst_of_one_key_makes_one_row(eo_table):
    key = str(uuid.uuid4())
    start = threading.Barrier(8)

    def one(i):
        with psycopg.connect(eo_table) as c:
            start.wait(60)
            return pi.run_once(c, SCOPE, key, statement=INSERT, params=[key, "burst", i],
                               request={"item": "burst"}, wait="60 seconds")

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(8)))
    assert len(rows_of(eo_table, key)) == 1
    assert sum(not r.replayed for r in results) == 1
    assert len({json.dumps(r.response, sort_keys=True) for r in results}) == 1


# ---- the middlewares' statement form ----

MW_INSERT = "INSERT INTO eo_orders (k, item, qty) VALUES ($1, $2, $3) RETURNING id, item"


def mw_options(**extra):
    return dict(scope=lambda req: req.headers["x-account"], statement=MW_INSERT,
                params=lambda req: [req.headers["idempotency-key"],
                                    json.loads(req.body)["item"], json.loads(req.body)["qty"]],
                applies=lambda method, path: method == "POST" and path == "/eo", **extra)


class Client:
    def __init__(self, post, wire):
        self.post, self.wire = post, wire


def flask_client(dsn, wire, **options):
    import contextlib
    import flask
    from pg_idempotency.wsgi import IdempotencyMiddleware

    @contextlib.contextmanager
    def connect():
        conn = psycopg.connect(dsn, prepare_threshold=None)
        f = _start_trace(conn)
        try:
            yield conn
        finally:
            _end_trace(conn, f, wire, [])
            conn.close()

    app = flask.Flask("eo")
    app.wsgi_app = IdempotencyMiddleware(app.wsgi_app, connect=connect, **options)
    client = app.test_client()

    def post(key, body, account=SCOPE):
        r = client.post("/eo", data=json.dumps(body),
                        headers={"Content-Type": "application/json", "X-Account": account,
                                 **({"Idempotency-Key": key} if key is not None else {})})
        return r.status_code, {k.lower(): v for k, v in r.headers.items()}, r.get_data()
    return post, lambda: None


def starlette_client(dsn, wire, **options):
    import contextlib
    from starlette.applications import Starlette
    from starlette.testclient import TestClient
    from pg_idempotency.asgi import IdempotencyMiddleware

    @contextlib.asynccontextmanager
    async def connect():
        conn = await psycopg.AsyncConnection.connect(dsn, prepare_threshold=None)
        f = _start_trace(conn)
        try:
            yield conn
        finally:
            _end_trace(conn, f, wire, [])
            await conn.close()

    app = Starlette(routes=[])
    app.add_middleware(IdempotencyMiddleware, connect=connect, **options)
    client = TestClient(app, raise_server_exceptions=False)
    client.__enter__()

    def post(key, body, account=SCOPE):
        r = client.post("/eo", content=json.dumps(body),
                        headers={"Content-Type": "application/json", "X-Account": account,
                                 **({"Idempotency-Key": key} if key is not None else {})})
        return r.status_code, {k.lower(): v for k, v in r.headers.items()}, r.content
    return post, lambda: client.__exit__(None, None, None)


def django_client(dsn, wire, **options):
    from django.test import Client as DjangoClient, override_settings
    from test_middleware import django_setup
    django_setup(psycopg.conninfo.conninfo_to_dict(dsn)["dbname"])
    override = override_settings(IDEMPOTENCY=options)
    override.enable()
    client = DjangoClient(raise_request_exception=False)

    def post(key, body, account=SCOPE):
        extra = {"HTTP_X_ACCOUNT": account}
        if key is not None:
            extra["HTTP_IDEMPOTENCY_KEY"] = key
        r = client.post("/eo", data=json.dumps(body), content_type="application/json",
                        **extra)
        return r.status_code, {k.lower(): v for k, v in r.items()}, r.content
    return post, override.disable


CLIENTS = {"flask": flask_client, "starlette": starlette_client, "django": django_client}


@pytest.fixture(params=CLIENTS)
def web(request, eo_table):
    made = []

    def make(dsn=eo_table, **options):
        wire = Wire()
        post, close = CLIENTS[request.param](dsn, wire, **mw_options(**options))
        made.append(close)
        return Client(post, wire)
    make.framework = request.param
    yield make
    for close in made:
        close()


def test_middleware_new_key_and_replay(web, eo_table):
    client = web(status=202)
    key = str(uuid.uuid4())
    status, headers, body = client.post(key, {"item": "mw", "qty": 2})
    assert status == 202 and "idempotent-replayed" not in headers
    assert headers["content-type"] == "application/json"
    order = json.loads(body)
    assert order["item"] == "mw" and isinstance(order["id"], int)
    if web.framework != "django":  # Django's connection is not traced
        statements, round_trips = client.wire.last()
        assert round_trips == 1 and len(statements) == 1, statements
        assert "idempotency.execute_once(" in statements[0]

    again_status, again_headers, again_body = client.post(key, {"item": "mw", "qty": 2})
    assert again_status == 202 and again_body == body
    assert again_headers["idempotent-replayed"] == "true"
    assert again_headers["content-type"] == "application/json"
    if web.framework != "django":
        statements, round_trips = client.wire.last()
        assert round_trips == 1 and len(statements) == 1, statements
    assert rows_of(eo_table, key) == [("mw", 2)]


def test_middleware_answers_409_422_400(web, eo_table, conn2):
    client = web()
    key = str(uuid.uuid4())
    assert client.post(key, {"item": "a", "qty": 1})[0] == 201
    status, _, body = client.post(key, {"item": "b", "qty": 1})
    assert status == 422 and json.loads(body)["error"] == "idempotency_key_reused"
    status, _, body = client.post(OLD_ULID, {"item": "a", "qty": 1})
    assert status == 422 and json.loads(body)["error"] == "idempotency_key_too_old"
    status, _, body = client.post(None, {"item": "a", "qty": 1})
    assert status == 400 and json.loads(body)["error"] == "idempotency_key_missing"
    held = str(uuid.uuid4())
    pi.reserve(conn2, SCOPE, held)
    status, headers, body = client.post(held, {"item": "a", "qty": 1})
    conn2.rollback()
    assert status == 409 and json.loads(body)["error"] == "idempotency_key_in_use"
    assert int(headers["retry-after"]) >= 1
    assert rows_of(eo_table, held) == [] and len(rows_of(eo_table, key)) == 1


def test_middleware_statement_error_is_a_500_and_the_key_stays_new(web, eo_table, caplog):
    client = web()
    key = str(uuid.uuid4())
    with caplog.at_level(logging.ERROR, logger="pg_idempotency"):
        status, _, body = client.post(key, {"item": "bad", "qty": "many"})
    assert status == 500 and json.loads(body)["error"] == "internal_error"
    assert any(key in r.getMessage() and "nothing is stored" in r.getMessage()
               for r in caplog.records)
    with psycopg.connect(eo_table) as c:
        assert pi.lookup(c, SCOPE, key) is None
    assert client.post(key, {"item": "good", "qty": 1})[0] == 201
    assert rows_of(eo_table, key) == [("good", 1)]


OLD_DB = "pyclient_eo_old"


@pytest.fixture(scope="module")
def old_server(databases):
    admin_db = conninfo(os.environ.get("PGDATABASE", "postgres"))
    with psycopg.connect(admin_db, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {OLD_DB} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {OLD_DB}")
    with psycopg.connect(conninfo(OLD_DB), autocommit=True) as c:
        c.execute("CREATE EXTENSION idempotency VERSION '0.2.0'")
        c.execute(EO_ORDERS)
    yield conninfo(OLD_DB)
    with psycopg.connect(admin_db, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {OLD_DB} WITH (FORCE)")


@pytest.mark.extension_only(REASON_VERSIONS)
def test_server_without_execute_once(old_server, caplog):
    with psycopg.connect(old_server) as c:
        with pytest.raises(pi.ExtensionVersionError) as info:
            pi.run_once(c, SCOPE, "k-1", statement="SELECT 1")
        assert "idempotency.execute_once does not exist on this server" in str(info.value)
        assert info.value.needed == "0.3.0"


@pytest.mark.extension_only(REASON_VERSIONS)
@pytest.mark.parametrize("framework", ["flask", "starlette"])
def test_middleware_on_a_server_without_execute_once(framework, old_server, caplog):
    post, close = CLIENTS[framework](old_server, Wire(), **mw_options())
    try:
        with caplog.at_level(logging.ERROR, logger="pg_idempotency"):
            status, _, body = post(str(uuid.uuid4()), {"item": "a", "qty": 1})
    finally:
        close()
    assert status == 500 and json.loads(body)["error"] == "internal_error"
    assert any("idempotency.execute_once does not exist on this server" in r.getMessage()
               for r in caplog.records)
    assert rows_of(old_server, "k") == []


def test_middleware_503_when_the_database_is_unreachable():
    import flask
    from pg_idempotency.wsgi import IdempotencyMiddleware
    app = flask.Flask("eo-down")
    app.wsgi_app = IdempotencyMiddleware(
        app.wsgi_app, conninfo="host=127.0.0.1 port=1 connect_timeout=2", **mw_options())
    r = app.test_client().post("/eo", data=json.dumps({"item": "a", "qty": 1}),
                               headers={"Content-Type": "application/json",
                                        "X-Account": SCOPE, "Idempotency-Key": "k-down"})
    assert r.status_code == 503 and r.get_json()["error"] == "database_unavailable"
    assert r.headers["Retry-After"] == "1"


def test_middleware_statement_form_is_observed(web):
    from pg_idempotency import observe
    client = web()
    events = []
    observe.add_claim_listener(events.append)
    try:
        key = str(uuid.uuid4())
        assert client.post(key, {"item": "a", "qty": 1})[0] == 201
        assert client.post(key, {"item": "a", "qty": 1})[0] == 201
        assert client.post(key, {"item": "b", "qty": 1})[0] == 422
    finally:
        observe.remove_claim_listener(events.append)
    assert [(e.helper, e.scope, e.outcome, e.status) for e in events] == [
        ("middleware", SCOPE, "new", 201), ("middleware", SCOPE, "replay", 201),
        ("middleware", SCOPE, "mismatch", 422)]
