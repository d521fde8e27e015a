"""The connection layer: the one module of the client that touches psycopg and libpq beyond
running a statement. It checks that a connection is usable and that a text can be sent in the
session's encoding, runs statements with errors translated to the typed exceptions of
errors.py (a broken connection as ConnectionLost), reads json texts in the session's encoding,
and sends a transaction's first or last two statements in one round trip, every value bound
(psycopg's pipeline mode).

Tested with Debian's python3-psycopg 3.1.7 (its pure-Python implementation over the system's
libpq5). Besides psycopg's documented API (connections, cursors, pipelines, conn.info,
adapters) it uses conn.pgconn (the libpq connection): pipeline_status and parameter_status
(PQparameterStatus).

TESTED_PSYCOPG lists the versions; tests/test_connection.py fails, naming the internal, when
the installed psycopg lacks one of them (missing_internals), and when it is not a version of
TESTED_PSYCOPG (run the test, then add the version).
"""
from __future__ import annotations

import contextlib
import json
from typing import Callable, Optional

import psycopg
from psycopg.adapt import Loader
from psycopg.pq import Format, TransactionStatus

from . import statements as sql
from .errors import (KeyUntranslatable, TransactionAborted, UntranslatableCharacter,
                     lost_connection, translate)
from .observe import note_round_trip

TESTED_PSYCOPG = ("3.1.7",)


def missing_internals(conn) -> list:
    """The names of what this module uses beyond psycopg's documented API that conn's psycopg
    does not have (empty when all is there)."""
    checks = (
        ("psycopg.Connection.pgconn", lambda: conn.pgconn),
        ("psycopg.pq.PGconn.pipeline_status", lambda: conn.pgconn.pipeline_status),
        ("psycopg.pq.PGconn.parameter_status", lambda: conn.pgconn.parameter_status),
    )
    missing = []
    for name, get in checks:
        try:
            get()
        except AttributeError:
            missing.append(name)
    return missing


# ---- usability and encodings ----

def check_usable(conn: psycopg.Connection):
    if conn.info.transaction_status == TransactionStatus.INERROR:
        raise TransactionAborted(
            "the connection is inside a failed transaction",
            hint="roll the transaction back before calling the idempotency helpers")


@contextlib.contextmanager
def guard(conn):
    """A connection that breaks inside the block comes out as ConnectionLost (psycopg raises
    OperationalError; nothing in psycopg can end the process)."""
    try:
        yield
    except psycopg.OperationalError as e:
        lost = lost_connection(conn, e)
        if lost is None or lost is e:
            raise
        raise lost from e


def check_encodable(conn, names=(), values=()):
    """Refuses, before anything is sent, a text that holds a NUL or that the session's
    client_encoding cannot carry as it is: names are (what, value) pairs of a scope and key
    (KeyUntranslatable, a 400), values of other texts (UntranslatableCharacter). The encoding
    is the one libpq last heard from the server (its ParameterStatus follows SET
    client_encoding), the one psycopg encodes parameters with and PQescapeLiteral escapes for.
    A text must encode and decode back to itself: Python's EUC_JP and SJIS codecs send U+00A5
    as 0x5C, a backslash to the server, and two different keys would then be one."""
    codec = conn.info.encoding
    for kind, pairs in ((KeyUntranslatable, names), (UntranslatableCharacter, values)):
        for what, value in pairs:
            if not isinstance(value, str):
                continue
            if "\0" in value:
                message = f"the {what} holds a NUL character, which no PostgreSQL text can hold"
                hint = None
            else:
                try:
                    if value.encode(codec).decode(codec) == value:
                        continue
                except UnicodeError:
                    pass
                message = (f"the {what} holds a character that the session's client_encoding "
                           f"({conn.pgconn.parameter_status(b'client_encoding').decode()}) "
                           "cannot carry as it is")
                hint = ("use UTF8 as the client_encoding, or texts of the encoding's own "
                        "characters")
            if kind is KeyUntranslatable:
                err = kind(f"idempotency_{what}_malformed", message)
                err.hint = hint
                raise err
            raise kind(message, hint=hint)


# ---- json in the session's encoding ----

