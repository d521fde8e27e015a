"""Exactly-once Celery tasks: ExactlyOnceTask, a task base class.

    from pg_idempotency.celery import ExactlyOnceTask

    @app.task(base=ExactlyOnceTask, bind=True)
    def charge(self, order_id, amount):
        self.db.execute("INSERT INTO charges (order_id, amount) VALUES (%s, %s)",
                        (order_id, amount))
        return {"charged": amount}

Each run claims a key (scope: the task's name unless idempotency_scope says otherwise; key:
the task id, or idempotency_key(*args, **kwargs) for a business key) on the worker process's
own database connection, `self.db`, runs the body inside the claim's transaction and stores
its return value (JSON) as the key's answer in the same COMMIT. A redelivery of a task that
committed (the worker died after COMMIT and before the broker got its ack, or a producer sent
it twice) returns the stored value without running the body. A body that raises rolls its
writes and the claim back together.

At-least-once delivery is Celery's part: the class sets acks_late (the message is acked after
the task returns, so a worker that dies mid-task leaves it for redelivery) and
reject_on_worker_lost (a pool child that dies requeues its message instead of failing it);
a task that sets either to False is refused when it is defined (ExactlyOnceConfigError).

The run owns the transaction: inside the body, self.db.commit(), self.db.rollback() and a change
of self.db.autocommit raise InvalidTransactionTermination (2D000; the body's writes would
otherwise commit before the answer, and a worker killed in between would leave them without
it, to be run again). Savepoints (self.db.transaction()) are the body's to use. A COMMIT or ROLLBACK the
body sends as SQL cannot be refused before it runs; the run notices the ended transaction
afterwards, still stores the answer (so a redelivery replays instead of running again), and
then raises InvalidTransactionTermination.

max_attempts (None by default) bounds a task that fails every time (a poison task): each
failure is recorded on the key and the message is requeued (Reject(requeue=True)); the
max_attempts-th failure records the key dead (idempotency.failed_keys) and rejects the message
without requeue, to the queue's dead-letter exchange if it has one. self.retry() is not a
failure: the claim rolls back and Celery's retry message runs the body again under the same
key. A soft time limit (SoftTimeLimitExceeded) is a failure of the body like any exception; at a
hard time limit Celery records the task failed, acks its message (nothing redelivers it) and
kills the pool child, whose open transaction the server rolls back.
"""
from __future__ import annotations

import contextlib
import os
import time
from typing import Any, Callable, Optional

import psycopg
from celery import Task
from celery.exceptions import Ignore, Reject, Retry
from psycopg.pq import TransactionStatus
from psycopg.types.json import Jsonb

from .spec import DEFAULT_JOB_WAIT, DEFAULT_LOCK_TTL, DEFAULT_RETENTION
from . import statements as sql
from .connection import (autocommit_to_restore, check_encodable, check_usable,
                         check_work_left_usable, cursor_of, pipelined)
from .consumer import _check_max_attempts, _counted, _record_failure
from .errors import (ConnectionLost, IdempotencyError, InvalidTransactionTermination,
                     KeyInProgress, lost_connection, translate)
from .keys import names, raise_for, reservation_of, reserve_begin_refused, reserve_params
from .observe import counting_round_trips, note_round_trip, observing, tell
from .transactions import _claimed
from .versions import edition

# The answer stored for a task: its return value under one name, so None is a value too.
_RESULT = "result"
_STATUS = 200


class ExactlyOnceConfigError(IdempotencyError, TypeError):
    """A task configuration that would lose tasks or run them twice, refused at definition."""


def _refuse_in_body(what):
    raise InvalidTransactionTermination(
        f"{what} inside an exactly-once task: the run commits the body's writes together with "
        "its answer, after the body returns",
        hint="return to commit, raise to roll back; use self.db.transaction() for a savepoint")


# The guarded twin of each connection class: commit, rollback and autocommit refused. A run
# puts its connection in it for the body (the same object: cursors' .connection included, no
# round trip) and back afterwards.
_guarded_classes: dict = {}


def _guarded_class(cls):
    guarded = _guarded_classes.get(cls)
    if guarded is None:
        def commit(self):
            _refuse_in_body("commit()")

        def rollback(self):
            _refuse_in_body("rollback()")

        def set_autocommit(self, value):
            _refuse_in_body("changing autocommit")

        guarded = _guarded_classes[cls] = type(cls.__name__, (cls,), {
            "__slots__": (), "__module__": cls.__module__, "commit": commit,
            "rollback": rollback, "autocommit": property(cls.autocommit.fget, set_autocommit)})
    return guarded


