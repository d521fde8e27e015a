"""What each claim came to, for metrics and logs: every helper that claims a key (run_once,
run_external, claim, claim_once, consume_once, apply_once, the outbox consumer's messages, a
Celery ExactlyOnceTask's runs: helper "celery") and each request of the HTTP middlewares
(ASGI, WSGI, Django: helper "middleware", with the status answered) tells listeners a
ClaimEvent (the helper, the scope, the claim's outcome, the attempt, the call's round trips to
the server, its time and what it raised), and the logger "pg_idempotency.claims" a DEBUG
record with the same fields as its `idempotency` attribute. With no listener and that logger not enabled for DEBUG nothing is
measured: one test per call.

    from pg_idempotency.observe import prometheus_metrics
    prometheus_metrics()   # idempotency_client_claims_total{helper, outcome}, ...

The key is left out (None) unless record_keys(True): keys may carry customer data."""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import logging
import time
from typing import Callable, Optional

log = logging.getLogger("pg_idempotency.claims")
_listeners: list = []
_record_keys = False
# The round trips of the helper call being observed: a one-element list (a mutable holder, so
# that a copied context, such as asgiref's thread for a sync call, still adds to it), None
# when no call is observed.
_round_trips: contextvars.ContextVar = contextvars.ContextVar("idempotency_round_trips",
                                                              default=None)


@dataclasses.dataclass(frozen=True)
class ClaimEvent:
    """One helper call: outcome is new, replay, in_progress, mismatch or too_old, None when
    the call failed before the server answered the claim (a lost connection, say); attempt is
    the claim's (claim_once, consume_once and apply_once have none but a poison message's);
    error is what it raised (KeyInProgress is the 409, KeyMismatch the 422), None for new and
    replay; status is the HTTP status the middleware answered with (a 409 or 422 of its own is
    an answer there, not an error), None for the other helpers; round_trips is the number of
    statements or pipelined batches the helper itself sent (each one round trip to the server:
    the server's edition, asked once per connection, included; the work's own statements
    not), as Node's span attribute idempotency.round_trips."""
    helper: str
    scope: str
    key: Optional[str]
    outcome: Optional[str]
    attempt: Optional[int]
    seconds: float
    error: Optional[BaseException]
    status: Optional[int] = None
    round_trips: int = 0


def add_claim_listener(listener: Callable[[ClaimEvent], None]) -> None:
    """Calls listener(event) after each helper call, in the caller's thread (keep it quick);
    a listener that raises is logged, never the call's failure."""
    _listeners.append(listener)


def remove_claim_listener(listener: Callable[[ClaimEvent], None]) -> None:
    _listeners.remove(listener)


def record_keys(on: bool) -> None:
    """Whether events (and log records) carry the key."""
    global _record_keys
    _record_keys = bool(on)


def observing() -> bool:
    """Whether claims are observed now (a listener, or the logger enabled for DEBUG)."""
    return bool(_listeners) or log.isEnabledFor(logging.DEBUG)


def note_round_trip(n: int = 1) -> None:
    """Counts n round trips of the helper call being observed (the connection layer calls it
    per statement or pipelined batch it sends); nothing when no call is observed."""
    count = _round_trips.get()
    if count is not None:
        count[0] += n


@contextlib.contextmanager
def counting_round_trips():
    """The block's round trips counted apart (a helper's work that calls another helper
    does not add that one's to its own): tell() inside it reports them."""
    token = _round_trips.set([0])
    try:
        yield
    finally:
        _round_trips.reset(token)


def _result_claim(result):
    return "replay" if result.replayed else "new", result.attempt


def _applied_claim(applied):
    """A consumer's answer: True applied (a new key), False a redelivery (a replay)."""
    return "new" if applied else "replay", None


def _third_argument(args, kwargs):
    return args[0] if args else kwargs.get("key")


def observed(helper: str, claim_of=_result_claim, key_of=_third_argument):
    """Decorates a helper f(conn, scope, ...): claim_of(result) gives (outcome, attempt)
    (default: a Result's); key_of(args, kwargs) the key from the arguments after the scope
    (default: the first of them, or key=), asked only when events carry the key."""
    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(conn, scope, *args, **kwargs):
            if not _listeners and not log.isEnabledFor(logging.DEBUG):
                return fn(conn, scope, *args, **kwargs)
            key = key_of(args, kwargs) if _record_keys else None
            with counting_round_trips():
                start = time.perf_counter()
                try:
                    result = fn(conn, scope, *args, **kwargs)
                except BaseException as e:
                    tell_error(helper, scope, key, start, e)
                    raise
                outcome, attempt = claim_of(result)
                tell(helper, scope, key, outcome, attempt, start, None)
            return result
        return wrapper
    return decorate


def observed_consumer(helper: str, key_of=_third_argument):
    """observed for a consumer helper, which answers True (applied) or False (a redelivery)."""
    return observed(helper, _applied_claim, key_of)


def tell_error(helper, scope, key, start, error):
    """tell() for a call that raised error: its outcome and attempt, if it has them (an
    OutcomeError's, a PoisonMessage's attempt)."""
    reservation = getattr(error, "reservation", None)
    attempt = getattr(reservation, "attempt", None)
    if attempt is None:
        attempt = getattr(error, "attempt", None)
    tell(helper, scope, key, getattr(error, "outcome", None) or None, attempt, start, error)


def tell(helper, scope, key, outcome, attempt, start, error, status=None):
    """Tells the listeners and the log of a call that began at start (time.perf_counter()),
    with the round trips counted so far (inside counting_round_trips())."""
    count = _round_trips.get()
    event = ClaimEvent(helper, scope, key if _record_keys else None, outcome, attempt,
                       time.perf_counter() - start, error, status,
                       0 if count is None else count[0])
    if log.isEnabledFor(logging.DEBUG):
        log.debug("%s %s: %s (attempt %s, %d round trips, %.3f s)", helper, scope,
                  outcome or "error", attempt, event.round_trips, event.seconds,
                  extra={"idempotency": dataclasses.asdict(event)})
    for listener in list(_listeners):
        try:
            listener(event)
        except Exception:
            log.exception("a claim listener failed")


def prometheus_metrics(registry=None):
    """Registers, with prometheus_client (Debian's python3-prometheus-client), the counter
    idempotency_client_claims_total and the histogram idempotency_client_call_seconds, by
    helper and outcome ("error" when there is none), and a listener that feeds them; returns
    (listener, counter, histogram). registry: prometheus_client's default one if None."""
    import prometheus_client

    kwargs = {} if registry is None else {"registry": registry}
    claims = prometheus_client.Counter(
        "idempotency_client_claims", "Helper calls by outcome of their claim",
        ["helper", "outcome"], **kwargs)
    seconds = prometheus_client.Histogram(
        "idempotency_client_call_seconds", "Time of a helper call, the work included",
        ["helper", "outcome"], **kwargs)

    def listener(event: ClaimEvent) -> None:
        outcome = event.outcome or "error"
        claims.labels(event.helper, outcome).inc()
        seconds.labels(event.helper, outcome).observe(event.seconds)

    add_claim_listener(listener)
    return listener, claims, seconds
