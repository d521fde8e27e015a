"""The Idempotency-Key header as ASGI middleware: Starlette, FastAPI, or any ASGI app.

    from psycopg_pool import AsyncConnectionPool
    from pg_idempotency.asgi import IdempotencyMiddleware

    pool = AsyncConnectionPool("dbname=shop", open=False)
    app.add_middleware(IdempotencyMiddleware, pool=pool,
                       scope=lambda req: req.headers["x-account"])

    @app.post("/orders")
    async def create_order(request: Request):
        conn = request.state.idempotency.conn      # the transaction that holds the claim
        ...

Answers (those of the Node client's Express middleware): 400 for a missing or malformed key
(or scope), 400 invalid_json for a JSON body that is not JSON; the stored answer with
`Idempotent-Replayed: true`; 409 + Retry-After while another request holds the key; 422 when
the key was used with another body or is too old; 503 + Retry-After when the database cannot be
reached. The handler's answer is held back until complete and COMMIT have returned (500 if the
commit fails); an answer of 500 or above is sent but not stored, and rolls back with the claim.
"""
from __future__ import annotations

from typing import Any

from .answers import BODY_TOO_LARGE, Outgoing, encode_json, outgoing
from .flow import BodyTooLarge, run_async
from .psycopg_session import PsycopgFlow
from .web import Context, RequestInfo


class _ClientGone(Exception):
    """The client went away before its body was complete: nothing runs."""


async def _read_body(receive, flow) -> bytes:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _ClientGone()
        chunk = message.get("body", b"")
        size += len(chunk)
        flow.over_limit(size)
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _latin1(value) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode("latin-1")


async def _send(send, answer, opts):
    out = outgoing(answer, opts)
    start = out.native or {}  # the application's own start message: its headers as they were
    headers = (out.headers if out.native else
               [(_latin1(k).lower(), _latin1(v)) for k, v in out.headers])
    await send({"type": "http.response.start", "status": out.status, "headers": headers,
                **({"trailers": start["trailers"]} if "trailers" in start else {})})
    await send({"type": "http.response.body", "body": out.body})


class IdempotencyMiddleware(PsycopgFlow):
    """ASGI middleware. Options (keywords):
      pool        a psycopg_pool.AsyncConnectionPool, or
      conninfo    a connection string: one connection per request, or
      connect     a callable returning an async context manager that yields an
                  AsyncConnection
      scope       whose keys (the account, the tenant): a string or a callable of RequestInfo
      key         RequestInfo -> key; default: the Idempotency-Key header, parsed
      exclude     fields left out of a JSON body's fingerprint (dotted paths)
      lock_ttl, retention, wait     as reserve's
      store       status -> whether to store the answer; default: below 500
      keep_headers  names of headers of the first answer that its replays carry besides
                  Content-Type and Location (say ETag)
      replay_headers (status, response) -> extra headers of a replay
      applies     (method, path) -> whether the middleware handles the request; default:
                  POST and PATCH
      max_body    the largest body read, in bytes (413 above); default 1 MiB
      documentation  the address of the service's idempotency documentation: the
                  middleware's own answers then carry Link: <address>; rel="describedby"
      legacy_answers  True: the middleware's own answers have the body of 0.3.0,
                  {"error", "message"} as application/json, not RFC 9457 problem details
      statement   the statement form, for an endpoint whose work is one SQL statement: the
                  middleware answers the requests `applies` selects itself, with one call of
                  idempotency.execute_once (one round trip for a new key and for a replay):
                  the statement's result (the one row's json column, or the row as a JSON
                  object) is the body, sent and stored with `status`; the app does not run
      params      RequestInfo -> the statement's parameters ($1, $2, ...), bound; default none
      status      the status of a new key's answer in the statement form; default 201
    """

    def __init__(self, app, *, pool=None, conninfo=None, connect=None, scope=None, **options):
        super().__init__(pool=pool, conninfo=conninfo, connect=connect, asynchronous=True,
                         scope=scope, **options)
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not self.options.applies_to(scope["method"],
                                                                   scope["path"]):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", [])}
        try:
            body = await _read_body(receive, self)
        except BodyTooLarge:
            await _send(send, BODY_TOO_LARGE, self.options)
            return
        except _ClientGone:
            return
        delivered = False

        async def replay_receive():
            # The body read here, once; then the server's own messages (a disconnect), which a
            # streaming response listens for.
            nonlocal delivered
            if delivered:
                return await receive()
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def run_app(context):
            state = dict(scope.get("state") or {})
            state["idempotency"] = context
            start: dict[str, Any] = {}
            chunks: list[bytes] = []
            finished = False

            async def hold(message):
                nonlocal finished
                if message["type"] == "http.response.start":
                    start.update(message)
                elif message["type"] == "http.response.body" and not finished:
                    chunks.append(message.get("body", b""))
                    finished = not message.get("more_body", False)

            await self.app({**scope, "state": state}, replay_receive, hold)
            if not finished or "status" not in start:
                return None
            return Outgoing(start["status"], start.get("headers", []), b"".join(chunks), start)

        req = RequestInfo(scope["method"], scope["path"], headers, body, scope)
        await _send(send, await run_async(self.handle(req, self.session(), run_app)),
                    self.options)


__all__ = ["IdempotencyMiddleware", "Context", "RequestInfo", "encode_json"]