class _BodyGuard:
    """Puts conn in its guarded class for the body; .ended tells afterwards whether the body
    ended the transaction with SQL of its own (the status no longer in a transaction)."""

    def __init__(self, conn):
        self.conn = conn
        self.cls = type(conn)
        self.ended = False

    def __enter__(self):
        self.conn.__class__ = _guarded_class(self.cls)
        return self

    def __exit__(self, *exc):
        self.conn.__class__ = self.cls
        self.ended = self.conn.info.transaction_status == TransactionStatus.IDLE

    @contextlib.contextmanager
    def reporting(self):
        """Around the answer's statements: if the body ended the transaction, they still run
        (a COMMIT of the body's leaves the claim in progress: without the answer a redelivery
        would wait out lock_ttl and run the body again), then InvalidTransactionTermination,
        which is not counted as a failure (nothing requeues it)."""
        try:
            yield
        except Exception as e:
            if self.ended:
                raise _ended_error(stored=False) from e
            raise
        if self.ended:
            raise _ended_error(stored=True)


def _refuse_lossy(cls):
    for attr, why in (
            ("acks_late", "an early ack loses the task when the worker dies mid-task"),
            ("reject_on_worker_lost", "a pool child that dies would fail the task instead of "
                                      "requeueing it")):
        if vars(cls).get(attr, True) is False:
            raise ExactlyOnceConfigError(
                f"task {cls.__dict__.get('name') or cls.__name__}: {attr}=False cannot run "
                f"exactly once: {why}; leave {attr} to ExactlyOnceTask (it sets it to True)")
    _check_max_attempts(vars(cls).get("max_attempts"))
    key = vars(cls).get("idempotency_key")
    if key is not None and not callable(key) and not isinstance(key, (str, staticmethod)):
        raise ExactlyOnceConfigError(
            "idempotency_key must be a callable of the task's arguments or the name of one")
    if callable(key) and not isinstance(key, staticmethod):
        cls.idempotency_key = staticmethod(key)  # called with the arguments, never self


class _WorkerConnection:
    """One database connection per worker process (a prefork child opens its own after the
    fork), opened on first use and again after it broke."""

    def __init__(self):
        self.conn: Optional[psycopg.Connection] = None
        self.pid = None
        # Whether the claim may be reserve_begin: None until the server's edition is known,
        # False once the server refused it (reserve_begin_refused).
        self.reserve_begin: Optional[bool] = None

    def get(self, connect: Callable[[], psycopg.Connection]) -> psycopg.Connection:
        if self.pid == os.getpid() and self.conn is not None and _left_unusable(self.conn):
            self.drop()
        if self.conn is None or self.conn.closed or self.conn.broken or self.pid != os.getpid():
            self.conn, self.pid = connect(), os.getpid()
            self.reserve_begin = None
        return self.conn

    def drop(self):
        if self.conn is not None and self.pid == os.getpid():
            try:
                self.conn.close()
            except Exception:  # noqa: BLE001 — a broken connection may refuse to close cleanly
                pass
        self.conn = None


def _left_unusable(conn) -> bool:
    """A connection that a run interrupted mid-statement left behind (Celery terminating the
    task, a signal in the child): still in pipeline mode, or a command still in progress.
    Every later statement on it would fail: it is closed and replaced."""
    return not (conn.closed or conn.broken) and (
        bool(conn.pgconn.pipeline_status) or
        conn.info.transaction_status == TransactionStatus.ACTIVE)


# One connection per worker process and way of connecting (a task class's connect() and DSN).
_worker_connections: dict = {}



class _Seen:
    """What a run's claim came to, for observe.py."""
    outcome = attempt = None


def _saw(seen, reservation):
    if seen is not None:
        seen.outcome, seen.attempt = reservation.outcome, reservation.attempt


