"""Calls of the extension with typed results and typed errors, and the two request helpers."""
from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import functools
import json
import re
import uuid
from typing import Any, Callable, Optional

import psycopg
from psycopg.adapt import Loader
from psycopg.pq import ConnStatus, Escaping, ExecStatus, TransactionStatus
from psycopg.types.json import Jsonb

from .errors import (KeyInProgress, KeyMismatch, KeyTooOld, KeyUntranslatable,
                     PositionBelowWatermark, TransactionAborted, TransactionOpen,
                     UntranslatableCharacter, check_names, lost_connection, translate)
from .fingerprint import fingerprint


@dataclasses.dataclass(frozen=True)
class Reservation:
    """idempotency.reservation, typed."""
    outcome: str
    status_code: Optional[int]
    response: Any
    attempt: Optional[int]
    recovery_point: Optional[str]
    first_seen_at: Optional[_dt.datetime]
    locked_until: Optional[_dt.datetime]
    expires_at: Optional[_dt.datetime]


@dataclasses.dataclass(frozen=True)
class Result:
    """What a request helper returns: the response to send, and whether it is a replay."""
    status_code: int
    response: Any
    replayed: bool
    attempt: Optional[int] = None


def _check_usable(conn: psycopg.Connection):
    if conn.info.transaction_status == TransactionStatus.INERROR:
        raise TransactionAborted(
            "the connection is inside a failed transaction",
            hint="roll the transaction back before calling the idempotency helpers")


@contextlib.contextmanager
def _guard(conn):
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


def _escaped(escaping, codec, value) -> Optional[bytes]:
    """A str, int or UUID as an SQL literal escaped by libpq (PQescapeLiteral) on the bytes that
    are sent, in the session's encoding; None for a value that cannot be sent in a query text
    (a NUL, an unencodable text, libpq's refusal): psycopg's bound path then says what is
    wrong with it."""
    if isinstance(value, uuid.UUID):
        return b"'%s'" % str(value).encode("ascii")
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value).encode("ascii")
    text = str(value)
    if "\0" in text:
        return None
    try:
        return escaping.escape_literal(text.encode(codec))
    except (UnicodeError, psycopg.Error):
        return None


def _begin_with(conn, first_sql: str, params) -> Optional[bool]:
    """Sends BEGIN and first_sql (one boolean) as one simple query through libpq itself and
    returns the boolean, or None (nothing sent) if a value cannot be inlined. psycopg's own
    path for that query costs the client about as much CPU as the server spends on it; a
    consumer pays it per message (bench/brokers.sh). The values are escaped by libpq on the
    encoded bytes, for the encoding it tracks for the session (check_encodable refused a text
    that encoding does not carry as it is). libpq blocks here, for no longer than the statement
    runs (claim_once's `wait` at most)."""
    if conn.pgconn.pipeline_status:
        return None
    codec = conn.info.encoding
    escaping = Escaping(conn.pgconn)
    literals = [_escaped(escaping, codec, v) for v in params]
    if None in literals:
        return None
    query = b"BEGIN; " + first_sql.encode("ascii") % tuple(literals)
    with conn.lock:
        result = conn.pgconn.exec_(query)  # OperationalError if it could not be sent
    if result.status == ExecStatus.TUPLES_OK:
        return result.get_value(0, 0) == b"t"
    if conn.pgconn.status == ConnStatus.BAD:  # as psycopg reports it: OperationalError
        message = result.error_message.decode(codec, "replace").strip()
        raise psycopg.OperationalError(message or "the connection to the server was lost")
    raise psycopg.errors.error_from_result(result, encoding=codec)


def _check_work_left_usable(conn):
    """A work that caught a server error and returned leaves the transaction failed: its COMMIT
    would roll everything back without an error, and the caller would acknowledge a message
    that was never applied."""
    if conn.info.transaction_status == TransactionStatus.INERROR:
        raise TransactionAborted(
            "the work returned inside a failed transaction: nothing of it is committed",
            hint="let the work's database error propagate, or roll back to a savepoint of its own")


