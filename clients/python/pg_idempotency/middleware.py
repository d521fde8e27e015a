"""The decision flow of the HTTP middlewares (asgi.py, wsgi.py, django.py), written once.

The flow is sans-I/O: `Flow.handle` is a generator that yields each operation it needs done as
a tuple (function, *arguments) and gets back the result, or has the exception thrown in.
`run` drives it with plain calls (WSGI, Django), `run_async` awaits what the calls return
(ASGI), so one flow serves psycopg's sync and async connections alike. What differs between
the database handles (a psycopg connection, sync or async; Django's connection) is a session
(`PsycopgSession` here, django.py's own): how a transaction begins, how the claim and the
stored answer are sent, how a lost connection shows. The adapters only read the request, run
the application, and send what the flow returns.

The flow of a request:
- the key, the scope and the fingerprint (a 400 for a malformed one), reserve's parameters;
- a connection; none to be had: 503. A key or scope the session's encoding cannot carry: 400;
- the claim: reserve_begin where the server offers it (its edition, asked once: the managed
  edition has none) and the session allows it (one round trip, a transaction opened for the
  outcome 'new' only), else BEGIN + reserve; a server that refuses reserve_begin gets BEGIN +
  reserve from then on. A connection that breaks on the claim (one that died while
  idle in a pool) is given up and the request tried once more on another: the claim commits
  nothing; a second break, or none to be had: 503. Another error of the claim is the
  application's (typed: errors.translate), after a rollback;
- an outcome other than 'new': rolled back, answered (a replay, 409, 422);
- 'new': the application runs inside the claim's transaction; its answer is held back. One to
  store: complete + COMMIT, and the answer goes out once they returned (500 if they failed);
  one not to store (by default 500 and above): rolled back with the claim, and sent. An
  application that raises, or ends without an answer: rolled back, and the error goes on.

The statement form (the statement= option): instead of the claim and the application, one call
of idempotency.execute_once in autocommit (one round trip for a new key and for a replay)
answers: a new key with the statement's result as the JSON body and the `status` option, the
other outcomes as above. An error of the statement (or a server without execute_once, named in
the log) is a 500 with nothing stored: the key stays new.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import logging
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from . import statements
from .versions import missing_from_server
from .connection import (autocommit_to_restore, begin_needed, check_encodable, cursor_of,
                         reserve_begin_usable)
from .errors import KeyInProgress, KeyMalformed, KeyMismatch, KeyTooOld, translate
from .keys import execute_once_params, reservation_of, reserve_begin_refused, reserve_params
from .versions import edition, edition_async
from .web import (DATABASE_UNAVAILABLE, NOT_STORED, Answer, Context, RequestInfo, answer_for,
                  headers_of_replay, options_from, replay_of, stored_answer)

log = logging.getLogger("pg_idempotency")

# The reserve outcomes answered without running the application.
_OUTCOMES = {"in_progress": KeyInProgress, "mismatch": KeyMismatch, "too_old": KeyTooOld}


@dataclasses.dataclass
class Outgoing:
    """An answer as an adapter sends it: the status, (name, value) header pairs, the body's
    bytes, and for the application's own answer `native`, what the adapter needs to send it as
    the application gave it (the ASGI start message, the WSGI status line, Django's
    HttpResponse)."""
    status: int
    headers: Any
    body: bytes
    native: Any = None


def outgoing(answer) -> Outgoing:
    """What the flow returned, as an Outgoing: one of the middleware's own answers (a JSON
    problem) made one; a replay or the application's answer as they are."""
    if isinstance(answer, Answer):
        body = answer.encoded()
        return Outgoing(answer.status, [("Content-Type", "application/json"),
                                        ("Content-Length", str(len(body))),
                                        *((k, str(v)) for k, v in answer.headers.items())], body)
    return answer


class StaleConnection(Exception):
    """The connection broke on the claim, its first statement (a pooled connection that died
    while idle: the server restarted, the backend was terminated). The claim commits nothing
    (a new key's transaction stays open for the application), so the request may be tried
    again on another connection."""

    def __init__(self, error):
        super().__init__(str(error))
        self.error = error


class BodyTooLarge(Exception):
    """A request body over max_body: answered 413 (BODY_TOO_LARGE) before anything runs."""


# ---- the drivers: they run the operations a flow yields ----

class _Done:
    def __init__(self, value):
        self.value = value


