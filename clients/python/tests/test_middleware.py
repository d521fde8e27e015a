"""The HTTP middlewares in the real frameworks (Debian's packages): Starlette and FastAPI
(ASGI, through Starlette's TestClient), Flask (WSGI, its test client) and Django (its test
client, on Django's own connection). Every framework gets the same requests and must give the
answers of the Node client's Express middleware."""
import json
import os
import threading
import time
import uuid

import psycopg
import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse

import pg_idempotency as pi

ACCOUNT = "acct_1"
OLD_UUIDV7 = "01890a5d-ac96-774b-bcce-b302099a8057"
UNREACHABLE = "host=127.0.0.1 port=1 connect_timeout=2"   # nothing listens on port 1

# Gates that hold a handler inside its transaction: the test opens them.
ENTERED: dict = {}
GATES: dict = {}


def gate(name):
    ENTERED[name], GATES[name] = threading.Event(), threading.Event()
    return ENTERED[name], GATES[name]


def wait_at_gate(name):
    ENTERED[name].set()
    assert GATES[name].wait(60), "the test never opened the gate"


def item_of(body: bytes, content_type: str):
    if "json" in (content_type or ""):
        return json.loads(body)["item"]
    return body.decode()


def answer_of(query: dict, order_id: int, item, attempt: int):
    """What every app's handler answers after its insert: (status, body, headers)."""
    if query.get("answer") == "503":
        return 503, {"error": "try later"}, {}
    if query.get("throw") == "1":
        raise RuntimeError("handler failed")
    if query.get("text") == "1":
        return 202, f"order {order_id} caf\u00e9", {"X-Order": str(order_id)}
    return 201, {"id": order_id, "item": item, "attempt": attempt}, {
        "Location": f"/orders/{order_id}", "X-Order": str(order_id), "X-Not-Kept": "1"}


INSERT = "INSERT INTO orders (k, item, code) VALUES (%s, %s, %s) RETURNING id"


def replay_marker(status, response):
    """replay_headers: adds to a replay (Location, X-Order: stored with the first answer)."""
    return ({"X-Replay-Of": str(response["id"])}
            if status == 201 and isinstance(response, dict) and "id" in response else {})


def middleware_options(**extra):
    return dict(scope=lambda req: req.headers.get("x-account", "anonymous"),
                lock_ttl="30 seconds", replay_headers=replay_marker, keep_headers=["X-Order"],
                **extra)


class Response:
    def __init__(self, status, headers, body):
        self.status, self.body_bytes = status, body
        self.headers = {k.lower(): v for k, v in headers.items()}
        try:
            self.body = json.loads(body) if body else None
        except ValueError:                  # a framework's own error page
            self.body = None


# ---- the apps ----

async def asgi_orders(request: Request):
    """The handler of Starlette's and FastAPI's apps."""
    import anyio
    ctx = request.state.idempotency
    body = await request.body()
    item = item_of(body, request.headers.get("content-type"))
    cur = await ctx.conn.execute(INSERT, (ctx.key, item, request.query_params.get("code")))
    order_id = (await cur.fetchone())[0]
    if "hold" in request.query_params:
        await anyio.to_thread.run_sync(wait_at_gate, request.query_params["hold"])
    status, payload, headers = answer_of(dict(request.query_params), order_id, item,
                                         ctx.attempt)
    if isinstance(payload, str):
        from starlette.responses import PlainTextResponse
        return PlainTextResponse(payload, status_code=status, headers=headers)
    return JSONResponse(payload, status_code=status, headers=headers)


async def asgi_stream(request: Request):
    """A streaming answer: Starlette listens for the client's disconnect while it streams."""
    from starlette.responses import StreamingResponse
    body = await request.body()

    async def chunks():
        yield b'{"echo": '
        yield json.dumps(body.decode()).encode()
        yield b"}"
    return StreamingResponse(chunks(), status_code=201, media_type="application/json")


def starlette_app(dsn, pool_kind):
    from starlette.applications import Starlette
    from starlette.routing import Route
    from pg_idempotency.asgi import IdempotencyMiddleware

    app = Starlette(routes=[Route("/orders", asgi_orders, methods=["POST"]),
                            Route("/stream", asgi_stream, methods=["POST"])])
    return _asgi_with_pool(app, dsn, pool_kind, IdempotencyMiddleware)


