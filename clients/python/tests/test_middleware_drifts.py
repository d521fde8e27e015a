"""The ASGI, WSGI and Django middlewares give the same request the same answer: one flow
(pg_idempotency.middleware) serves all three. Each test sends one request through each of
them, called directly (no framework around them: an error they let through is seen as it is,
where a server would answer 500), and checks the answer docs/clients-python.md and
test/vectors/http_answers.json give."""
import asyncio
import io
import json
import pathlib
import uuid

import psycopg
import pytest

import pg_idempotency as pi
from pg_idempotency.web import request_fingerprint
from test_middleware import django_setup

FRAMEWORKS = ["asgi", "wsgi", "django"]
SCOPE = "acct_drift"
BODY = b'{"item": "widget", "note": "a body of some forty bytes"}'
VECTORS = json.loads((pathlib.Path(__file__).resolve().parents[3] / "test" / "vectors" /
                      "http_answers.json").read_text(encoding="utf-8"))


class Raised:
    """What a middleware let through: the exception, and its SQLSTATE (the driver's, under
    Django's wrapper)."""

    def __init__(self, error):
        self.error = error
        cause = error.__cause__
        self.sqlstate = (getattr(error, "sqlstate", None) or getattr(cause, "pgcode", None) or
                         getattr(cause, "sqlstate", None))


def behave(behaviour, backend_pid, operational_error, dsn):
    """What every application does inside the claim: (status, JSON body), or raise."""
    if behaviour == "raise":
        raise operational_error("the application's own error")
    if behaviour == "terminate":
        # its connection dies under it (waits until the backend has ended), and it answers 503
        with psycopg.connect(dsn, autocommit=True) as c:
            assert c.execute("SELECT pg_terminate_backend(%s, 60000)",
                             (backend_pid(),)).fetchone()[0]
        return 503, {"error": "try later"}
    return 201, {"ok": True}


def via_asgi(dsn, behaviour, key, options):
    from pg_idempotency.asgi import IdempotencyMiddleware

    async def app(scope, receive, send):
        conn = scope["state"]["idempotency"].conn
        status, payload = behave(behaviour, lambda: conn.info.backend_pid,
                                 psycopg.OperationalError, dsn)
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": json.dumps(payload).encode()})

    out = {"body": b""}

    async def receive():
        return {"type": "http.request", "body": BODY, "more_body": False}

    async def send(message):
        if message["type"] == "http.response.start":
            out["status"] = message["status"]
        else:
            out["body"] += message.get("body", b"")

    mw = IdempotencyMiddleware(app, conninfo=dsn, **options)
    asyncio.run(mw({"type": "http", "method": "POST", "path": "/orders", "headers": [
        (b"content-type", b"application/json"), (b"idempotency-key", key.encode()),
        (b"content-length", str(len(BODY)).encode())]}, receive, send))
    return out["status"], json.loads(out["body"])


def via_wsgi(dsn, behaviour, key, options):
    from pg_idempotency.wsgi import IdempotencyMiddleware

    def app(environ, start_response):
        conn = environ["idempotency"].conn
        status, payload = behave(behaviour, lambda: conn.info.backend_pid,
                                 psycopg.OperationalError, dsn)
        start_response(f"{status} X", [("Content-Type", "application/json")])
        return [json.dumps(payload).encode()]

    got = {}

    def start_response(status, headers, exc_info=None):
        got["status"] = int(status.split(" ", 1)[0])

    mw = IdempotencyMiddleware(app, conninfo=dsn, **options)
    body = b"".join(mw({"REQUEST_METHOD": "POST", "PATH_INFO": "/orders",
                        "CONTENT_TYPE": "application/json", "CONTENT_LENGTH": str(len(BODY)),
                        "HTTP_IDEMPOTENCY_KEY": key, "wsgi.input": io.BytesIO(BODY)},
                       start_response))
    return got["status"], json.loads(body)


