"""The statement form of the middlewares (the statement= option), for an endpoint whose work is
one SQL statement: instead of the claim and the application, one call of
idempotency.execute_once in autocommit (one round trip for a new key and for a replay)
answers: a new key with the statement's result as the JSON body and the `status` option, the
other outcomes as the claim's. An error of the statement (or a server without execute_once,
named in the log) is a 500 with nothing stored: the key stays new. A step of the decision flow
(flow.py), run on its session."""
from __future__ import annotations

import logging

from .answers import NOT_STORED, answer_for, outcome_answer, stored_response
from .errors import KeyMalformed
from .sessions import StaleConnection
from .versions import missing_from_server

log = logging.getLogger("pg_idempotency")


def answer_statement(opts, session, scope, key, params, seen=None):
    """execute_once's answer to one request (a generator of the session's operations, as the
    flow's); seen (flow.py's, when observed) gets the claim's outcome and attempt."""
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
    if seen is not None:
        seen.outcome, seen.attempt = reservation.outcome, reservation.attempt
    if reservation.outcome not in ("new", "replay"):
        return outcome_answer(scope, key, reservation)
    # The first answer has the body and headers its replays send (a JSON body; none for
    # a statement without a row), without Idempotent-Replayed and replay_headers.
    return stored_response(opts, reservation, replayed=reservation.outcome == "replay")
