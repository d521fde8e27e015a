"""The decision flow (flow.py) on Django's own database connection: the session of one
request, in which the claim, the view's ORM writes and the stored answer are one
transaction.atomic. Its statements bind their values (libpq_bound), on Django's psycopg2
connection as on any other."""
from __future__ import annotations

import json
import types

from django.db import DatabaseError, connections, transaction

from . import statements
from .connection import check_encodable
from .keys import Reservation
from .libpq_bound import execute_row
from .observe import note_round_trip
from .sessions import going_away


class _Rollback(Exception):
    """Leaves transaction.atomic with a rollback."""


_IDLE = 0                                 # psycopg2's TRANSACTION_STATUS_IDLE


def _transaction_status(raw) -> int:
    """The transaction status of Django's driver connection (psycopg2's or psycopg's)."""
    if hasattr(raw, "get_transaction_status"):
        return raw.get_transaction_status()
    return raw.info.transaction_status


# Django's PostgreSQL backend sets client_encoding to UTF8 on every connection it makes.
_UTF8_SESSION = types.SimpleNamespace(info=types.SimpleNamespace(encoding="utf-8"))


class DjangoSession:
    """One request on Django's connection `alias`, as the flow's operations: the claim, the
    view's ORM writes and the stored answer are one transaction.atomic (BEGIN, reserve, the
    view, complete, COMMIT), nested as a savepoint in one the request is already in. Django's
    backend reads jsonb as its text."""

    def __init__(self, alias):
        self.alias = alias
        self.db = self.handle = connections[alias]  # the handle: the view's Context.conn
        self.atomic = None
        self.connected = False

    def open(self):
        # Whether the connection was made before this request: one that breaks on the claim
        # then died while idle, and the request is tried again on a new one.
        self.connected = self.db.connection is not None
        return
        yield  # (a generator of no operation)

    def close(self, error):
        return
        yield

    @staticmethod
    def unreachable(error) -> bool:
        return False                      # open() sends nothing

    def recover(self):
        """Whether to try again after the claim lost the connection: if it was made before
        (`connected`), it broke while idle, and it is closed so that the next statement
        connects anew. (psycopg2 does not always mark such a connection closed, and the claim
        committed nothing, so it is not asked first.) A connection made for this request that
        failed: the database is unreachable."""
        if not self.connected:
            return False
        # Closed inside the failed atomic block, Django keeps the dead connection object until
        # a later close(), which returns early while closed_in_transaction is set.
        self.db.closed_in_transaction = False
        self.db.needs_rollback = False
        yield (self.db.close,)
        self.db.connection = None
        return True

    @staticmethod
    def check_encodable(names):
        check_encodable(_UTF8_SESSION, names)

    @staticmethod
    def lost(error) -> bool:
        """Whether the error is a lost connection: no SQLSTATE (nothing came back; psycopg2
        raises some of those as a bare DatabaseError), or the server going away."""
        if not isinstance(error, DatabaseError):
            return False
        code = (getattr(error.__cause__, "pgcode", None) or
                getattr(error.__cause__, "sqlstate", None))
        return code is None or going_away(code)

    @staticmethod
    def translate(error):
        return error

    @staticmethod
    def reserve_begin_usable() -> bool:
        return False                      # Django's transaction: atomic opens it

    def begin(self):
        if self.db.in_atomic_block:      # inside the request's own atomic: a SAVEPOINT
            note_round_trip()
        atomic = transaction.atomic(using=self.alias)
        yield (atomic.__enter__,)
        self.atomic = atomic

    def reserve(self, params):
        row = yield from self._execute(statements.RESERVE, params)
        response = None if row[2] is None else json.loads(row[2])
        return Reservation(str(row[0]), row[1], response, *row[3:])

    def execute_once(self, params):
        """execute_once on Django's connection: in autocommit (one round trip) outside an
        atomic block, inside the request's transaction in one."""
        row = yield from self._execute(statements.EXECUTE_ONCE, params)
        response = None if row[2] is None else json.loads(row[2])
        return Reservation(str(row[0]), row[1], response, *row[3:])

    def _execute(self, sql, params):
        """sql's first row, its values bound (libpq_bound: psycopg2 would write them into the
        text). psycopg2 opens a transaction before its next statement, not at atomic's
        __enter__; it must open this one (it sends COMMIT and ROLLBACK only for a transaction it
        opened), so a value-free statement through it comes first when it has not yet."""
        yield (self.db.ensure_connection,)
        raw = self.db.connection
        if not hasattr(raw, "pgconn_ptr"):      # psycopg 3 (Django 4.2+): its own binding
            # psycopg sends its BEGIN apart, before the first statement of a transaction
            note_round_trip(2 if raw.info.transaction_status == _IDLE and not raw.autocommit
                            else 1)
            cursor = yield (self.db.cursor,)
            with cursor:
                yield (cursor.execute, sql, params)
                return (yield (cursor.fetchone,))
        if raw.get_transaction_status() == _IDLE and not self.db.get_autocommit():
            note_round_trip(2)                # psycopg2's BEGIN, then the statement
            cursor = yield (self.db.cursor,)
            with cursor:
                yield (cursor.execute, statements.NOTHING)
        note_round_trip()
        return (yield (self._bound, sql, params))

    def _bound(self, sql, params):
        self.db.validate_no_broken_transaction()
        with self.db.wrap_database_errors:
            return execute_row(self.db.connection, sql, params)

    def rollback(self, error=None):
        atomic, self.atomic = self.atomic, None
        if atomic is not None:
            raw = self.db.connection
            if raw is not None and not raw.closed and _transaction_status(raw) != _IDLE:
                note_round_trip()             # ROLLBACK (or ROLLBACK TO SAVEPOINT)
            error = error if error is not None else _Rollback()
            yield (atomic.__exit__, type(error), error, error.__traceback__)

    def complete_commit(self, params):
        scope, key, status, stored, attempt = params
        yield from self._execute(statements.COMPLETE, (scope, key, status, json.dumps(stored), attempt))
        atomic, self.atomic = self.atomic, None
        note_round_trip()
        yield (atomic.__exit__, None, None, None)  # COMMIT (or RELEASE SAVEPOINT)
