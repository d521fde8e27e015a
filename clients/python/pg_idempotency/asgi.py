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

import contextlib
import logging
from typing import Any, Optional

import psycopg
from psycopg.types.json import Jsonb

from .client import (COMPLETE_COMMIT_SQL, RESERVE_BEGIN_SQL, RESERVE_SQL, autocommit_to_restore,
                     begin_needed, check_encodable, cursor_of, reservation_of,
                     reserve_begin_refused, reserve_begin_usable, reserve_params)
from .errors import KeyInProgress, KeyMalformed, KeyMismatch, KeyTooOld, translate
from .versions import edition_async
from .web import (BODY_TOO_LARGE, DATABASE_UNAVAILABLE, NOT_STORED, Answer, Context,
                  RequestInfo, StaleConnection, answer_for, connector, encode_json,
                  headers_of_replay, options_from, replay_of, stored_answer)

log = logging.getLogger("pg_idempotency")

_OUTCOMES = {"in_progress": KeyInProgress, "mismatch": KeyMismatch, "too_old": KeyTooOld}


def _one_connection(conninfo):
    @contextlib.asynccontextmanager
    async def one_connection():
        conn = await psycopg.AsyncConnection.connect(conninfo)
        try:
            yield conn
        finally:
            await conn.close()
    return one_connection


class _BodyTooLarge(Exception):
    pass


class _ClientGone(Exception):
    """The client went away before its body was complete: nothing runs."""


async def _send_answer(send, answer: Answer, extra: Optional[dict] = None):
    body = answer.encoded()
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode())]
    for name, value in {**answer.headers, **(extra or {})}.items():
        headers.append((name.lower().encode("latin-1"), str(value).encode("latin-1")))
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _read_body(receive, limit: int) -> bytes:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _ClientGone()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _BodyTooLarge()
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def _rollback(conn):
    try:
        await conn.rollback()
    except Exception:  # the connection is broken: the server has rolled back already
        pass


async def _restore_autocommit(conn, autocommit: bool):
    """Gives the connection back as it came: reserve_begin turned autocommit on."""
    if autocommit_to_restore(conn, autocommit):
        await conn.set_autocommit(autocommit)