def _transaction_with(conn, first_sql: str, params, then: Callable):
    """One transaction whose first statement is first_sql (one boolean): returns then(value).
    On an autocommit connection with no transaction open, BEGIN and first_sql go to the server
    as one query (one round trip instead of two, as a consumer pays per message: _begin_with),
    and COMMIT follows then(); otherwise conn.transaction() (a savepoint inside the caller's
    transaction). An exception rolls everything back; errors of the statements come out typed,
    a broken connection as ConnectionLost."""
    _check_usable(conn)
    if not (conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE):
        with _guard(conn), conn.transaction():
            out = then(execute(conn, first_sql, params).fetchone()[0])
            _check_work_left_usable(conn)
            return out
    with _guard(conn):
        try:
            try:
                value = _begin_with(conn, first_sql, params)
                if value is None:  # psycopg's path, the values bound: two round trips
                    conn.execute("BEGIN")
                    value = conn.execute(first_sql, params).fetchone()[0]
            except psycopg.Error as e:
                raise (lost_connection(conn, e) or translate(e)) from e
            out = then(value)
            _check_work_left_usable(conn)
        except BaseException:
            if not (conn.broken or conn.closed) and \
                    conn.info.transaction_status != TransactionStatus.IDLE:
                with contextlib.suppress(psycopg.Error):
                    conn.execute("ROLLBACK")
            raise
        try:
            conn.commit()  # psycopg's command path: no cursor
        except psycopg.Error as e:
            raise (lost_connection(conn, e) or translate(e)) from e
        return out


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


def execute(conn: psycopg.Connection, sql: str, params=()):
    """Runs one statement; psycopg errors come out as the typed exceptions of errors.py
    (ConnectionLost for a connection that broke)."""
    _check_usable(conn)
    try:
        return cursor_of(conn).execute(sql, params)
    except psycopg.Error as e:
        raise (lost_connection(conn, e) or translate(e)) from e


def register_types(conn: psycopg.Connection):
    """Loads idempotency.reservation values as Reservation in this connection (for queries
    of your own, such as SELECT idempotency.reserve(...)); the enum outcome loads as str."""
    from psycopg.types.composite import CompositeInfo, register_composite
    info = CompositeInfo.fetch(conn, "idempotency.reservation")
    register_composite(info, conn, factory=Reservation)


def request_hash(body, exclude=()):
    """fingerprint(body, exclude), or None for None (no fingerprint check)."""
    return None if body is None else fingerprint(body, exclude)


RESERVE_SQL = ("SELECT * FROM idempotency.reserve(%s, %s, %s, %s::interval, %s::interval, "
               "%s::interval)")
COMPLETE_SQL = "SELECT idempotency.complete(%s, %s, %s, %s, %s)"

# reserve_begin (0.3.0): reserve, and the outcome 'new' opens the transaction itself, as BEGIN
# would; any other outcome leaves none open. A retry costs one round trip, a new key one fewer.
RESERVE_BEGIN_SQL = RESERVE_SQL.replace("idempotency.reserve(", "idempotency.reserve_begin(")
# complete and COMMIT in one simple query (a psycopg.ClientCursor): one round trip. A failed
# complete skips the COMMIT and leaves the transaction failed, for the caller to roll back.
COMPLETE_COMMIT_SQL = COMPLETE_SQL + "; COMMIT"


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


def begin_needed(conn) -> bool:
    """Whether reserve on conn needs a BEGIN of the caller's: an autocommit connection with no
    transaction open would commit the claim by itself, apart from the work."""
    return conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE


def reserve_begin_refused(e) -> bool:
    """Whether the server refused reserve_begin as a whole: one before 0.3.0 (42883), a role
    without EXECUTE on it (42501), keys distributed by Citus (0A000). BEGIN + reserve do the
    same in two statements."""
    return getattr(e, "sqlstate", None) in ("42883", "42501", "0A000") and \
        re.search(r"reserve_begin|shard", str(e)) is not None


def reserve_params(scope, key, request_hash, lock_ttl, retention, wait):
    """reserve's parameters; KeyMalformed (a 400) for an empty scope or key, or one over 255
    bytes, before anything is sent."""
    check_names(scope, key)
    return (scope, key, request_hash, _interval(lock_ttl), _interval(retention),
            _interval(wait))


def reservation_of(row) -> Reservation:
    return Reservation(str(row[0]), *row[1:])


def reserve(conn, scope, key, request_hash=None, *, lock_ttl="5 minutes",
            retention="24 hours", wait="0") -> Reservation:
    params = reserve_params(scope, key, request_hash, lock_ttl, retention, wait)
    check_encodable(conn, _names(scope, key))
    return reservation_of(execute(conn, RESERVE_SQL, params).fetchone())


def _names(scope, key):
    return (("scope", scope), ("key", key))


def complete(conn, scope, key, status_code, response, attempt=None):
    check_encodable(conn, _names(scope, key))
    execute(conn, COMPLETE_SQL, (scope, key, status_code, Jsonb(response), attempt))