class _SessionJsonLoader(Loader):
    """json / jsonb as text in the session's encoding: psycopg 3.1's own loader hands the bytes
    to json.loads, which reads them as UTF-8 (a stored response with non-ASCII text came back
    as other characters, or failed, on an EUC_JP or SJIS session)."""

    def __init__(self, oid, context=None):
        super().__init__(oid, context)
        self._codec = self.connection.info.encoding if self.connection else "utf-8"

    def load(self, data):
        return json.loads(bytes(data).decode(self._codec))


def cursor_of(conn):
    """A cursor of conn (sync or async) whose json and jsonb values are read in the session's
    encoding; on a UTF8 session, conn's own."""
    cur = conn.cursor()
    if conn.info.encoding != "utf-8":
        for name in ("json", "jsonb"):
            cur.adapters.register_loader(name, _SessionJsonLoader)
    return cur


def load_json(cur, text):
    """A json text that the server wrote (a jsonb column read as ::text, decoded by psycopg in
    the session's encoding) as the jsonb loader of cur would have loaded the column: on a UTF8
    session the connection's own (json.loads, or what psycopg.types.json.set_json_loads set),
    elsewhere json.loads of the text (_SessionJsonLoader). None for NULL; without a cursor,
    json.loads."""
    if text is None:
        return None
    if cur is None or cur.connection.info.encoding != "utf-8":
        return json.loads(text)
    oid = cur.adapters.types["jsonb"].oid
    loader = cur.adapters.get_loader(oid, Format.TEXT)
    if loader is None:
        return json.loads(text)
    return loader(oid, cur).load(text.encode("utf-8"))


# ---- statements ----

def execute(conn: psycopg.Connection, query: str, params=()):
    """Runs one statement; psycopg errors come out as the typed exceptions of errors.py
    (ConnectionLost for a connection that broke)."""
    check_usable(conn)
    note_round_trip()
    try:
        return cursor_of(conn).execute(query, params)
    except psycopg.Error as e:
        raise (lost_connection(conn, e) or translate(e)) from e


def register_types(conn: psycopg.Connection):
    """Loads idempotency.reservation values as Reservation in this connection (for queries
    of your own, such as SELECT idempotency.reserve(...)); the enum outcome loads as str."""
    from psycopg.types.composite import CompositeInfo, register_composite

    from .keys import Reservation  # (keys imports this module)
    info = CompositeInfo.fetch(conn, "idempotency.reservation")
    register_composite(info, conn, factory=Reservation)


# ---- transaction state ----

def reserve_begin_usable(conn) -> bool:
    """Whether reserve_begin may open conn's transaction: none is open, conn is not in pipeline
    mode, and it sets no isolation level, read-only or deferrable mode (psycopg would send
    those with its own BEGIN; the server's opens a transaction with its defaults)."""
    return (conn.info.transaction_status == TransactionStatus.IDLE and
            conn.isolation_level is None and conn.read_only is None and
            conn.deferrable is None and not conn.pgconn.pipeline_status)


def autocommit_to_restore(conn, autocommit: bool) -> bool:
    """Whether conn's autocommit is no longer `autocommit` (reserve_begin turned it on) and
    can be set back now: the connection works and has no transaction open."""
    return conn.autocommit != autocommit and not conn.closed and not conn.broken and \
        conn.info.transaction_status == TransactionStatus.IDLE


@contextlib.contextmanager
def one_statement(conn):
    """The block sends one statement that must commit by itself when conn has no transaction
    open, and run inside the caller's otherwise. A connection in autocommit, or one with a
    transaction open: as it is. One not in autocommit with no transaction open: autocommit
    for the block (one round trip instead of BEGIN, the statement, COMMIT), set back after;
    one that sets an isolation level, read-only or deferrable mode, or is in pipeline mode:
    a transaction of psycopg's (conn.transaction()), which carries them."""
    if conn.autocommit or not transaction_idle(conn):
        yield
        return
    if not reserve_begin_usable(conn):
        with transaction(conn):
            yield
        return
    conn.autocommit = True
    try:
        yield
    finally:
        if autocommit_to_restore(conn, False):
            conn.autocommit = False


def begin_needed(conn) -> bool:
    """Whether reserve on conn needs a BEGIN of the caller's: an autocommit connection with no
    transaction open would commit the claim by itself, apart from the work."""
    return conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE


