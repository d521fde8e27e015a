"""The decision flow (flow.py) on psycopg connections, sync and async: the session of one
request's connection, from a pool, a connection string or a callable."""
from __future__ import annotations

import contextlib
import functools

import psycopg
from psycopg.types.json import Jsonb

from . import statements
from .connection import (autocommit_to_restore, begin_needed, check_encodable, cursor_of,
                         pipelined, pipelined_async, reserve_begin_usable, transaction_idle)
from .observe import note_round_trip
from .errors import translate
from .flow import Flow
from .keys import reservation_of
from .sessions import going_away
from .versions import edition, edition_async


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
            note_round_trip()
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
        note_round_trip()
        yield (self.conn.commit,)
        return reservation

    def _fetch(self, sql, params):
        note_round_trip()
        cur = yield (cursor_of(self.conn).execute, sql, params)
        return reservation_of((yield (cur.fetchone,)), cur)

    def rollback(self, error=None):
        if not transaction_idle(self.conn):  # psycopg sends nothing with none open
            note_round_trip()
        try:
            yield (self.conn.rollback,)
        except Exception:  # the connection is broken: the server has rolled back already
            pass

    def complete_commit(self, params):
        """complete and COMMIT in one round trip, the values bound (pipelined)."""
        scope, key, status, stored, attempt = params
        run = pipelined_async if self.asynchronous else pipelined
        yield (run, self.conn, ((statements.COMPLETE, (scope, key, status, Jsonb(stored),
                                                       attempt)),
                                (statements.COMMIT, None)))