def _advance(steps, reply=None, error=None):
    """The next operation of steps, given the last one's result or exception; _Done with the
    flow's return value at its end."""
    try:
        return steps.send(reply) if error is None else steps.throw(error)
    except StopIteration as stop:
        return _Done(stop.value)


def _call(op):
    try:
        return op[0](*op[1:]), None
    except BaseException as e:  # thrown into the flow, which rolls back and raises it again
        return None, e


async def _call_async(op):
    try:
        result = op[0](*op[1:])
        return (await result if inspect.isawaitable(result) else result), None
    except BaseException as e:
        return None, e


def run(steps):
    """Runs a flow whose operations are plain calls (a sync connection, WSGI, Django)."""
    op = _advance(steps)
    while not isinstance(op, _Done):
        op = _advance(steps, *_call(op))
    return op.value


async def run_async(steps):
    """Runs a flow whose operations may return awaitables (an async connection, ASGI)."""
    op = _advance(steps)
    while not isinstance(op, _Done):
        op = _advance(steps, *await _call_async(op))
    return op.value


# ---- the flow ----

def going_away(sqlstate) -> bool:
    """Class 08 (connection exceptions) or 57P01-57P03 (the server shutting down, crashed, or
    not yet accepting connections): the connection is gone, not the statement refused."""
    return sqlstate is not None and (sqlstate.startswith("08") or
                                     sqlstate in ("57P01", "57P02", "57P03"))


class Flow:
    """The middlewares' common part: the options, whether the server still takes
    reserve_begin, and the flow of a request (handle)."""

    def __init__(self, scope=None, **options):
        self.options = options_from(scope, **options)
        # None: not known yet (the server's edition, asked on the first claim that could use
        # it: the managed edition has none); False once the server refused it
        # (reserve_begin_refused)
        self.reserve_begin = None

    def over_limit(self, size: int):
        """BodyTooLarge for a body of `size` bytes over max_body."""
        if size > self.options.max_body:
            raise BodyTooLarge()

    def handle(self, req: RequestInfo, session, run_app):
        """The flow of one request whose body was read (a generator: see the module's
        docstring). run_app(context) runs the application with the claim's Context and
        returns its answer (an Outgoing, held back), or None if it ended without a complete
        one. Returns an Answer, or an Outgoing (a replay, the application's answer) to send."""
        opts = self.options
        on_connection = self._on_connection
        try:
            scope, key, request_hash = opts.identify(req)
            if opts.statement is not None:
                on_connection = self._on_connection_statement
                params = execute_once_params(scope, key, request_hash, opts.statement,
                                             opts.statement_params(req), opts.status,
                                             **opts.reserve_options())
            else:
                params = reserve_params(scope, key, request_hash, **opts.reserve_options())
        except Exception as e:
            answer = answer_for(e)
            if answer is None:
                raise
            return answer
        for tries in (1, 2):
            try:
                yield from session.open()
            except Exception as e:
                if not session.unreachable(e):
                    raise
                log.error("idempotency: the database is unreachable: %s", e)
                return DATABASE_UNAVAILABLE
            try:
                answer = yield from on_connection(session, scope, key, params, run_app)
            except BaseException as e:
                yield from session.close(e)
                if not isinstance(e, StaleConnection):
                    raise
                stale = e
            else:
                yield from session.close(None)
                return answer
            if tries == 1 and (yield from session.recover()):
                log.warning("idempotency: a connection was lost before the claim, trying "
                            "another: %s", stale.error)
                continue
            log.error("idempotency: the database is unreachable: %s", stale.error)
            return DATABASE_UNAVAILABLE

    def _on_connection(self, session, scope, key, params, run_app):
        opts = self.options
        try:
            session.check_encodable((("scope", scope), ("key", key)))
        except KeyMalformed as e:  # the session's encoding cannot carry it: a 400
            return answer_for(e)
        try:
            reservation = yield from self._claim(session, params)
        except BaseException as e:
            yield from session.rollback(e)
            if session.lost(e):
                raise StaleConnection(e) from e
            typed = session.translate(e)
            if typed is e:
                raise
            raise typed from e
        if reservation.outcome != "new":
            yield from session.rollback()  # nothing open after reserve_begin: no round trip
            if reservation.outcome == "replay":
                replay = replay_of(reservation.response)
                headers = headers_of_replay(opts, reservation.status_code, replay)
                return Outgoing(reservation.status_code, list(headers.items()), replay.body)
            return answer_for(_OUTCOMES[reservation.outcome](scope, key, reservation,
                                                             reservation.outcome))

        context = Context(session.handle, scope, key, reservation.attempt,
                          reservation.recovery_point, reservation)
        try:
            held = yield (run_app, context)
            if held is None:
                raise RuntimeError("the application ended without a complete response")
        except BaseException as e:
            yield from session.rollback(e)      # nothing of the application commits
            raise
        if not opts.store(held.status):
            yield from session.rollback()       # sent, not stored: the retry starts afresh
            return held
        try:
            yield from session.complete_commit((
                scope, key, held.status,
                stored_answer(held.body, held.headers, opts.keep_headers), reservation.attempt))
        except BaseException as e:
            yield from session.rollback(e)
            if not isinstance(e, Exception):
                raise
            log.error('idempotency: the answer to key "%s" was not stored: %s', key, e)
            return NOT_STORED
        return held

    def _on_connection_statement(self, session, scope, key, params, run_app):
        """The statement form: execute_once answers; the application does not run."""
        opts = self.options
        try:
            session.check_encodable((("scope", scope), ("key", key)))
        except KeyMalformed as e:
            return answer_for(e)
        try:
            reservation = yield from session.execute_once(params)
        except BaseException as e:
            yield from session.rollback(e)
            if session.lost(e):
                raise StaleConnection(e) from e
            if not isinstance(e, Exception):
                raise
            missing = missing_from_server(e) or missing_from_server(e.__cause__)
            if missing is not None:
                log.error("idempotency: the statement form needs idempotency.execute_once: %s",
                          missing)
            else:
                log.error('idempotency: the statement for key "%s" failed, nothing is stored: '
                          "%s", key, e)
            return NOT_STORED
        if reservation.outcome in _OUTCOMES:
            return answer_for(_OUTCOMES[reservation.outcome](scope, key, reservation,
                                                             reservation.outcome))
        # The first answer has the body and headers its replays send (a JSON body; none for
        # a statement without a row), without Idempotent-Replayed and replay_headers.
        replay = replay_of(reservation.response)
        if reservation.outcome == "replay":
            headers = headers_of_replay(opts, reservation.status_code, replay)
        else:
            headers = {**replay.headers, "content-length": str(len(replay.body))}
        return Outgoing(reservation.status_code, list(headers.items()), replay.body)

    def _claim(self, session, params):
        """reserve_begin where the server offers it and the session allows it, otherwise
        BEGIN + reserve."""
        if self.reserve_begin is None and session.reserve_begin_usable():
            self.reserve_begin = (yield from session.edition()).offers("reserve_begin")
        if self.reserve_begin and session.reserve_begin_usable():
            try:
                return (yield from session.reserve_begin(params))
            except Exception as e:
                if not reserve_begin_refused(e):
                    raise
                self.reserve_begin = False
            yield from session.after_refusal()
        yield from session.begin()
        return (yield from session.reserve(params))