class IdempotencyMiddleware:
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
    """

    def __init__(self, app, *, pool=None, conninfo=None, connect=None, scope=None, **options):
        self.app = app
        self.connect = connector(pool, conninfo, connect, _one_connection)
        self.pool = pool
        self.options = options_from(scope, **options)
        self.reserve_begin = None  # what the server offers, asked once; False once refused

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not self.options.applies_to(scope["method"],
                                                                   scope["path"]):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", [])}
        try:
            body = await _read_body(receive, self.options.max_body)
        except _BodyTooLarge:
            await _send_answer(send, BODY_TOO_LARGE)
            return
        except _ClientGone:
            return
        req = RequestInfo(scope["method"], scope["path"], headers, body, scope)
        try:
            id_scope, key, request_hash = self.options.identify(req)
            params = reserve_params(id_scope, key, request_hash,
                                    **self.options.reserve_options())
        except Exception as e:
            answer = answer_for(e)
            if answer is None:
                raise
            await _send_answer(send, answer)
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

        for tries in (1, 2):
            try:
                async with self.connect() as conn:
                    try:
                        check_encodable(conn, (("scope", id_scope), ("key", key)))
                    except KeyMalformed as e:  # the session's encoding cannot carry it: a 400
                        await _send_answer(send, answer_for(e))
                        return
                    autocommit = conn.autocommit
                    try:
                        await self._handle(conn, scope, replay_receive, send, id_scope, key,
                                           params)
                    finally:
                        await _restore_autocommit(conn, autocommit)
                return
            except StaleConnection as e:
                if tries == 1:
                    # The pool's other idle connections died with this one: check() drops
                    # them (one SELECT 1 each), so that the second try gets a live one.
                    log.warning("idempotency: a connection was lost before the claim, trying "
                                "another: %s", e.error)
                    if self.pool is not None and hasattr(self.pool, "check"):
                        await self.pool.check()
                    continue
                log.error("idempotency: the database is unreachable: %s", e.error)
            except psycopg.OperationalError as e:
                # Not reached once an answer went out: _handle answers every database error
                # after the connection was made itself.
                log.error("idempotency: the database is unreachable: %s", e)
            await _send_answer(send, DATABASE_UNAVAILABLE)
            return

    async def _reserve(self, conn, params):
        """reserve_begin where the connection allows it (one round trip, a transaction open
        after 'new' only), with autocommit on for the request so that psycopg sends no BEGIN
        of its own; otherwise BEGIN (psycopg's, or ours on an autocommit connection) + reserve."""
        if self.reserve_begin is None:  # the server's edition (the managed one has none)
            self.reserve_begin = (await edition_async(conn)).offers("reserve_begin")
        if self.reserve_begin and reserve_begin_usable(conn):
            autocommit = conn.autocommit
            await conn.set_autocommit(True)
            try:
                cur = await cursor_of(conn).execute(RESERVE_BEGIN_SQL, params)
                return reservation_of(await cur.fetchone())
            except psycopg.Error as e:
                if not reserve_begin_refused(e):
                    raise
                self.reserve_begin = False
            await conn.set_autocommit(autocommit)  # refused in autocommit: nothing is open
        if begin_needed(conn):
            await conn.execute("BEGIN")  # the claim, the work and the answer: one transaction
        cur = await cursor_of(conn).execute(RESERVE_SQL, params)
        return reservation_of(await cur.fetchone())

    async def _handle(self, conn, scope, receive, send, id_scope, key, params):
        opts = self.options
        try:
            reservation = await self._reserve(conn, params)
        except psycopg.Error as e:
            await _rollback(conn)
            if isinstance(e, psycopg.OperationalError):
                if conn.broken or conn.closed:
                    raise StaleConnection(e) from e
                raise
            raise translate(e) from e
        if reservation.outcome != "new":
            await _rollback(conn)  # nothing open after reserve_begin: no round trip
            if reservation.outcome == "replay":
                replay = replay_of(reservation.response)
                headers = headers_of_replay(opts, reservation.status_code, replay)
                await send({"type": "http.response.start", "status": reservation.status_code,
                            "headers": [(k.encode("latin-1"), v.encode("latin-1"))
                                        for k, v in headers.items()]})
                await send({"type": "http.response.body", "body": replay.body})
                return
            outcome = _OUTCOMES[reservation.outcome](id_scope, key, reservation,
                                                     reservation.outcome)
            await _send_answer(send, answer_for(outcome))
            return

        context = Context(conn, id_scope, key, reservation.attempt, reservation.recovery_point,
                          reservation)
        state = dict(scope.get("state") or {})
        state["idempotency"] = context
        inner_scope = {**scope, "state": state}
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

        try:
            await self.app(inner_scope, receive, hold)
        except BaseException:
            await _rollback(conn)             # nothing of the handler commits
            raise
        if not finished or "status" not in start:
            await _rollback(conn)
            raise RuntimeError("the application ended without a complete response")
        status, body = start["status"], b"".join(chunks)
        try:
            if opts.store(status):
                await psycopg.AsyncClientCursor(conn).execute(COMPLETE_COMMIT_SQL, (
                    id_scope, key, status,
                    Jsonb(stored_answer(body, start.get("headers", []), opts.keep_headers)),
                    reservation.attempt))
            else:
                await conn.rollback()
        except Exception as e:
            await _rollback(conn)
            log.error('idempotency: the answer to key "%s" was not stored: %s', key, e)
            await _send_answer(send, NOT_STORED)
            return
        await send({"type": "http.response.start", "status": status,
                    "headers": start.get("headers", []),
                    **({"trailers": start["trailers"]} if "trailers" in start else {})})
        await send({"type": "http.response.body", "body": body})


__all__ = ["IdempotencyMiddleware", "Context", "RequestInfo", "encode_json"]
