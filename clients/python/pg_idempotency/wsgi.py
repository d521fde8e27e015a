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

import contextlib
import io
import logging
from http import HTTPStatus

import psycopg
from psycopg.types.json import Jsonb

from .client import (COMPLETE_COMMIT_SQL, RESERVE_BEGIN_SQL, autocommit_to_restore,
                     begin_needed, check_encodable, execute, reservation_of, reserve,
                     reserve_begin_refused, reserve_begin_usable, reserve_params)
from .errors import KeyInProgress, KeyMalformed, KeyMismatch, KeyTooOld, check_names
from .versions import edition
from .web import (BODY_TOO_LARGE, DATABASE_UNAVAILABLE, NOT_STORED, Answer, Context,
                  RequestInfo, StaleConnection, answer_for, connector, headers_of_replay,
                  options_from, replay_of, stored_answer)

log = logging.getLogger("pg_idempotency")

_OUTCOMES = {"in_progress": KeyInProgress, "mismatch": KeyMismatch, "too_old": KeyTooOld}


def _status_line(status: int) -> str:
    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        return f"{status} Unknown"


def _answer(start_response, answer: Answer, extra=None):
    body = answer.encoded()
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    headers += [(k, str(v)) for k, v in {**answer.headers, **(extra or {})}.items()]
    start_response(_status_line(answer.status), headers)
    return [body]


def _one_connection(conninfo):
    @contextlib.contextmanager
    def one_connection():
        conn = psycopg.connect(conninfo)
        try:
            yield conn
        finally:
            conn.close()
    return one_connection


def _rollback(conn):
    try:
        conn.rollback()
    except Exception:  # the connection is broken: the server has rolled back already
        pass


def _restore_autocommit(conn, autocommit: bool):
    """Gives the connection back as it came: reserve_begin turned autocommit on."""
    if autocommit_to_restore(conn, autocommit):
        conn.autocommit = autocommit


def _headers_of(environ) -> dict:
    headers = {k[5:].replace("_", "-").lower(): v for k, v in environ.items()
               if k.startswith("HTTP_")}
    for name in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        if environ.get(name):
            headers[name.replace("_", "-").lower()] = environ[name]
    return headers


class _BodyTooLarge(Exception):
    pass


def _read_body(environ, limit: int) -> bytes:
    stream = environ.get("wsgi.input")
    if stream is None:
        return b""
    length = environ.get("CONTENT_LENGTH") or ""
    if length.strip().isdigit():
        if int(length) > limit:
            raise _BodyTooLarge()
        return stream.read(int(length)) if int(length) else b""
    if not environ.get("wsgi.input_terminated"):
        return b""  # no length and an unterminated stream: WSGI allows no read
    body = stream.read(limit + 1)
    if len(body) > limit:
        raise _BodyTooLarge()
    return body