def fastapi_app(dsn, pool_kind):
    from fastapi import FastAPI
    from pg_idempotency.asgi import IdempotencyMiddleware

    app = FastAPI()
    app.post("/orders")(asgi_orders)
    app.post("/stream")(asgi_stream)
    return _asgi_with_pool(app, dsn, pool_kind, IdempotencyMiddleware)


def _asgi_with_pool(app, dsn, pool_kind, middleware):
    if pool_kind == "pool":
        from psycopg_pool import AsyncConnectionPool
        pool = AsyncConnectionPool(dsn, min_size=1, max_size=4, open=False)
        app.add_event_handler("startup", pool.open)
        app.add_event_handler("shutdown", pool.close)
        app.add_middleware(middleware, pool=pool, **middleware_options())
    else:
        app.add_middleware(middleware, conninfo=dsn, **middleware_options())
    return app


def flask_app(dsn, min_size=1):
    import flask
    from psycopg_pool import ConnectionPool
    from pg_idempotency.wsgi import IdempotencyMiddleware

    app = flask.Flask("orders")

    @app.post("/orders")
    def orders():
        ctx = flask.request.environ["idempotency"]
        body = flask.request.get_data()
        item = item_of(body, flask.request.content_type)
        order_id = ctx.conn.execute(INSERT, (ctx.key, item, flask.request.args.get("code"))
                                    ).fetchone()[0]
        if "hold" in flask.request.args:
            wait_at_gate(flask.request.args["hold"])
        status, payload, headers = answer_of(flask.request.args.to_dict(), order_id, item,
                                             ctx.attempt)
        if isinstance(payload, str):
            return payload, status, {**headers, "Content-Type": "text/plain; charset=utf-8"}
        return flask.jsonify(payload), status, headers

    pool = ConnectionPool(dsn, min_size=min_size, max_size=4)
    app.wsgi_app = IdempotencyMiddleware(app.wsgi_app, pool=pool, **middleware_options())
    return app, pool


# Django: one settings module per process, the views here.
def django_orders(request):
    from django.db import connection
    from django.http import JsonResponse
    ctx = request.idempotency
    item = item_of(request.body, request.content_type)
    with connection.cursor() as cur:
        cur.execute(INSERT, (ctx.key, item, request.GET.get("code")))
        order_id = cur.fetchone()[0]
    if "hold" in request.GET:
        wait_at_gate(request.GET["hold"])
    status, payload, headers = answer_of(request.GET.dict(), order_id, item, ctx.attempt)
    from django.http import HttpResponse
    response = (HttpResponse(payload, status=status, content_type="text/plain; charset=utf-8")
                if isinstance(payload, str) else JsonResponse(payload, status=status))
    for k, v in headers.items():
        response[k] = v
    return response


def django_urls():
    from django.urls import path
    return [path("orders", django_orders)]


urlpatterns = []


def django_setup(dbname):
    import django
    from django.conf import settings
    if not settings.configured:
        common = {"ENGINE": "django.db.backends.postgresql", "HOST": os.environ.get("PGHOST"),
                  "PORT": os.environ.get("PGPORT"), "USER": os.environ.get("PGUSER")}
        settings.configure(
            DEBUG=False, ALLOWED_HOSTS=["*"], ROOT_URLCONF=__name__, SECRET_KEY="test",
            DATABASES={"default": {**common, "NAME": dbname},
                       # a claim that waits is canceled after 200 ms (test_middleware_drifts)
                       "slow": {**common, "NAME": dbname,
                                "OPTIONS": {"options": "-c statement_timeout=200"}},
                       "down": {"ENGINE": "django.db.backends.postgresql", "NAME": dbname,
                                "HOST": "127.0.0.1", "PORT": "1",
                                "OPTIONS": {"connect_timeout": 2}}},
            MIDDLEWARE=["pg_idempotency.django.IdempotencyMiddleware"],
            IDEMPOTENCY=middleware_options(),
            LOGGING_CONFIG=None)
        django.setup()
        urlpatterns[:] = django_urls()


