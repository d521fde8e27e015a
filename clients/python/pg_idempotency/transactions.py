"""The transaction helpers: claim / run_once / idempotent (reserve, the work and complete in one
transaction) and run_external (a claim across transactions, for an external side effect)."""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import time
from typing import Any, Callable, Optional

from .spec import DEFAULT_LOCK_TTL, DEFAULT_RETENTION, DEFAULT_WAIT
from .connection import (check_usable, guard, one_statement, transaction,
                         transaction_failed, transaction_idle)
from .errors import TransactionOpen
from .keys import checkpoint, complete, execute_once, fail, raise_for, request_hash, reserve
from .observe import (counting_round_trips, note_round_trip, observed, observing, tell,
                      tell_error)


@dataclasses.dataclass(frozen=True)
class Result:
    """What a request helper returns: the response to send, and whether it is a replay."""
    status_code: int
    response: Any
    replayed: bool
    attempt: Optional[int] = None


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
def claim(conn, scope, key, request=None, *, exclude=(), lock_ttl=DEFAULT_LOCK_TTL,
          retention=DEFAULT_RETENTION, wait=DEFAULT_WAIT):
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
    options = {"exclude": exclude, "lock_ttl": lock_ttl, "retention": retention, "wait": wait}
    if not observing():
        with _claimed(conn, scope, key, request, **options) as c:
            yield c
        return
    with counting_round_trips():
        start = time.perf_counter()
        try:
            with _claimed(conn, scope, key, request, **options) as c:
                yield c
        except BaseException as e:
            tell_error("claim", scope, key, start, e)
            raise
        tell("claim", scope, key, c.reservation.outcome, c.attempt, start, None)


@contextlib.contextmanager
def _claimed(conn, scope, key, request=None, *, exclude=(), lock_ttl=DEFAULT_LOCK_TTL,
             retention=DEFAULT_RETENTION, wait=DEFAULT_WAIT):
    """claim(), not observed (run_once's work form observes itself)."""
    check_usable(conn)
    rh = request_hash(request, exclude)
    with guard(conn), transaction(conn):
        r = reserve(conn, scope, key, rh, lock_ttl=lock_ttl, retention=retention, wait=wait)
        raise_for(scope, key, r)
        c = Claim(conn, scope, key, r)
        yield c
        if not c.completed:
            raise RuntimeError(f'idempotency key "{key}": the block ended without complete(); '
                               "its claim is rolled back")


@observed("run_once")
def run_once(conn, scope, key, work: Optional[Callable[[], tuple]] = None, request=None, *,
             statement: Optional[str] = None, params=(), status: int = 201,
             **options) -> Result:
    """One-transaction helper as a call, in one of two forms.

    With `work`: on `new`, runs work() (which returns (status_code, response)) in the
    transaction and completes with it; on `replay`, returns the stored result without running
    work.

    With `statement` (the statement form, for work that is one SQL statement): the claim, the
    statement and its answer are one call of idempotency.execute_once, one round trip for a new
    key and for a replay. `params` are bound, never part of the text (statement_param says how
    each Python value is sent); the statement's result is the response (the one row's single
    json / jsonb column, or the row as a JSON object; None for no row) stored with `status`.
    On a connection with no transaction open it commits by itself; inside the caller's
    transaction it commits or rolls back with it. An error of the statement is raised, and the
    key stays new (inside the caller's transaction, that transaction is failed).

        result = run_once(conn, "acct_42", key, request=body,
                          statement="INSERT INTO orders (item, qty) VALUES ($1, $2) "
                                    "RETURNING id, item, qty",
                          params=[body["item"], body["qty"]])

    Both forms raise KeyInProgress / KeyMismatch / KeyTooOld for those outcomes."""
    if (work is None) == (statement is None):
        raise TypeError("run_once needs either work or statement=, not both")
    if statement is not None:
        return _run_statement(conn, scope, key, statement, params, status, request, **options)
    with _claimed(conn, scope, key, request, **options) as c:
        if not c.replayed:
            status_code, response = work()
            c.complete(status_code, response)
    return c.result


def _run_statement(conn, scope, key, statement, params, status, request, *, exclude=(),
                   lock_ttl=DEFAULT_LOCK_TTL, retention=DEFAULT_RETENTION, wait=DEFAULT_WAIT) -> Result:
    check_usable(conn)
    rh = request_hash(request, exclude)
    with guard(conn), one_statement(conn):
        r = execute_once(conn, scope, key, statement, params, rh, status_code=status,
                         lock_ttl=lock_ttl, retention=retention, wait=wait)
    raise_for(scope, key, r)
    return Result(r.status_code, r.response, r.outcome == "replay", r.attempt)


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
        with transaction(self.conn):
            checkpoint(self.conn, self.scope, self.key, recovery_point, self.attempt)
        self.recovery_point = recovery_point


@observed("run_external")
def run_external(conn, scope, key, work: Callable[[Attempt], tuple], request=None, **options
                 ) -> Result:
    """Cross-transaction helper for an external side effect (see _run_external); a connection
    that breaks comes out as ConnectionLost (the claim then stays until its lease lapses)."""
    with guard(conn):
        return _run_external(conn, scope, key, work, request, **options)


def _run_external(conn, scope, key, work: Callable[[Attempt], tuple], request=None, *,
                  exclude=(), finish: Callable | None = None, lock_ttl=DEFAULT_LOCK_TTL,
                  retention=DEFAULT_RETENTION, wait=DEFAULT_WAIT) -> Result:
    """Cross-transaction helper for an external side effect. Commits the claim, runs
    work(attempt) with no transaction open (it returns (status_code, response)), then, in a
    second transaction, calls finish(conn, status_code, response) if given (your business
    writes) and complete with the attempt fence: StaleAttempt if the lease lapsed and another
    holder took over (that transaction, finish's writes included, is rolled back). If work
    raises, the claim is released with fail (the next reserve gets attempt + 1) and the
    exception re-raised."""
    check_usable(conn)
    if not transaction_idle(conn):
        raise TransactionOpen(
            "run_external needs a connection with no transaction open",
            hint="commit or roll back first: the claim must be committed before the external call")
    rh = request_hash(request, exclude)
    with transaction(conn):
        r = reserve(conn, scope, key, rh, lock_ttl=lock_ttl, retention=retention, wait=wait)
    if r.outcome == "replay":
        return Result(r.status_code, r.response, True, r.attempt)
    raise_for(scope, key, r)
    try:
        status_code, response = work(Attempt(conn, scope, key, r))
    except BaseException as e:
        if transaction_failed(conn):
            note_round_trip()
            conn.rollback()
        with contextlib.suppress(Exception):
            with transaction(conn):
                fail(conn, scope, key, {"error": type(e).__name__, "message": str(e)[:1000]},
                     r.attempt)
        raise
    with transaction(conn):
        if finish is not None:
            finish(conn, status_code, response)
        complete(conn, scope, key, status_code, response, r.attempt)
    return Result(status_code, response, False, r.attempt)