# ---- psycopg connections, sync and async ----

def connector(pool, conninfo, connect, one_connection):
    """The one of pool= / conninfo= / connect= given, as a callable of no argument returning
    a context manager (sync or async) that yields a connection; one_connection(conninfo) makes
    that callable for a connection string."""
    if sum(x is not None for x in (pool, conninfo, connect)) != 1:
        raise TypeError("the idempotency middleware needs one of pool=, conninfo=, connect=")
    if pool is not None:
        return pool.connection
    return connect if connect is not None else one_connection(conninfo)


class _OneConnection:
    """conninfo=: a connection of its own for each request, opened on entry and closed on
    exit (with or without await)."""

    def __init__(self, cls, conninfo):
        self.cls, self.conninfo, self.conn = cls, conninfo, None

    def __enter__(self):
        self.conn = self.cls.connect(self.conninfo)
        return self.conn

    def __exit__(self, *exc):
        self.conn.close()

    async def __aenter__(self):
        self.conn = await self.cls.connect(self.conninfo)
        return self.conn

    async def __aexit__(self, *exc):
        await self.conn.close()


class PsycopgFlow(Flow):
    """The flow on psycopg connections: from a pool (psycopg_pool's ConnectionPool or
    AsyncConnectionPool), a connection string (conninfo=) or a callable returning a context
    manager that yields a connection (connect=); `asynchronous` says which kind."""

    def __init__(self, *, pool=None, conninfo=None, connect=None, asynchronous=False,
                 **options):
        cls = psycopg.AsyncConnection if asynchronous else psycopg.Connection
        self.connect = connector(pool, conninfo, connect,
                                 lambda info: functools.partial(_OneConnection, cls, info))
        super().__init__(**options)
        self.pool = pool
        self.asynchronous = asynchronous

    def session(self):
        return PsycopgSession(self.connect, self.pool, self.asynchronous)


