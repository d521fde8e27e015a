"""The decision flow of the HTTP middlewares (asgi.py, wsgi.py, django.py), written once.

The flow is sans-I/O: `Flow.handle` is a generator that yields each operation it needs done as
a tuple (function, *arguments) and gets back the result, or has the exception thrown in.
`run` drives it with plain calls (WSGI, Django), `run_async` awaits what the calls return
(ASGI), so one flow serves psycopg's sync and async connections alike. What differs between
the database handles (a psycopg connection, sync or async; Django's connection) is a session
(psycopg_session.py's, django_session.py's): how a transaction begins, how the claim and the
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

The statement form (the statement= option, statement_form.py) takes the place of the claim and
the application. Every answer of the middleware's own is built by answers.py.
"""
from __future__ import annotations

import inspect
import logging
import time

from .answers import (DATABASE_UNAVAILABLE, NOT_STORED, answer_for, outcome_answer,
                      stored_answer, stored_response)
from .errors import KeyMalformed
from .keys import execute_once_params, reserve_begin_refused, reserve_params
from .observe import counting_round_trips, observing, tell
from .sessions import StaleConnection
from .statement_form import answer_statement
from .web import Context, RequestInfo, options_from

log = logging.getLogger("pg_idempotency")


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

class _Seen:
    """What a request's claim came to, for observe.py: its scope and key once read, the
    outcome and attempt once the server answered."""
    scope = key = outcome = attempt = None


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
        one. Returns an Answer, or an Outgoing (a replay, the application's answer) to send.
        Observed (observe.py) as helper "middleware" once the key is read, with the status
        answered."""
        if not observing():
            return (yield from self._handle(req, session, run_app, None))
        seen = _Seen()
        with counting_round_trips():
            start = time.perf_counter()
            try:
                answer = yield from self._handle(req, session, run_app, seen)
            except BaseException as e:
                if seen.scope is not None:
                    tell("middleware", seen.scope, seen.key, seen.outcome, seen.attempt, start,
                         e)
                raise
            if seen.scope is not None:
                tell("middleware", seen.scope, seen.key, seen.outcome, seen.attempt, start,
                     None, answer.status)
        return answer

    def _handle(self, req, session, run_app, seen):
        opts = self.options
        on_connection = self._on_connection
        try:
            scope, key, request_hash = opts.identify(req)
            if seen is not None:
                seen.scope, seen.key = scope, key
            if opts.statement is not None:
                on_connection = self._answer_statement
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
                answer = yield from on_connection(session, scope, key, params, run_app, seen)
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

    def _on_connection(self, session, scope, key, params, run_app, seen):
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
        if seen is not None:
            seen.outcome, seen.attempt = reservation.outcome, reservation.attempt
        if reservation.outcome != "new":
            yield from session.rollback()  # nothing open after reserve_begin: no round trip
            if reservation.outcome == "replay":
                return stored_response(opts, reservation, replayed=True)
            return outcome_answer(scope, key, reservation)

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

    def _answer_statement(self, session, scope, key, params, run_app, seen):
        """The statement form: execute_once answers; the application does not run."""
        return (yield from answer_statement(self.options, session, scope, key, params, seen))

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