# ---- one harness per framework: post() -> Response ----

class Harness:
    def __init__(self, name, request, close):
        self.name, self._request, self.close = name, request, close

    def post(self, path="/orders", body=None, key=None, account=ACCOUNT,
             content_type="application/json", query=""):
        if body is None:
            body = {"item": "widget"}
        data = json.dumps(body).encode() if isinstance(body, dict) else (
            body.encode() if isinstance(body, str) else body)
        headers = {"Content-Type": content_type, "X-Account": account}
        if key is not None:
            headers["Idempotency-Key"] = key
        return self._request(path + (f"?{query}" if query else ""), data, headers)


def starlette_harness(app, name):
    from starlette.testclient import TestClient
    client = TestClient(app, raise_server_exceptions=False)
    client.__enter__()

    def request(path, data, headers):
        r = client.post(path, content=data,
                        headers={k: v.encode("latin-1") for k, v in headers.items()})
        return Response(r.status_code, dict(r.headers), r.content)
    return Harness(name, request, lambda: client.__exit__(None, None, None))


def flask_harness(app, pool):
    client = app.test_client()

    def request(path, data, headers):
        r = client.post(path, data=data, headers=headers)
        return Response(r.status_code, dict(r.headers), r.get_data())
    return Harness("flask", request, pool.close)


def django_harness():
    from django.test import Client
    client = Client(raise_request_exception=False)

    def request(path, data, headers):
        extra = {"HTTP_" + k.upper().replace("-", "_"): v for k, v in headers.items()
                 if k.lower() != "content-type"}
        r = client.post(path, data=data, content_type=headers["Content-Type"], **extra)
        return Response(r.status_code, dict(r.items()), r.content)
    return Harness("django", request, lambda: None)