def transaction_idle(conn) -> bool:
    """Whether conn has no transaction open."""
    return conn.info.transaction_status == TransactionStatus.IDLE


def transaction_failed(conn) -> bool:
    """Whether conn is inside a failed transaction."""
    return conn.info.transaction_status == TransactionStatus.INERROR


def check_work_left_usable(conn):
    """A work that caught a server error and returned leaves the transaction failed: its COMMIT
    would roll everything back without an error, and the caller would acknowledge a message
    that was never applied."""
    if conn.info.transaction_status == TransactionStatus.INERROR:
        raise TransactionAborted(
            "the work returned inside a failed transaction: nothing of it is committed",
            hint="let the work's database error propagate, or roll back to a savepoint of its own")


@contextlib.contextmanager
def transaction(conn):
    """conn.transaction(), its statements counted as round trips of the helper observed:
    BEGIN (or SAVEPOINT), then COMMIT (or RELEASE), or ROLLBACK (or ROLLBACK TO and RELEASE:
    two)."""
    outer = transaction_idle(conn)
    note_round_trip()
    with conn.transaction():
        try:
            yield
        except BaseException:
            note_round_trip(1 if outer else 2)
            raise
        note_round_trip()


# ---- two statements of a transaction in one round trip ----

def begin_with(conn, first_sql: str, params) -> Optional[bool]:
    """Sends BEGIN and first_sql (one boolean), its values bound, in one round trip through
    psycopg's pipeline mode (libpq 14 or later: one Sync for both) and returns the boolean; None
    (nothing sent) where pipeline mode is not to be had (an older libpq, a connection in
    pipeline mode already), for the caller's two round trips. A failed first_sql leaves the
    transaction failed, for the caller to roll back."""
    if conn.pgconn.pipeline_status or not psycopg.Pipeline.is_supported():
        return None
    return pipelined(conn, ((sql.BEGIN, None), (first_sql, params))).fetchone()[0]


def pipelined(conn, statements):
    """Runs statements ([(sql, params)]) in one round trip, their values bound: psycopg's
    pipeline mode sends them with one Sync, and the server skips those after a failed one (a
    transaction is left failed, for the caller to roll back). Returns the last one's cursor."""
    note_round_trip()
    with conn.pipeline():
        for query, params in statements:
            cur = conn.execute(query, params)
    return cur


async def pipelined_async(conn, statements):
    """pipelined on an AsyncConnection."""
    note_round_trip()
    async with conn.pipeline():
        for query, params in statements:
            cur = await conn.execute(query, params)
    return cur


def transaction_with(conn, first_sql: str, params, then: Callable):
    """One transaction whose first statement is first_sql (one boolean): returns then(value).
    On an autocommit connection with no transaction open, BEGIN and first_sql go to the server
    in one round trip (instead of two, as a consumer pays per message: begin_with),
    and COMMIT follows then(); otherwise conn.transaction() (a savepoint inside the caller's
    transaction). An exception rolls everything back; errors of the statements come out typed,
    a broken connection as ConnectionLost."""
    check_usable(conn)
    if not (conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE):
        with guard(conn), transaction(conn):
            out = then(execute(conn, first_sql, params).fetchone()[0])
            check_work_left_usable(conn)
            return out
    with guard(conn):
        try:
            try:
                value = begin_with(conn, first_sql, params)
                if value is None:  # psycopg's path, the values bound: two round trips
                    note_round_trip(2)
                    conn.execute(sql.BEGIN)
                    value = conn.execute(first_sql, params).fetchone()[0]
            except psycopg.Error as e:
                raise (lost_connection(conn, e) or translate(e)) from e
            out = then(value)
            check_work_left_usable(conn)
        except BaseException:
            if not (conn.broken or conn.closed) and \
                    conn.info.transaction_status != TransactionStatus.IDLE:
                note_round_trip()
                with contextlib.suppress(psycopg.Error):
                    conn.execute(sql.ROLLBACK)
            raise
        try:
            note_round_trip()
            conn.commit()  # psycopg's command path: no cursor
        except psycopg.Error as e:
            raise (lost_connection(conn, e) or translate(e)) from e
        return out