class ExactlyOnceTask(Task):
    """A Celery task base class that applies each task exactly once (see the module's doc).

    Options (class attributes, or keyword arguments of @app.task):
      idempotency_scope   the scope of the keys (default: the task's name)
      idempotency_key     None (the task id), a callable of the task's arguments returning the
                          key, or the name of a keyword argument holding it
      idempotency_dsn     the connection string (default: app.conf.idempotency_dsn, else the
                          PG* environment)
      max_attempts        failures of the body before the task is dead-lettered (None: no
                          bound; Celery's own failure handling applies)
      lock_wait           how long a run waits for another worker holding the same key
      retention           how long a completed key is kept (redeliveries within it replay)
    """

    acks_late = True
    reject_on_worker_lost = True
    idempotency_scope: Optional[str] = None
    idempotency_key: Any = None
    idempotency_dsn: Optional[str] = None
    max_attempts: Optional[int] = None
    lock_wait = DEFAULT_JOB_WAIT
    lock_ttl = DEFAULT_LOCK_TTL
    retention = DEFAULT_RETENTION
    # How long a run waits before it requeues its task when the database cannot be reached
    # (so a database restart does not turn into a tight redelivery loop).
    reconnect_pause = 0.5

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _refuse_lossy(cls)

    # ---- the connection ----

    def dsn(self) -> str:
        return self.idempotency_dsn or self.app.conf.get("idempotency_dsn") or ""

    def connect(self) -> psycopg.Connection:
        """Opens the worker process's connection; override for other settings."""
        return psycopg.connect(self.dsn())

    def _connection(self) -> _WorkerConnection:
        way = (getattr(type(self).connect, "__func__", type(self).connect), self.dsn())
        return _worker_connections.setdefault(way, _WorkerConnection())

    @property
    def db(self) -> psycopg.Connection:
        """The worker process's connection; inside the body, in the claim's transaction."""
        return self._connection().get(self.connect)

    # ---- the key ----

    def idempotency_names(self, args, kwargs) -> tuple[str, str]:
        scope = self.idempotency_scope or self.name
        key = self.idempotency_key
        if key is None:
            key = self.request.id
            if key is None:
                raise ExactlyOnceConfigError(f"task {self.name}: no task id to key the run on "
                                             "(called directly? use .delay / .apply)")
        elif callable(key):
            key = key(*args, **kwargs)
        else:
            if key not in kwargs:
                raise ExactlyOnceConfigError(
                    f"task {self.name}: idempotency_key names the keyword argument {key!r}, "
                    "which this call does not pass")
            key = kwargs[key]
        return scope, str(key)

    # ---- the run ----

    def __call__(self, *args, **kwargs):
        scope, key = self.idempotency_names(args, kwargs)
        if not observing():
            return self._run(scope, key, None, args, kwargs)
        seen = _Seen()
        with counting_round_trips():
            start = time.perf_counter()
            try:
                result = self._run(scope, key, seen, args, kwargs)
            except BaseException as e:
                tell("celery", scope, key, seen.outcome or getattr(e, "outcome", None) or None,
                     seen.attempt, start, e)
                raise
            tell("celery", scope, key, seen.outcome, seen.attempt, start, None)
        return result

    def _run(self, scope, key, seen, args, kwargs):
        """The run of __call__; seen (when observed) gets the claim's outcome and attempt."""
        try:
            conn = self.db
        except psycopg.OperationalError as e:
            self._requeue_later(f"the database cannot be reached: {e}")
        ran = False
        try:
            if not self._pipelinable(conn):
                with _claimed(conn, scope, key, lock_ttl=self.lock_ttl,
                              retention=self.retention, wait=self.lock_wait) as c:
                    _saw(seen, c.reservation)
                    if c.replayed:
                        return (c.response or {}).get(_RESULT)
                    ran = True
                    with _BodyGuard(conn) as body:
                        result = super().__call__(*args, **kwargs)
                    with body.reporting():
                        c.complete(_STATUS, {_RESULT: result})
                return result
            # In autocommit the claim opens the run's transaction in its own round trip
            # (reserve_begin, or BEGIN pipelined with reserve: psycopg syncs the BEGIN it sends
            # by itself apart); the body runs inside that transaction.
            autocommit = conn.autocommit
            conn.autocommit = True
            try:
                r = self._begin_reserve(conn, scope, key)
                _saw(seen, r)
                if r.outcome == "replay":
                    if conn.info.transaction_status != TransactionStatus.IDLE:
                        self._end(conn, ((sql.COMMIT, None),))  # BEGIN + reserve's
                    return (r.response or {}).get(_RESULT)
                ran = True
                with _BodyGuard(conn) as body:
                    result = super().__call__(*args, **kwargs)
                check_work_left_usable(conn)
                with body.reporting():
                    self._end(conn, ((sql.COMPLETE, (scope, key, _STATUS,
                                                     Jsonb({_RESULT: result}), None)),
                                     (sql.COMMIT, None)))
                return result
            except BaseException:
                self._roll_back(conn)
                raise
            finally:
                if autocommit_to_restore(conn, autocommit):
                    conn.autocommit = autocommit
        except (Retry, Ignore, Reject):
            raise  # Celery's own control flow: the claim is rolled back, nothing counted
        except KeyInProgress:
            # Another worker runs the same key (a producer duplicate) past lock_wait.
            if seen is not None:
                seen.outcome = "in_progress"
            raise Reject(f"{scope}/{key} is being run by another worker", requeue=True)
        except Exception as exc:
            if isinstance(exc, ConnectionLost) or lost_connection(conn, exc) is not None or \
                    _left_unusable(conn):
                self._connection().drop()
                self._requeue_later(f"the database connection was lost: {exc}")
            if not ran or self.max_attempts is None or not _counted(conn, exc) or \
                    isinstance(exc, InvalidTransactionTermination):
                raise
            self._count_failure(conn, scope, key, exc)
            raise

    @staticmethod
    def _pipelinable(conn) -> bool:
        """Whether the run may open its transaction itself, with the claim (reserve_begin, or
        BEGIN + reserve pipelined) and complete with COMMIT in one round trip each (psycopg's
        pipeline mode, libpq 14 or later): no
        transaction open, not in pipeline mode, no isolation level / read-only / deferrable
        of psycopg's to carry; otherwise conn.transaction() carries them (claim())."""
        return (conn.info.transaction_status == TransactionStatus.IDLE and
                not conn.pgconn.pipeline_status and psycopg.Pipeline.is_supported() and
                conn.isolation_level is None and conn.read_only is None and
                conn.deferrable is None)

    def _begin_reserve(self, conn, scope, key):
        """The claim in one round trip, the values bound: reserve_begin where the server
        offers it (one statement; it opens the transaction for the outcome 'new' only, so a
        replay needs no COMMIT), else BEGIN and reserve pipelined. The reservation, or
        KeyInProgress / KeyMismatch / KeyTooOld for those outcomes."""
        check_usable(conn)
        params = reserve_params(scope, key, None, self.lock_ttl, self.retention,
                                self.lock_wait)
        check_encodable(conn, names(scope, key))
        worker = self._connection()
        try:
            if worker.reserve_begin is None:
                worker.reserve_begin = edition(conn).offers("reserve_begin")
            r = None
            if worker.reserve_begin:
                try:
                    note_round_trip()
                    cur = cursor_of(conn).execute(sql.RESERVE_BEGIN, params)
                    r = reservation_of(cur.fetchone(), cur)
                except psycopg.Error as e:
                    if not reserve_begin_refused(e):
                        raise
                    worker.reserve_begin = False
            if r is None:
                note_round_trip()
                with conn.pipeline():
                    conn.execute(sql.BEGIN)
                    cur = cursor_of(conn).execute(sql.RESERVE, params)
                r = reservation_of(cur.fetchone(), cur)
        except psycopg.Error as e:
            raise (lost_connection(conn, e) or translate(e)) from e
        raise_for(scope, key, r)
        return r

    @staticmethod
    def _end(conn, statements):
        """The run's last statements and COMMIT, in one round trip, the values bound."""
        try:
            pipelined(conn, statements)
        except psycopg.Error as e:
            raise (lost_connection(conn, e) or translate(e)) from e

    @staticmethod
    def _roll_back(conn):
        if not (conn.broken or conn.closed) and \
                conn.info.transaction_status != TransactionStatus.IDLE:
            note_round_trip()
            try:
                conn.execute(sql.ROLLBACK)
            except psycopg.Error:
                pass  # a broken connection: the server has rolled back already

    def _requeue_later(self, why):
        time.sleep(self.reconnect_pause)
        raise Reject(why, requeue=True)

    def _count_failure(self, conn, scope, key, exc):
        """Records the failure on the key: requeues the task below max_attempts, dead-letters
        it at max_attempts (the key is then recorded dead)."""
        try:
            outcome, attempt, doc = _record_failure(conn, scope, key, exc, self.max_attempts,
                                                    self.retention, self.lock_wait)
        except psycopg.Error:
            self._connection().drop()
            self._requeue_later("the failure could not be recorded")
        if outcome == "replay":
            return  # another worker has applied it meanwhile: the redelivery replays
        if doc is not None and doc["dead"]:
            raise Reject(f"{scope}/{key} failed {attempt} times, dead-lettered: "
                         f"{doc['error']}", requeue=False) from exc
        raise Reject(f"{scope}/{key} failed (attempt {attempt} of {self.max_attempts}): "
                     f"{doc['error'] if doc else exc}", requeue=True) from exc


def _ended_error(stored):
    return InvalidTransactionTermination(
        "the task body ended the run's transaction with COMMIT or ROLLBACK of its own: its "
        "writes before that were not committed together with the answer " +
        ("(the answer is stored now: a redelivery replays it)" if stored else
         "(and the answer could not be stored after it)"),
        hint="leave transaction control to the run: return to commit, raise to roll back")


def stored_result(conn, scope: str, key: str):
    """The return value stored for (scope, key), or None if the key is not completed."""
    from .keys import lookup
    record = lookup(conn, scope, key)
    if not record or record.get("state") != "completed":
        return None
    return (record.get("response") or {}).get(_RESULT)