@pytest.fixture(scope="module")
def orders_table(databases):
    with psycopg.connect(databases[0], autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS orders")
        c.execute("CREATE TABLE orders (id serial PRIMARY KEY, k text, item text, "
                  "code text UNIQUE DEFERRABLE INITIALLY DEFERRED)")
    return databases[0]


FRAMEWORKS = ["starlette", "fastapi", "flask", "django"]


def make_harness(name, dsn):
    if name == "starlette":
        return starlette_harness(starlette_app(dsn, "conninfo"), name)
    if name == "fastapi":
        return starlette_harness(fastapi_app(dsn, "pool"), name)
    if name == "flask":
        return flask_harness(*flask_app(dsn))
    django_setup(psycopg.conninfo.conninfo_to_dict(dsn)["dbname"])
    return django_harness()


@pytest.fixture(scope="module", params=FRAMEWORKS)
def web(request, orders_table):
    h = make_harness(request.param, orders_table)
    yield h
    h.close()


@pytest.fixture
def check(orders_table):
    with psycopg.connect(orders_table, autocommit=True) as c:
        yield c


def orders_of(check, key):
    return [r[0] for r in check.execute("SELECT id FROM orders WHERE k = %s ORDER BY id",
                                        (key,))]


def new_key():
    return str(uuid.uuid4())


# ---- the answers ----

def test_400_missing_or_malformed_key(web, check):
    missing = web.post()
    assert missing.status == 400 and missing.body["error"] == "idempotency_key_missing"
    for key in ["x" * 256, "has space", "caf\u00e9"]:
        r = web.post(key=key.encode("utf-8").decode("latin-1"))
        assert r.status == 400, (key, r.status)
        assert r.body["error"] == "idempotency_key_malformed"
    assert check.execute("SELECT count(*) FROM orders WHERE k LIKE 'has%'").fetchone()[0] == 0


def test_400_scope_over_255_bytes(web, check):
    r = web.post(key=new_key(), account="a" * 256)
    assert r.status == 400 and r.body["error"] == "idempotency_scope_malformed"


def test_new_then_replay(web, check):
    key = new_key()
    first = web.post(key=key, body={"item": "widget"})
    assert first.status == 201, first.body_bytes
    assert "idempotent-replayed" not in first.headers
    assert first.headers["location"] == f"/orders/{first.body['id']}"
    # The answer came after the COMMIT: the stored result is there already.
    assert pi.lookup(check, ACCOUNT, key)["state"] == "completed"
    again = web.post(key=key.upper(), body={"item": "widget"})
    assert again.status == 201 and again.headers["idempotent-replayed"] == "true"
    assert again.body == first.body
    # the headers the first answer set that a client reads: stored, and replayed as they were
    for name in ("content-type", "location", "x-order"):
        assert again.headers[name] == first.headers[name], name
    assert "x-not-kept" in first.headers and "x-not-kept" not in again.headers
    assert again.headers["x-replay-of"] == str(first.body["id"])     # replay_headers
    stored = pi.lookup(check, ACCOUNT, key)["response"]
    assert stored == {"idempotency_http": 1, "body": first.body, "headers": {
        "content-type": first.headers["content-type"], "location": first.headers["location"],
        "x-order": first.headers["x-order"]}}
    assert orders_of(check, key) == [first.body["id"]]
    other = web.post(key=key, account="acct_2")          # another scope: another request
    assert other.status == 201 and other.body["id"] != first.body["id"]


def test_a_text_answer_replays_as_it_was(web, check):
    key = new_key()
    first = web.post(key=key, query="text=1")
    assert first.status == 202, first.body_bytes
    again = web.post(key=key, query="text=1")
    assert again.status == 202 and again.headers["idempotent-replayed"] == "true"
    assert again.body_bytes == first.body_bytes and "caf\u00e9".encode() in again.body_bytes
    for name in ("content-type", "x-order"):
        assert again.headers[name] == first.headers[name], name


def test_422_changed_json_body(web, check):
    key = new_key()
    assert web.post(key=key).status == 201
    same = web.post(key=key, body='{ "item" : "widget" }')   # equal as JSON: a replay
    assert same.status == 201 and same.headers["idempotent-replayed"] == "true"
    r = web.post(key=key, body={"item": "gadget"})
    assert r.status == 422 and r.body["error"] == "idempotency_key_reused"
    assert len(orders_of(check, key)) == 1


def test_422_changed_raw_body(web, check):
    """A body that is not JSON is fingerprinted by its bytes: another body is a 422, never a
    replay of the first one."""
    key = new_key()
    first = web.post(key=key, body="plain widget", content_type="text/plain")
    assert first.status == 201 and first.body["item"] == "plain widget"
    again = web.post(key=key, body="plain widget", content_type="text/plain")
    assert again.status == 201 and again.headers["idempotent-replayed"] == "true"
    other = web.post(key=key, body="plain gadget", content_type="text/plain")
    assert other.status == 422 and other.body["error"] == "idempotency_key_reused"
    assert len(orders_of(check, key)) == 1


def test_400_invalid_json(web, check):
    r = web.post(key=new_key(), body='{"n": NaN}')
    assert r.status == 400 and r.body["error"] == "invalid_json"


def test_422_too_old(web):
    r = web.post(key=OLD_UUIDV7)
    assert r.status == 422 and r.body["error"] == "idempotency_key_too_old"


def test_409_retry_after_while_the_first_holds_the_key(web, check):
    key, name = new_key(), f"hold-{uuid.uuid4().hex}"
    entered, opened = gate(name)
    first = {}
    t = threading.Thread(target=lambda: first.setdefault(
        "r", web.post(key=key, query=f"hold={name}")))
    t.start()
    try:
        assert entered.wait(60), "the first request never reached its handler"
        dup = web.post(key=key)
        assert dup.status == 409 and dup.body["error"] == "idempotency_key_in_use"
        assert int(dup.headers["retry-after"]) >= 1
    finally:
        opened.set()
        t.join(60)
    assert first["r"].status == 201
    assert len(orders_of(check, key)) == 1


def test_5xx_sent_but_not_stored(web, check):
    key = new_key()
    failed = web.post(key=key, query="answer=503")
    assert failed.status == 503 and failed.body == {"error": "try later"}
    assert orders_of(check, key) == [] and pi.lookup(check, ACCOUNT, key) is None
    retry = web.post(key=key)
    assert retry.status == 201 and "idempotent-replayed" not in retry.headers


def test_handler_that_raises_stores_nothing(web, check):
    key = new_key()
    r = web.post(key=key, query="throw=1")
    assert r.status == 500
    assert orders_of(check, key) == [] and pi.lookup(check, ACCOUNT, key) is None
    assert web.post(key=key).status == 201


def test_answer_waits_for_the_commit(web, check):
    code = f"c-{uuid.uuid4()}"
    assert web.post(key=new_key(), query=f"code={code}").status == 201
    key = new_key()
    # The deferred unique constraint fails at COMMIT, after the handler answered 201.
    r = web.post(key=key, query=f"code={code}")
    assert r.status == 500 and "location" not in r.headers
    assert r.body["error"] == "internal_error"
    assert orders_of(check, key) == [] and pi.lookup(check, ACCOUNT, key) is None




@pytest.mark.parametrize("name", ["starlette", "fastapi"])
def test_asgi_streaming_answer_is_held_and_stored(name, orders_table):
    h = make_harness(name, orders_table)
    try:
        key, result = new_key(), {}
        t = threading.Thread(target=lambda: result.setdefault(
            "r", h.post("/stream", key=key, body="abc", content_type="text/plain")),
            daemon=True)
        t.start()
        t.join(60)
        assert "r" in result, "the streaming answer never came"
        assert result["r"].status == 201 and result["r"].body == {"echo": "abc"}
        again = h.post("/stream", key=key, body="abc", content_type="text/plain")
        assert again.headers["idempotent-replayed"] == "true" and again.body == {"echo": "abc"}
    finally:
        h.close()


def test_asgi_client_gone_before_its_body_ended_runs_nothing(orders_table):
    """A disconnect in the middle of the body: no claim, no handler, no answer."""
    import asyncio
    from pg_idempotency.asgi import IdempotencyMiddleware

    async def app(scope, receive, send):
        raise AssertionError("the app ran")

    sent = []
    messages = [{"type": "http.request", "body": b'{"item": ', "more_body": True},
                {"type": "http.disconnect"}]

    async def receive():
        return messages.pop(0)

    async def send(message):
        sent.append(message)

    key = new_key()
    mw = IdempotencyMiddleware(app, conninfo=orders_table, **middleware_options())
    asyncio.run(mw({"type": "http", "method": "POST", "path": "/orders",
                    "headers": [(b"idempotency-key", key.encode()),
                                (b"content-type", b"application/json")]}, receive, send))
    assert sent == []
    with psycopg.connect(orders_table) as c:
        assert pi.lookup(c, "anonymous", key) is None


# ---- the database is unreachable: 503, the app keeps running ----

def unreachable_harness(name):
    if name in ("starlette", "fastapi"):
        app = (starlette_app if name == "starlette" else fastapi_app)(UNREACHABLE, "conninfo")
        return starlette_harness(app, name)
    if name == "flask":
        import flask
        from pg_idempotency.wsgi import IdempotencyMiddleware
        app = flask.Flask("down")
        app.post("/orders")(lambda: ("never", 201))
        app.wsgi_app = IdempotencyMiddleware(app.wsgi_app, conninfo=UNREACHABLE,
                                             **middleware_options())
        return flask_harness(app, type("NoPool", (), {"close": lambda self: None})())
    return None


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_503_when_the_database_is_unreachable(name, orders_table):
    if name == "django":
        from django.test import RequestFactory, override_settings
        from pg_idempotency.django import IdempotencyMiddleware
        django_setup(psycopg.conninfo.conninfo_to_dict(orders_table)["dbname"])
        with override_settings(IDEMPOTENCY={**middleware_options(), "database": "down"}):
            mw = IdempotencyMiddleware(lambda req: pytest.fail("the view ran"))
        req = RequestFactory().post("/orders", data=b'{"item": "w"}',
                                    content_type="application/json",
                                    HTTP_IDEMPOTENCY_KEY=new_key())
        r = mw(req)
        assert r.status_code == 503 and r["Retry-After"] == "1"
        assert json.loads(r.content)["error"] == "database_unavailable"
        return
    h = unreachable_harness(name)
    try:
        for _ in range(2):                  # the app is still up after the first one
            r = h.post(key=new_key())
            assert r.status == 503 and r.headers["retry-after"] == "1"
            assert r.body["error"] == "database_unavailable"
    finally:
        h.close()


# ---- the database comes back: the first request succeeds ----

def until(what, condition, seconds=60):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"still not {what} after {seconds} s"
        time.sleep(0.05)


def backends(check, app_name):
    return check.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                         (app_name,)).fetchone()[0]


