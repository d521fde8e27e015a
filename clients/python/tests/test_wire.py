"""No value in any statement text: every call of the client, the middlewares' included, is
watched on the wire (libpq's trace of the protocol messages it sends) with a value that carries
a marker, which must reach the server in Bind messages only, never in the text of a Parse or of
a simple Query. And the paths that take one round trip still take one."""
import io
import json
import tempfile
import uuid

import psycopg
import pytest
from psycopg.pq import Trace

import pg_idempotency as pi
from conftest import REASON_RESERVE_BEGIN
from pg_idempotency.keys import execute_once

MARK = "w1reMark"


def marked():
    return f"{MARK}-{uuid.uuid4()}'\\"


class Traced:
    """A connection whose frontend messages are recorded (PQtrace)."""

    def __init__(self, dsn, autocommit):
        self.conn = psycopg.connect(dsn, autocommit=autocommit)
        self.file = tempfile.TemporaryFile("w+")
        self.conn.pgconn.trace(self.file.fileno())
        self.conn.pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS | Trace.REGRESS_MODE)

    def messages(self):
        """The frontend messages sent so far, as (type, text of the message) pairs; then
        forgets them."""
        self.file.flush()
        self.file.seek(0)
        lines = self.file.read().splitlines()
        self.file.seek(0)
        self.file.truncate()
        return [(line.split("\t")[2], line) for line in lines
                if line.startswith("F\t") and len(line.split("\t")) > 2]

    def close(self):
        self.conn.pgconn.untrace()
        self.conn.close()
        self.file.close()


@pytest.fixture
def traced(dsn):
    opened = []

    def make(autocommit=False):
        t = Traced(dsn, autocommit)
        opened.append(t)
        return t
    yield make
    for t in opened:
        t.close()


def assert_bound_only(messages):
    texts = [line for kind, line in messages if kind in ("Parse", "Query")]
    bound = [line for kind, line in messages if kind == "Bind"]
    assert not [t for t in texts if MARK in t], "a value was sent as statement text"
    assert any(MARK in b for b in bound), "the marked value was not sent at all"


def round_trips(messages):
    """Each Sync or simple Query ends a round trip."""
    return sum(kind in ("Sync", "Query") for kind, _ in messages)


def test_the_key_calls_bind_every_value(traced):
    t = traced()
    conn, scope, key = t.conn, marked(), marked()
    assert pi.reserve(conn, scope, key, pi.request_hash({"a": MARK})).outcome == "new"
    pi.checkpoint(conn, scope, key, marked())
    pi.complete(conn, scope, key, 201, {"id": marked()})
    assert pi.lookup(conn, scope, key)["state"] == "completed"
    conn.commit()
    other = marked()
    pi.reserve(conn, scope, other)
    pi.fail(conn, scope, other, {"error": marked()})
    assert pi.forget(conn, scope, other) is True
    conn.commit()
    r = execute_once(conn, scope, marked(), "SELECT $1::text AS v", [marked()])
    assert r.outcome == "new" and r.response["v"].startswith(MARK)
    conn.commit()
    assert_bound_only(t.messages())


@pytest.mark.parametrize("autocommit", [False, True])
def test_the_helpers_and_consumers_bind_every_value(traced, autocommit):
    t = traced(autocommit)
    conn = t.conn
    result = pi.run_once(conn, marked(), marked(), lambda: (201, {"id": marked()}),
                         request={"b": marked()})
    assert result.status_code == 201
    assert pi.run_once(conn, marked(), marked(), statement="SELECT $1::text AS v",
                       params=[marked()]).status_code == 201
    assert pi.run_external(conn, marked(), marked(), lambda a: (200, {"r": marked()}))
    assert pi.consume_once(conn, marked(), marked(), lambda c: None) is True
    assert pi.claim_once(conn, marked(), marked()) is True
    assert pi.apply_once(conn, marked(), marked(), 5, lambda c: None) is True
    assert pi.accept(conn, marked(), marked(), 1) is True
    if not autocommit:
        conn.commit()
    assert_bound_only(t.messages())


def test_consume_once_on_an_autocommit_connection_is_still_two_round_trips(traced):
    """BEGIN and claim_once in one round trip (one Sync), the work, then COMMIT."""
    t = traced(autocommit=True)
    t.messages()
    assert pi.consume_once(t.conn, marked(), marked(), lambda c: None) is True
    messages = t.messages()
    assert_bound_only(messages)
    assert round_trips(messages) == 2, messages
    assert pi.apply_once(t.conn, marked(), marked(), 7, lambda c: None) is True
    messages = t.messages()
    assert_bound_only(messages)
    assert round_trips(messages) == 2, messages


def wsgi_post(mw, key, body):
    out = {}

    def start_response(status, headers, exc_info=None):
        out["status"] = int(status.split()[0])

    data = json.dumps(body).encode()
    environ = {"REQUEST_METHOD": "POST", "PATH_INFO": "/orders", "CONTENT_TYPE":
               "application/json", "CONTENT_LENGTH": str(len(data)),
               "wsgi.input": io.BytesIO(data), "HTTP_IDEMPOTENCY_KEY": key}
    out["body"] = b"".join(mw(environ, start_response))
    return out


class _Lend:
    def __init__(self, conn):
        self.conn = conn

    def __enter__(self):
        return self.conn

    def __exit__(self, *exc):
        return False


# The claim form's two round trips are reserve_begin's; the managed edition has none.
@pytest.mark.parametrize("form", [
    pytest.param("claim", marks=pytest.mark.extension_only(REASON_RESERVE_BEGIN)), "statement"])
def test_the_middleware_binds_every_value_and_stores_in_one_round_trip(traced, form):
    from pg_idempotency.wsgi import IdempotencyMiddleware
    t = traced()
    scope = marked()

    def app(environ, start_response):
        start_response("201 Created", [("Content-Type", "application/json")])
        return [json.dumps({"id": marked()}).encode()]

    options = {"statement": "SELECT $1::text AS v",
               "params": lambda req: [marked()]} if form == "statement" else {}
    mw = IdempotencyMiddleware(app, connect=lambda: _Lend(t.conn), scope=scope, **options)
    key = str(uuid.uuid4())
    wsgi_post(mw, key, {"x": 1})      # the first asks the server's edition
    t.messages()
    key = f"{MARK}-{uuid.uuid4()}"
    first = wsgi_post(mw, key, {"item": marked()})
    assert first["status"] == 201 and MARK.encode() in first["body"]
    messages = t.messages()
    assert_bound_only(messages)
    # the claim (reserve_begin), then complete + COMMIT; the statement form: one call
    assert round_trips(messages) == (2 if form == "claim" else 1), messages
    replay = wsgi_post(mw, key, {"item": "other"})
    assert replay["status"] == 422