def fail(conn, scope, key, error=None, attempt=None):
    check_encodable(conn, _names(scope, key))
    execute(conn, "SELECT idempotency.fail(%s, %s, %s, %s)",
            (scope, key, None if error is None else Jsonb(error), attempt))


def checkpoint(conn, scope, key, recovery_point, attempt=None):
    check_encodable(conn, _names(scope, key), (("recovery point", recovery_point),))
    execute(conn, "SELECT idempotency.checkpoint(%s, %s, %s, %s)",
            (scope, key, recovery_point, attempt))


def lookup(conn, scope, key) -> Optional[dict]:
    check_encodable(conn, _names(scope, key))
    cur = execute(conn, "SELECT * FROM idempotency.lookup(%s, %s)", (scope, key))
    row = cur.fetchone()
    if row is None:
        return None
    return {d.name: (str(v) if d.name == "state" and v is not None else v)
            for d, v in zip(cur.description, row)}


def _interval(v):
    if isinstance(v, _dt.timedelta):
        return f"{v.total_seconds()} seconds"
    if isinstance(v, (int, float)):
        return f"{v} seconds"
    return v


def _raise_for(scope, key, r: Reservation):
    if r.outcome == "in_progress":
        raise KeyInProgress(scope, key, r, f'idempotency key "{key}" is in progress')
    if r.outcome == "mismatch":
        raise KeyMismatch(scope, key, r,
                          f'idempotency key "{key}" was used with a different request')
    if r.outcome == "too_old":
        raise KeyTooOld(scope, key, r,
                        f'idempotency key "{key}" is older than the retention window')


class Claim:
    """What `claim()` yields. On a replay, `replayed` is true and `status_code` / `response`
    are the stored result: skip the work. Otherwise do the work and call `complete()`."""

    def __init__(self, conn, scope, key, reservation):
        self.conn, self.scope, self.key, self.reservation = conn, scope, key, reservation
        self.replayed = reservation.outcome == "replay"
        self.status_code = reservation.status_code
        self.response = reservation.response
        self.completed = self.replayed

    @property
    def attempt(self):
        return self.reservation.attempt

    def complete(self, status_code, response):
        complete(self.conn, self.scope, self.key, status_code, response)
        self.status_code, self.response, self.completed = status_code, response, True

    @property
    def result(self) -> Result:
        return Result(self.status_code, self.response, self.replayed, self.attempt)


@contextlib.contextmanager
def claim(conn, scope, key, request=None, *, exclude=(), lock_ttl="5 minutes",
          retention="24 hours", wait="0"):
    """One-transaction helper as a context manager: reserve, your work and complete in one
    transaction (a savepoint if the caller already has one open, else a transaction that
    commits at the end of the block). An exception in the block rolls the claim back with it.
    Raises KeyInProgress / KeyMismatch / KeyTooOld instead of yielding for those outcomes.

        with claim(conn, "acct_42", key, body) as c:
            if not c.replayed:
                order = insert_order(conn, body)
                c.complete(201, order)
        return c.status_code, c.response
    """
    _check_usable(conn)
    rh = request_hash(request, exclude)
    with _guard(conn), conn.transaction():
        r = reserve(conn, scope, key, rh, lock_ttl=lock_ttl, retention=retention, wait=wait)
        _raise_for(scope, key, r)
        c = Claim(conn, scope, key, r)
        yield c
        if not c.completed:
            raise RuntimeError(f'idempotency key "{key}": the block ended without complete(); '
                               "its claim is rolled back")


def run_once(conn, scope, key, work: Callable[[], tuple], request=None, **options) -> Result:
    """One-transaction helper as a call: on `new`, runs work() (which returns
    (status_code, response)) in the transaction and completes with it; on `replay`, returns the
    stored result without running work."""
    with claim(conn, scope, key, request, **options) as c:
        if not c.replayed:
            status_code, response = work()
            c.complete(status_code, response)
    return c.result


def idempotent(scope, key, request=None, **options):
    """Decorator form of run_once. The decorated function takes the connection first and returns
    (status_code, response); scope, key and request are values or callables of the function's
    arguments (without the connection):

        @idempotent(scope=lambda acct, key, body: acct, key=lambda acct, key, body: key,
                    request=lambda acct, key, body: body, exclude=["client_sent_at"])
        def create_order(conn, acct, key, body): ...
        result = create_order(conn, "acct_42", key, body)   # a Result
    """
    def pick(v, args, kwargs):
        return v(*args, **kwargs) if callable(v) else v

    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(conn, *args, **kwargs):
            return run_once(conn, pick(scope, args, kwargs), pick(key, args, kwargs),
                            lambda: fn(conn, *args, **kwargs),
                            pick(request, args, kwargs), **options)
        return wrapper
    return decorate