def terminate(check, app_name):
    """Ends the backends of app_name, as a server restart does, and waits until they are gone:
    the pool's connections die while idle."""
    check.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                  "WHERE application_name = %s", (app_name,))
    until("gone", lambda: backends(check, app_name) == 0)


@pytest.mark.parametrize("name", ["fastapi", "flask"])
def test_first_request_after_the_pools_connections_died_succeeds(name, orders_table, check):
    """Four pooled connections die while idle: the first request after that is served, not
    answered 503 (once per dead connection, as before)."""
    app_name = f"recovery_{name}"
    dsn = f"{orders_table} application_name={app_name}"
    if name == "fastapi":
        from fastapi import FastAPI
        from psycopg_pool import AsyncConnectionPool
        from pg_idempotency.asgi import IdempotencyMiddleware
        app = FastAPI()
        app.post("/orders")(asgi_orders)
        pool = AsyncConnectionPool(dsn, min_size=4, max_size=4, open=False)
        app.add_event_handler("startup", pool.open)
        app.add_event_handler("shutdown", pool.close)
        app.add_middleware(IdempotencyMiddleware, pool=pool, **middleware_options())
        h = starlette_harness(app, name)
    else:
        h = flask_harness(*flask_app(dsn, min_size=4))
    try:
        assert h.post(key=new_key()).status == 201
        until("four connections", lambda: backends(check, app_name) == 4)
        terminate(check, app_name)
        for _ in range(2):
            key = new_key()
            r = h.post(key=key)
            assert r.status == 201, (r.status, r.body)
            assert len(orders_of(check, key)) == 1
    finally:
        h.close()


