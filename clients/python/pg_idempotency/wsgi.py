"""The Idempotency-Key header as WSGI middleware: Flask, or any WSGI app.

    from psycopg_pool import ConnectionPool
    from pg_idempotency.wsgi import IdempotencyMiddleware

    pool = ConnectionPool("dbname=shop")
    app.wsgi_app = IdempotencyMiddleware(app.wsgi_app, pool=pool,
                                         scope=lambda req: req.headers["x-account"])

    @app.post("/orders")
    def create_order():
        conn = request.environ["idempotency"].conn     # the transaction that holds the claim
        ...

Options and answers: those of pg_idempotency.asgi.IdempotencyMiddleware, with a
psycopg_pool.ConnectionPool (pool=), a connection string (conninfo=) or a callable returning a
context manager that yields a psycopg.Connection (connect=).
"""
from __future__ import annotations

import io
from http import HTTPStatus

from .answers import BODY_TOO_LARGE, Outgoing, outgoing
from .flow import BodyTooLarge, run
from .psycopg_session import PsycopgFlow
from .web import Context, RequestInfo


def _status_line(status: int) -> str:
    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        return f"{status} Unknown"


def _send(start_response, answer, opts):
    out = outgoing(answer, opts)
    # the application's own status line as it was; ours from the status code
    start_response(out.native or _status_line(out.status), list(out.headers))
    return [out.body]


def _headers_of(environ) -> dict:
    headers = {k[5:].replace("_", "-").lower(): v for k, v in environ.items()
               if k.startswith("HTTP_")}
    for name in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        if environ.get(name):
            headers[name.replace("_", "-").lower()] = environ[name]
    return headers


def _read_body(environ, flow) -> bytes:
    stream = environ.get("wsgi.input")
    if stream is None:
        return b""
    length = environ.get("CONTENT_LENGTH") or ""
    if length.strip().isdigit():
        flow.over_limit(int(length))
        return stream.read(int(length)) if int(length) else b""
    if not environ.get("wsgi.input_terminated"):
        return b""  # no length and an unterminated stream: WSGI allows no read
    body = stream.read(flow.options.max_body + 1)
    flow.over_limit(len(body))
    return body


class IdempotencyMiddleware(PsycopgFlow):
    def __init__(self, app, *, pool=None, conninfo=None, connect=None, scope=None, **options):
        super().__init__(pool=pool, conninfo=conninfo, connect=connect, asynchronous=False,
                         scope=scope, **options)
        self.app = app

    def __call__(self, environ, start_response):
        method, path = environ.get("REQUEST_METHOD", "GET"), environ.get("PATH_INFO", "")
        if not self.options.applies_to(method, path):
            return self.app(environ, start_response)
        try:
            body = _read_body(environ, self)
        except BodyTooLarge:
            return _send(start_response, BODY_TOO_LARGE, self.options)
        environ["wsgi.input"] = io.BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))

        def run_app(context):
            environ["idempotency"] = context
            held = {}

            def hold(status, headers, exc_info=None):
                held["status"], held["headers"] = status, headers
                return lambda data: held.setdefault("written", []).append(data)

            result = self.app(environ, hold)
            try:
                body = b"".join([*held.get("written", []), *result])
            finally:
                if hasattr(result, "close"):
                    result.close()
            if "status" not in held:
                return None
            return Outgoing(int(held["status"].split(" ", 1)[0]), held["headers"], body,
                        held["status"])

        req = RequestInfo(method, path, _headers_of(environ), body, environ)
        return _send(start_response, run(self.handle(req, self.session(), run_app)),
                     self.options)


__all__ = ["IdempotencyMiddleware", "Context", "RequestInfo"]