class Attempt:
    """Passed to the work of run_external: the attempt number (fencing token), the recovery
    point an earlier attempt left (None on a first attempt), and checkpoint()."""

    def __init__(self, conn, scope, key, reservation):
        self.conn, self.scope, self.key = conn, scope, key
        self.attempt = reservation.attempt
        self.recovery_point = reservation.recovery_point

    def checkpoint(self, recovery_point: str):
        """Records progress in its own transaction (IK001 if another holder took over)."""
        with self.conn.transaction():
            checkpoint(self.conn, self.scope, self.key, recovery_point, self.attempt)
        self.recovery_point = recovery_point


def run_external(conn, scope, key, work: Callable[[Attempt], tuple], request=None, **options
                 ) -> Result:
    """Cross-transaction helper for an external side effect (see _run_external); a connection
    that breaks comes out as ConnectionLost (the claim then stays until its lease lapses)."""
    with _guard(conn):
        return _run_external(conn, scope, key, work, request, **options)


def _run_external(conn, scope, key, work: Callable[[Attempt], tuple], request=None, *,
                  exclude=(), finish: Callable | None = None, lock_ttl="5 minutes",
                  retention="24 hours", wait="0") -> Result:
    """Cross-transaction helper for an external side effect. Commits the claim, runs
    work(attempt) with no transaction open (it returns (status_code, response)), then, in a
    second transaction, calls finish(conn, status_code, response) if given (your business
    writes) and complete with the attempt fence: StaleAttempt if the lease lapsed and another
    holder took over (that transaction, finish's writes included, is rolled back). If work
    raises, the claim is released with fail (the next reserve gets attempt + 1) and the
    exception re-raised."""
    _check_usable(conn)
    if conn.info.transaction_status != TransactionStatus.IDLE:
        raise TransactionOpen(
            "run_external needs a connection with no transaction open",
            hint="commit or roll back first: the claim must be committed before the external call")
    rh = request_hash(request, exclude)
    with conn.transaction():
        r = reserve(conn, scope, key, rh, lock_ttl=lock_ttl, retention=retention, wait=wait)
    if r.outcome == "replay":
        return Result(r.status_code, r.response, True, r.attempt)
    _raise_for(scope, key, r)
    try:
        status_code, response = work(Attempt(conn, scope, key, r))
    except BaseException as e:
        if conn.info.transaction_status == TransactionStatus.INERROR:
            conn.rollback()
        with contextlib.suppress(Exception):
            with conn.transaction():
                fail(conn, scope, key, {"error": type(e).__name__, "message": str(e)[:1000]},
                     r.attempt)
        raise
    with conn.transaction():
        if finish is not None:
            finish(conn, status_code, response)
        complete(conn, scope, key, status_code, response, r.attempt)
    return Result(status_code, response, False, r.attempt)


# ---- streams, watermarks, outbox keys ----

def _accept_query(conn, consumer, partition, position):
    check_encodable(conn, (), (("consumer", consumer), ("partition", partition)))
    if isinstance(position, int):
        return "SELECT idempotency.accept(%s, %s, %s::bigint)", (consumer, partition, position)
    return ("SELECT idempotency.accept(%s, %s, %s::uuid)",
            (consumer, partition, uuid.UUID(str(position))))


def accept(conn, consumer, partition, position) -> bool:
    """idempotency.accept with an int (bigint) or uuid.UUID / UUID string (128-bit) position."""
    return execute(conn, *_accept_query(conn, consumer, partition, position)).fetchone()[0]


def watermark(conn, consumer, partition) -> Optional[int]:
    check_encodable(conn, (), (("consumer", consumer), ("partition", partition)))
    """The stored position as an int (None if none)."""
    cur = execute(conn, "SELECT idempotency.watermark(%s, %s)::text", (consumer, partition))
    v = cur.fetchone()[0]
    return None if v is None else int(v)


def _position_int(position) -> int:
    return position if isinstance(position, int) else uuid.UUID(str(position)).int