def test_django_first_request_after_its_connection_died_succeeds(orders_table, check):
    from django.db import connections
    from django.test import RequestFactory
    from pg_idempotency.django import IdempotencyMiddleware
    django_setup(psycopg.conninfo.conninfo_to_dict(orders_table)["dbname"])
    mw = IdempotencyMiddleware(django_orders)

    def post(key):
        return mw(RequestFactory().post("/orders", data=b'{"item": "w"}',
                                        content_type="application/json",
                                        HTTP_IDEMPOTENCY_KEY=key, HTTP_X_ACCOUNT=ACCOUNT))
    # No request_finished signal here: the connection stays open between requests, as it
    # does with CONN_MAX_AGE.
    assert post(new_key()).status_code == 201
    pid = connections["default"].connection.get_backend_pid()
    check.execute("SELECT pg_terminate_backend(%s)", (pid,))
    until("gone", lambda: check.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s",
                                        (pid,)).fetchone()[0] == 0)
    key = new_key()
    r = post(key)
    assert r.status_code == 201, r.content
    assert len(orders_of(check, key)) == 1
    assert connections["default"].connection.get_backend_pid() != pid


# ---- observed (pg_idempotency.observe) ----

def test_each_request_is_a_claim_event(web, orders_table):
    from pg_idempotency import observe
    events = []
    observe.add_claim_listener(events.append)
    try:
        key, held = new_key(), new_key()
        assert web.post(key=key, body={"item": "lamp"}).status == 201
        assert web.post(key=key, body={"item": "lamp"}).status == 201
        assert web.post(key=key, body={"item": "sofa"}).status == 422
        with psycopg.connect(orders_table) as holder, holder.transaction():
            pi.reserve(holder, ACCOUNT, held)
            assert web.post(key=held).status == 409
        assert web.post().status == 400         # no key: no claim, no event
    finally:
        observe.remove_claim_listener(events.append)
    got = [e for e in events if e.helper == "middleware"]
    assert [(e.outcome, e.status, e.attempt) for e in got] == [
        ("new", 201, 1), ("replay", 201, 1), ("mismatch", 422, 1), ("in_progress", 409, None)]
    assert all(e.scope == ACCOUNT and e.key is None and e.error is None for e in got)
