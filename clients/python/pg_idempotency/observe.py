"""What each call of run_once and run_external came to, for metrics and logs: listeners get a
ClaimEvent (the helper, the scope, the claim's outcome, the attempt, the call's time and what
it raised), and the logger "pg_idempotency.claims" a DEBUG record with the same fields as its
`idempotency` attribute. With no listener and that logger not enabled for DEBUG nothing is
measured.

    from pg_idempotency.observe import prometheus_metrics
    prometheus_metrics()   # idempotency_client_claims_total{helper, outcome}, ...

The key is left out (None) unless record_keys(True): keys may carry customer data."""
from __future__ import annotations

import dataclasses
import functools
import logging
import time
from typing import Callable, Optional

log = logging.getLogger("pg_idempotency.claims")
_listeners: list = []
_record_keys = False


@dataclasses.dataclass(frozen=True)
class ClaimEvent:
    """One helper call: outcome is new, replay, in_progress, mismatch or too_old, None when
    the call failed before the server answered the claim (a lost connection, say); error is
    what it raised (KeyInProgress is the 409, KeyMismatch the 422), None for new and replay."""
    helper: str
    scope: str
    key: Optional[str]
    outcome: Optional[str]
    attempt: Optional[int]
    seconds: float
    error: Optional[BaseException]


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


def observed(helper: str):
    """Decorates a helper f(conn, scope, key, ...) that returns a Result."""
    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(conn, scope, key, *args, **kwargs):
            if not _listeners and not log.isEnabledFor(logging.DEBUG):
                return fn(conn, scope, key, *args, **kwargs)
            start = time.perf_counter()
            try:
                result = fn(conn, scope, key, *args, **kwargs)
            except BaseException as e:
                reservation = getattr(e, "reservation", None)
                _tell(helper, scope, key, getattr(e, "outcome", None) or None,
                      getattr(reservation, "attempt", None), start, e)
                raise
            _tell(helper, scope, key, "replay" if result.replayed else "new", result.attempt,
                  start, None)
            return result
        return wrapper
    return decorate


def _tell(helper, scope, key, outcome, attempt, start, error):
    event = ClaimEvent(helper, scope, key if _record_keys else None, outcome, attempt,
                       time.perf_counter() - start, error)
    if log.isEnabledFor(logging.DEBUG):
        log.debug("%s %s: %s (attempt %s, %.3f s)", helper, scope, outcome or "error", attempt,
                  event.seconds, extra={"idempotency": dataclasses.asdict(event)})
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
