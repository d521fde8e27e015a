"""The Idempotency-Key header as Django middleware, on Django's own database connection: the
claim, the view's ORM writes and the stored answer commit in one transaction.

    # settings.py
    MIDDLEWARE = [..., "pg_idempotency.django.IdempotencyMiddleware"]
    IDEMPOTENCY = {"scope": lambda req: req.headers["x-account"], "lock_ttl": "30 seconds"}

    # a view: request.idempotency.key, .attempt; the ORM's writes are in the claim's transaction

IDEMPOTENCY takes the options of pg_idempotency.asgi.IdempotencyMiddleware (scope, key,
exclude, lock_ttl, retention, wait, store, replay_headers, applies, max_body) and `database`
(the alias, default "default"); the callables get a RequestInfo whose `raw` is the Django
request. Answers: those of the ASGI and WSGI middlewares.
"""
from __future__ import annotations

import json
import logging

from django.conf import settings
from django.db import DatabaseError, OperationalError, connections, transaction
from django.http import HttpResponse

from .client import Reservation, reserve_params
from .errors import KeyInProgress, KeyMismatch, KeyTooOld
from .web import (DATABASE_UNAVAILABLE, NOT_STORED, Answer, Context, RequestInfo, answer_for,
                  headers_of_replay, options_from, replay_of, stored_answer)

log = logging.getLogger("pg_idempotency")

_OUTCOMES = {"in_progress": KeyInProgress, "mismatch": KeyMismatch, "too_old": KeyTooOld}
_COMPLETE = "SELECT idempotency.complete(%s, %s, %s, %s::jsonb, %s)"
# The response as text: Django's backend loads jsonb as a string (for its JSONField).
_RESERVE = ("SELECT r.outcome::text, r.status_code, r.response::text, r.attempt, "
            "r.recovery_point, r.first_seen_at, r.locked_until, r.expires_at "
            "FROM idempotency.reserve(%s, %s, %s, %s::interval, %s::interval, %s::interval) r")


def _reservation(row) -> Reservation:
    response = None if row[2] is None else json.loads(row[2])
    return Reservation(row[0], row[1], response, *row[3:])


def _response(answer: Answer, extra=None) -> HttpResponse:
    response = HttpResponse(answer.encoded(), status=answer.status,
                            content_type="application/json")
    for name, value in {**answer.headers, **(extra or {})}.items():
        response[name] = str(value)
    return response


def _replay(opts, reservation) -> HttpResponse:
    replay = replay_of(reservation.response)
    response = HttpResponse(replay.body, status=reservation.status_code)
    del response["Content-Type"]                 # only if the first answer had one
    for name, value in headers_of_replay(opts, reservation.status_code, replay).items():
        response[name] = value
    return response


def _buffered(streaming) -> HttpResponse:
    response = HttpResponse(b"".join(streaming.streaming_content), status=streaming.status_code)
    for name, value in streaming.items():
        response[name] = value
    return response


def _connection_lost(e) -> bool:
    """Whether the driver's error is a lost connection (no SQLSTATE: nothing came back; 08:
    connection exceptions; 57P01-57P03: the server going away), not say a lock timeout."""
    code = getattr(e.__cause__, "pgcode", None) or getattr(e.__cause__, "sqlstate", None)
    return code is None or code.startswith("08") or code in ("57P01", "57P02", "57P03")


class _Rollback(Exception):
    """Leaves transaction.atomic with a rollback, carrying the answer to send."""

    def __init__(self, response):
        super().__init__()
        self.response = response


class IdempotencyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response
        config = dict(getattr(settings, "IDEMPOTENCY", {}))
        self.database = config.pop("database", "default")
        self.options = options_from(config.pop("scope", None), **config)

    def __call__(self, request):
        opts = self.options
        if not opts.applies_to(request.method, request.path):
            return self.get_response(request)
        headers = {k.lower(): v for k, v in request.headers.items()}
        req = RequestInfo(request.method, request.path, headers, request.body, request)
        try:
            scope, key, request_hash = opts.identify(req)
            params = reserve_params(scope, key, request_hash, **opts.reserve_options())
        except Exception as e:
            answer = answer_for(e)
            if answer is None:
                raise
            return _response(answer)
        # A connection that died while idle (the server restarted, the backend was
        # terminated) fails on the claim, its first statement. The claim commits nothing, so
        # the request is tried once more on a new connection.
        for tries in (1, 2):
            connected = connections[self.database].connection is not None
            handled = False
            try:
                with transaction.atomic(using=self.database):
                    with connections[self.database].cursor() as cursor:
                        cursor.execute(_RESERVE, params)
                        reservation = _reservation(cursor.fetchone())
                    if reservation.outcome == "replay":
                        raise _Rollback(_replay(opts, reservation))
                    if reservation.outcome != "new":
                        outcome = _OUTCOMES[reservation.outcome](scope, key, reservation,
                                                                 reservation.outcome)
                        raise _Rollback(_response(answer_for(outcome)))
                    request.idempotency = Context(connections[self.database], scope, key,
                                                  reservation.attempt,
                                                  reservation.recovery_point, reservation)
                    handled = True
                    response = self.get_response(request)  # Django turns exceptions into a 500
                    if response.streaming:
                        response = _buffered(response)
                    if not opts.store(response.status_code):
                        raise _Rollback(response)
                    with connections[self.database].cursor() as cursor:
                        cursor.execute(_COMPLETE, (scope, key, response.status_code,
                                                   json.dumps(stored_answer(
                                                       response.content, response.items(),
                                                       opts.keep_headers)),
                                                   reservation.attempt))
                return response                    # after COMMIT
            except _Rollback as r:
                return r.response
            except DatabaseError as e:
                if handled:
                    log.error('idempotency: the answer to key "%s" was not stored: %s', key, e)
                    return _response(NOT_STORED)
                lost = _connection_lost(e)     # psycopg2 raises some as a bare DatabaseError
                if isinstance(e, OperationalError) or lost:
                    if tries == 1 and lost and self._drop_if_broken(connected):
                        log.warning("idempotency: a connection was lost before the claim, "
                                    "trying a new one: %s", e)
                        continue
                    log.error("idempotency: the database is unreachable: %s", e)
                    return _response(DATABASE_UNAVAILABLE)
                raise
        return None  # not reached: the second try returns or raises

    def _drop_if_broken(self, connected: bool) -> bool:
        """Whether the claim failed on a connection made before (`connected`): one that broke
        while idle. It is closed, and the next statement connects anew. (psycopg2 does not
        always mark such a connection closed, and the claim committed nothing, so it is not
        asked first.)"""
        if not connected:
            return False                   # connecting failed: the database is unreachable
        conn = connections[self.database]
        # Closed inside the failed atomic block, Django keeps the dead connection object until
        # a later close(), which returns early while closed_in_transaction is set.
        conn.closed_in_transaction = False
        conn.needs_rollback = False
        conn.close()
        conn.connection = None
        return True

__all__ = ["IdempotencyMiddleware"]