class IdempotencyMiddleware:
    def __init__(self, app, *, pool=None, conninfo=None, connect=None, scope=None, **options):
        self.app = app
        self.connect = connector(pool, conninfo, connect, _one_connection)
        self.pool = pool
        self.options = options_from(scope, **options)
        self.reserve_begin = None  # what the server offers, asked once; False once refused

    def __call__(self, environ, start_response):
        method, path = environ.get("REQUEST_METHOD", "GET"), environ.get("PATH_INFO", "")
        if not self.options.applies_to(method, path):
            return self.app(environ, start_response)
        try:
            body = _read_body(environ, self.options.max_body)
        except _BodyTooLarge:
            return _answer(start_response, BODY_TOO_LARGE)
        environ["wsgi.input"] = io.BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))
        req = RequestInfo(method, path, _headers_of(environ), body, environ)
        try:
            id_scope, key, request_hash = self.options.identify(req)
            check_names(id_scope, key)
        except Exception as e:
            answer = answer_for(e)
            if answer is None:
                raise
            return _answer(start_response, answer)
        for tries in (1, 2):
            try:
                with self.connect() as conn:
                    try:
                        check_encodable(conn, (("scope", id_scope), ("key", key)))
                    except KeyMalformed as e:  # the session's encoding cannot carry it: a 400
                        return _answer(start_response, answer_for(e))
                    autocommit = conn.autocommit
                    try:
                        return self._handle(conn, environ, start_response, id_scope, key,
                                            request_hash)
                    finally:
                        _restore_autocommit(conn, autocommit)
            except StaleConnection as e:
                if tries == 1:
                    # The pool's other idle connections died with this one: check() drops
                    # them (one SELECT 1 each), so that the second try gets a live one.
                    log.warning("idempotency: a connection was lost before the claim, trying "
                                "another: %s", e.error)
                    if self.pool is not None and hasattr(self.pool, "check"):
                        self.pool.check()
                    continue
                log.error("idempotency: the database is unreachable: %s", e.error)
            except psycopg.OperationalError as e:
                log.error("idempotency: the database is unreachable: %s", e)
            return _answer(start_response, DATABASE_UNAVAILABLE)

    def _reserve(self, conn, id_scope, key, request_hash):
        """reserve_begin where the connection allows it (one round trip, a transaction open
        after 'new' only), with autocommit on for the request so that psycopg sends no BEGIN
        of its own; otherwise BEGIN (psycopg's, or ours on an autocommit connection) + reserve."""
        opts = self.options.reserve_options()
        if self.reserve_begin is None:  # the server's edition (the managed one has none)
            self.reserve_begin = edition(conn).offers("reserve_begin")
        if self.reserve_begin and reserve_begin_usable(conn):
            autocommit = conn.autocommit
            conn.autocommit = True
            try:
                return reservation_of(execute(
                    conn, RESERVE_BEGIN_SQL, reserve_params(id_scope, key, request_hash, **opts)
                ).fetchone())
            except Exception as e:
                if not reserve_begin_refused(e):
                    raise
                self.reserve_begin = False
            conn.autocommit = autocommit  # refused in autocommit: no transaction is open
        if begin_needed(conn):
            execute(conn, "BEGIN")  # the claim, the work and the answer: one transaction
        return reserve(conn, id_scope, key, request_hash, **opts)

    def _handle(self, conn, environ, start_response, id_scope, key, request_hash):
        opts = self.options
        try:
            reservation = self._reserve(conn, id_scope, key, request_hash)
        except psycopg.OperationalError as e:
            _rollback(conn)
            if conn.broken or conn.closed:
                raise StaleConnection(e) from e
            raise
        except BaseException:
            _rollback(conn)
            raise
        if reservation.outcome != "new":
            _rollback(conn)  # nothing open after reserve_begin: no round trip
            if reservation.outcome == "replay":
                replay = replay_of(reservation.response)
                headers = headers_of_replay(opts, reservation.status_code, replay)
                start_response(_status_line(reservation.status_code), list(headers.items()))
                return [replay.body]
            outcome = _OUTCOMES[reservation.outcome](id_scope, key, reservation,
                                                     reservation.outcome)
            return _answer(start_response, answer_for(outcome))

        environ["idempotency"] = Context(conn, id_scope, key, reservation.attempt,
                                         reservation.recovery_point, reservation)
        held = {}

        def hold(status, headers, exc_info=None):
            held["status"], held["headers"] = status, headers
            return lambda data: held.setdefault("written", []).append(data)

        try:
            result = self.app(environ, hold)
            try:
                body = b"".join([*held.get("written", []), *result])
            finally:
                if hasattr(result, "close"):
                    result.close()
        except BaseException:
            _rollback(conn)                   # nothing of the handler commits
            raise
        status = int(held["status"].split(" ", 1)[0])
        try:
            if opts.store(status):
                psycopg.ClientCursor(conn).execute(COMPLETE_COMMIT_SQL, (
                    id_scope, key, status,
                    Jsonb(stored_answer(body, held["headers"], opts.keep_headers)),
                    reservation.attempt))
            else:
                conn.rollback()
        except Exception as e:
            _rollback(conn)
            log.error('idempotency: the answer to key "%s" was not stored: %s', key, e)
            return _answer(start_response, NOT_STORED)
        start_response(held["status"], held["headers"])
        return [body]


__all__ = ["IdempotencyMiddleware", "Context", "RequestInfo"]