def via_django(dsn, behaviour, key, options):
    from django.db import OperationalError, connections
    from django.http import JsonResponse
    from django.test import RequestFactory, override_settings
    from pg_idempotency.django import IdempotencyMiddleware
    django_setup(psycopg.conninfo.conninfo_to_dict(dsn)["dbname"])
    alias = options.pop("database", "default")

    def view(request):
        status, payload = behave(
            behaviour, lambda: request.idempotency.conn.connection.get_backend_pid(),
            OperationalError, dsn)
        return JsonResponse(payload, status=status)

    with override_settings(IDEMPOTENCY={**options, "database": alias}):
        mw = IdempotencyMiddleware(view)
    try:
        r = mw(RequestFactory().post("/orders", data=BODY, content_type="application/json",
                                     HTTP_IDEMPOTENCY_KEY=key))
    finally:
        connections[alias].close()
    return r.status_code, json.loads(r.content)


VIA = {"asgi": via_asgi, "wsgi": via_wsgi, "django": via_django}


def post(framework, dsn, behaviour="ok", key=None, **options):
    """(status, JSON body) of the middleware's answer, or Raised."""
    options.setdefault("scope", SCOPE)
    try:
        return VIA[framework](dsn, behaviour, key or str(uuid.uuid4()), options)
    except Exception as e:
        return Raised(e)


def answer(name):
    """The vectors' answer name, as the middlewares send it by default: problem details."""
    want = VECTORS["problems"][name]
    return want["status"], want["body"]


@pytest.fixture(scope="module")
def dsn(databases):
    return databases[0]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_body_over_max_body_is_413(framework, dsn):
    """Django's middleware read the whole body and ran the view whatever max_body said."""
    assert post(framework, dsn, max_body=16) == answer("body_too_large")


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_scope_with_a_nul_is_400(framework, dsn):
    """No PostgreSQL text holds a NUL: refused before the claim. Django's middleware sent it,
    and the driver's refusal went through as an error."""
    got = post(framework, dsn, scope=lambda req: "acct\x00nul")
    assert not isinstance(got, Raised), got.error
    assert (got[0], got[1]["error"]) == (400, "idempotency_scope_malformed")


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_claim_canceled_by_statement_timeout_is_not_503(framework, dsn):
    """503 says that the database could not be reached. A claim that waited for the holder
    past the session's statement_timeout (57014) reached it: the error goes to the framework
    (its 500), as any error of the application's database. ASGI and Django answered 503."""
    key = str(uuid.uuid4())
    slow = {"database": "slow"} if framework == "django" else {}
    slow_dsn = dsn if framework == "django" else f"{dsn} options='-c statement_timeout=200'"
    with psycopg.connect(dsn) as holder:          # holds the key inside its transaction
        assert pi.reserve(holder, SCOPE, key, request_fingerprint(
            BODY, "application/json")).outcome == "new"
        got = post(framework, slow_dsn, key=key, wait="60 seconds", **slow)
        assert isinstance(got, Raised), got
        assert got.sqlstate == "57014", got.error


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_an_application_that_raises_a_database_error_is_not_503(framework, dsn):
    """The application's own OperationalError is the application's: its claim rolls back and
    the error goes on to the framework. ASGI and WSGI answered 503 in its place; Django's
    middleware (without Django's handler around the view) answered 500 internal_error."""
    key = str(uuid.uuid4())
    got = post(framework, dsn, behaviour="raise", key=key)
    assert isinstance(got, Raised) and "the application's own error" in str(got.error), got
    with psycopg.connect(dsn) as c:
        assert pi.lookup(c, SCOPE, key) is None
    assert post(framework, dsn, key=key) == (201, {"ok": True})


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_an_answer_not_stored_is_sent_when_its_rollback_fails(framework, dsn):
    """An answer of 500 or above is sent, not stored. When the connection died under the
    application, the rollback fails (the server rolled back already): the application's answer
    still goes out. ASGI and WSGI answered 500 internal_error in its place."""
    key = str(uuid.uuid4())
    assert post(framework, dsn, behaviour="terminate", key=key) == (503, {"error": "try later"})
    with psycopg.connect(dsn) as c:
        assert pi.lookup(c, SCOPE, key) is None