def apply_once(conn, consumer, partition, position, fn: Callable, *, strict=False) -> bool:
    """Runs fn(conn) in one transaction with accept(consumer, partition, position): true if it
    ran, false for a position at or below the watermark (a redelivery). A rollback (an exception
    in fn) undoes the watermark move too, so the message is applied again next time.
    strict=True: a position below the watermark (not equal to it) raises
    PositionBelowWatermark instead of returning false, for partitions that must arrive in
    order (an out-of-order message would otherwise be skipped without a word)."""
    def then(accepted):
        if not accepted:
            if strict:
                mark = watermark(conn, consumer, partition)
                if mark is not None and _position_int(position) < mark:
                    raise PositionBelowWatermark(consumer, partition, position, mark)
            return False
        fn(conn)
        return True

    return _transaction_with(conn, *_accept_query(conn, consumer, partition, position), then)


# ---- a key per message: queue consumers ----

CLAIM_ONCE_SQL = "SELECT idempotency.claim_once(%s, %s, %s::interval, %s::interval)"


def _name_key(e, scope, key):
    """IK003 / IK004 come from the server without the key they are about: name it."""
    if e.key is None:
        e.scope, e.key = scope, key


def claim_once(conn, scope, key, *, retention="24 hours", wait="0") -> bool:
    """idempotency.claim_once in the caller's transaction: true the first time (the key is now
    completed in this transaction: apply the message in it), false for a redelivery.
    KeyInProgress (IK003) if another holder has the key after `wait`, KeyTooOld (IK004) for a
    UUIDv7 / ULID key older than `retention`; KeyMalformed before any query."""
    check_names(scope, key)
    check_encodable(conn, _names(scope, key))
    try:
        cur = execute(conn, CLAIM_ONCE_SQL, (scope, key, _interval(retention), _interval(wait)))
    except (KeyInProgress, KeyTooOld) as e:
        _name_key(e, scope, key)
        raise
    return cur.fetchone()[0]


def consume_once(conn, scope, key, work: Callable, *, retention="24 hours", wait="0") -> bool:
    """Runs work(conn) in one transaction with claim_once(scope, key): true if it ran, false for
    a redelivery (a key already completed: acknowledge the message without running work). The
    transaction is the caller's savepoint if one is open, else its own, committed before this
    returns: acknowledge the message after that. An exception in work rolls the claim back with
    it (the redelivery is applied), and so does a work that returns inside a failed transaction
    (TransactionAborted); KeyInProgress / KeyTooOld as claim_once; a connection that
    breaks comes out as ConnectionLost (nothing of the transaction was kept, unless it broke
    during COMMIT: the redelivery then answers false)."""
    check_names(scope, key)
    check_encodable(conn, _names(scope, key))

    def then(claimed):
        if claimed:
            work(conn)
        return claimed

    try:
        return _transaction_with(conn, CLAIM_ONCE_SQL,
                                 (scope, key, _interval(retention), _interval(wait)), then)
    except (KeyInProgress, KeyTooOld) as e:
        _name_key(e, scope, key)
        raise


def next_key(conn, stream) -> int:
    check_encodable(conn, (), (("stream", stream),))
    return execute(conn, "SELECT idempotency.next_key(%s)", (stream,)).fetchone()[0]


def emit(conn, topic, payload) -> "Lsn":
    check_encodable(conn, (), (("topic", topic),))
    cur = execute(conn, "SELECT idempotency.emit(%s, %s)::text", (topic, Jsonb(payload)))
    return Lsn.parse(cur.fetchone()[0])


class Lsn(int):
    """A WAL position: an int that prints as PostgreSQL's pg_lsn text ('0/16B3748')."""

    @classmethod
    def parse(cls, text: str) -> "Lsn":
        hi, lo = text.split("/")
        return cls((int(hi, 16) << 32) | int(lo, 16))

    def __str__(self):
        return f"{int(self) >> 32:X}/{int(self) & 0xFFFFFFFF:X}"

    __repr__ = __str__


def lsn_key(commit_lsn: int, lsn: int) -> uuid.UUID:
    """The outbox key: commit LSN then LSN, each 64-bit big-endian (as idempotency.lsn_key)."""
    if lsn > commit_lsn:
        raise ValueError("lsn must not exceed commit_lsn")
    return uuid.UUID(int=(int(commit_lsn) << 64) | int(lsn))


def lsn_key_parts(key) -> tuple:
    """(commit LSN, LSN) of an outbox key (uuid.UUID or its text)."""
    v = key.int if isinstance(key, uuid.UUID) else uuid.UUID(str(key)).int
    return Lsn(v >> 64), Lsn(v & (2**64 - 1))