class PsycopgSession:
    """One request's psycopg connection, as the flow's operations. reserve_begin runs with
    autocommit on, so that psycopg sends no BEGIN of its own; the connection goes back with the
    autocommit setting it came with. An autocommit connection gets a BEGIN of ours before
    reserve, so that the claim, the work and the answer are one transaction."""

    def __init__(self, connect, pool, asynchronous):
        self.connect, self.pool, self.asynchronous = connect, pool, asynchronous
        self.stack = contextlib.AsyncExitStack() if asynchronous else contextlib.ExitStack()
        self.conn = self.handle = None  # the handle: the application's Context.conn
        self.autocommit = False

    def open(self):
        enter = (self.stack.enter_async_context if self.asynchronous
                 else self.stack.enter_context)
        self.conn = self.handle = yield (enter, self.connect())
        self.autocommit = self.conn.autocommit

    def close(self, error):
        if autocommit_to_restore(self.conn, self.autocommit):
            yield self._set_autocommit(self.autocommit)
        leave = self.stack.__aexit__ if self.asynchronous else self.stack.__exit__
        yield (leave, type(error) if error is not None else None, error,
               getattr(error, "__traceback__", None))

    def unreachable(self, error) -> bool:
        """Whether an error of open() means no connection could be had (a refused or failed
        connect, a pool's timeout)."""
        return isinstance(error, psycopg.OperationalError)

    def recover(self):
        """Whether to try again after the claim lost its connection: yes, once the pool's
        other idle connections, which died with this one, are dropped (check(): one SELECT 1
        each), so that the second try gets a live one."""
        if self.pool is not None and hasattr(self.pool, "check"):
            yield (self.pool.check,)
        return True

    def check_encodable(self, names):
        check_encodable(self.conn, names)

    def lost(self, error) -> bool:
        return isinstance(error, psycopg.OperationalError) and (
            self.conn.broken or self.conn.closed or going_away(error.sqlstate))

    @staticmethod
    def translate(error):
        return translate(error) if isinstance(error, psycopg.Error) else error

    def _set_autocommit(self, value):
        if self.asynchronous:
            return (self.conn.set_autocommit, value)
        return (setattr, self.conn, "autocommit", value)

    def reserve_begin_usable(self) -> bool:
        return reserve_begin_usable(self.conn)

    def edition(self):
        """The server's edition, asked on this connection (once per connection object)."""
        return (yield (edition_async if self.asynchronous else edition, self.conn))

    def reserve_begin(self, params):
        yield self._set_autocommit(True)
        return (yield from self._fetch(statements.RESERVE_BEGIN, params))

    def after_refusal(self):
        yield self._set_autocommit(self.autocommit)  # refused in autocommit: nothing is open

    def begin(self):
        if begin_needed(self.conn):
            yield (self.conn.execute, statements.BEGIN)

    def reserve(self, params):
        return (yield from self._fetch(statements.RESERVE, params))

    def execute_once(self, params):
        """execute_once in autocommit: one round trip (the connection goes back with its own
        autocommit setting). One that sets an isolation level, read-only or deferrable mode, or
        is in pipeline mode: in a transaction of psycopg's, which carries them."""
        if self.reserve_begin_usable():
            yield self._set_autocommit(True)
            return (yield from self._fetch(statements.EXECUTE_ONCE, params))
        yield from self.begin()
        reservation = yield from self._fetch(statements.EXECUTE_ONCE, params)
        yield (self.conn.commit,)
        return reservation

    def _fetch(self, sql, params):
        cur = yield (cursor_of(self.conn).execute, sql, params)
        return reservation_of((yield (cur.fetchone,)), cur)

    def rollback(self, error=None):
        try:
            yield (self.conn.rollback,)
        except Exception:  # the connection is broken: the server has rolled back already
            pass

    def complete_commit(self, params):
        """complete and COMMIT in one simple query (a client-side cursor): one round trip."""
        cursor = psycopg.AsyncClientCursor if self.asynchronous else psycopg.ClientCursor
        scope, key, status, stored, attempt = params
        yield (cursor(self.conn).execute, statements.COMPLETE_COMMIT,
               (scope, key, status, Jsonb(stored), attempt))
