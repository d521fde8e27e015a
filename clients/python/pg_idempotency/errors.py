"""Typed exceptions: one class per SQLSTATE of the error table of docs/reference.md, and the reserve outcomes
an HTTP layer answers with 409 / 422."""
from __future__ import annotations

import datetime as _dt
import math

import psycopg

# The classes of one SQLSTATE with nothing more to them (NullValueNotAllowed, StaleAttempt, ...)
# are generated from test/vectors/client.json: spec.py.
from .error_base import IdempotencyError
from .sessions import going_away
from .spec import *  # noqa: F401,F403
from .spec import (OUTCOME_SQLSTATES, SQLSTATE_ALIASES, TRANSLATED, InvalidParameterValue,
                   ProgramLimitExceeded)

# A server error of these SQLSTATEs becomes the class (the aliases count as the SQLSTATE they
# stand for; claim_once's IK003 / IK004, the outcomes' errors, are added below).
BY_SQLSTATE = {cls.sqlstate: cls for cls in TRANSLATED}
BY_SQLSTATE.update({alias: BY_SQLSTATE[code] for alias, code in SQLSTATE_ALIASES.items()})


class ConnectionLost(IdempotencyError, psycopg.OperationalError):
    """08006: the connection broke (a server restart, a terminated backend, a cut network) or is
    closed. The server rolled the open transaction back, unless the break came during COMMIT:
    then a retry with the same key tells (it replays). `http_status` is 503. Also a
    psycopg.OperationalError, so handlers of that keep working."""
    sqlstate = "08006"
    http_status = 503


def lost_connection(conn, err: Exception):
    """ConnectionLost for an OperationalError of a broken or closed connection, or one whose
    SQLSTATE says the server is going away (class 08, 57P01-57P03): libpq hands over a
    terminated session's error before it has read the socket's close, so the connection can
    still look usable then. Else None."""
    if isinstance(err, ConnectionLost):
        return err
    if isinstance(err, psycopg.OperationalError) and (
            conn.broken or conn.closed or going_away(getattr(err, "sqlstate", None))):
        return ConnectionLost(f"the connection to the server was lost: {err}".strip(), pgerror=err)
    return None


def translate(err: psycopg.Error) -> Exception:
    """The typed exception for a psycopg error (the error itself for an unlisted SQLSTATE)."""
    cls = BY_SQLSTATE.get(err.sqlstate or "")
    if cls is None:
        from .versions import missing_from_server  # (imports this module)
        return missing_from_server(err) or err
    diag = err.diag
    message = diag.message_primary or str(err)
    if issubclass(cls, OutcomeError):
        # claim_once's IK003 / IK004: reserve's outcomes as errors (no reservation to carry).
        typed = cls(None, None, None, message)
        typed.detail, typed.hint, typed.sqlstate, typed.pgerror = (
            diag.message_detail, diag.message_hint, err.sqlstate, err)
        return typed
    return cls(message, diag.message_detail, diag.message_hint, sqlstate=err.sqlstate,
               pgerror=err)


class KeyMalformed(IdempotencyError, ValueError):
    """A key or scope the server would refuse, or a missing or malformed Idempotency-Key
    header: a 400, refused before any query. `code` is the error of the HTTP answer:
    idempotency_key_missing, idempotency_key_malformed or idempotency_scope_malformed."""
    http_status = 400

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


class KeyEmpty(KeyMalformed, InvalidParameterValue):
    """An empty key or scope (the server's 22023)."""


class KeyTooLong(KeyMalformed, ProgramLimitExceeded):
    """A key or scope over 255 bytes (the server's 54000)."""


class UntranslatableCharacter(IdempotencyError, ValueError):
    """A text value (a consumer or partition name, a recovery point) that holds a NUL, or that
    the session's client_encoding cannot carry as it is: a character the encoding lacks, or one
    its codec would send as other characters (Python's EUC_JP and SJIS codecs send U+00A5 as
    the byte 0x5C, which the server reads as a backslash). Refused before any query (22P05, as
    the server's own "has no equivalent in encoding")."""
    sqlstate = "22P05"


class KeyUntranslatable(KeyMalformed, UntranslatableCharacter):
    """A key or scope the session's client_encoding cannot carry as it is (see
    UntranslatableCharacter): a 400 for the HTTP layer, as any malformed key."""


class PositionBelowWatermark(IdempotencyError):
    """apply_once(..., strict=True) got a position below the partition's watermark: a message
    that arrived out of order (or an older one redelivered), which accept would skip without a
    word. Nothing was applied; `watermark` is the stored position."""

    def __init__(self, consumer, partition, position, watermark):
        super().__init__(f'position {position} of partition "{partition}" (consumer '
                         f'"{consumer}") is below its watermark {watermark}',
                         hint="accept fits partitions delivered in order; for messages that "
                              "arrive out of order, reserve one key per message id instead")
        self.consumer, self.partition = consumer, partition
        self.position, self.watermark = position, watermark


class PoisonMessage(IdempotencyError):
    """consume_once / apply_once with max_attempts: the message's work failed for the
    `attempt`-th time, its last allowed one. The failure is recorded on the key (`scope`, `key`;
    idempotency.failed_keys lists it as dead, with `error`, the document stored), and for a
    stream the watermark has moved past `position`: dead-letter the message (a queue: reject
    it without requeue; a stream: acknowledge it and go on). The work's exception is
    `__cause__`. Replaying it after a fix: docs/consumers.md, "Poison messages"."""

    def __init__(self, scope, key, attempt, error, partition=None, position=None):
        where = (f'position {position} of partition "{partition}"' if partition is not None
                 else f'message "{key}"')
        super().__init__(f'{where} (consumer "{scope}") failed {attempt} times: '
                         f'{error.get("error")}',
                         hint="dead-letter it; idempotency.failed_keys lists it with its error")
        self.scope, self.key, self.attempt, self.error = scope, key, attempt, error
        self.partition, self.position = partition, position


MAX_NAME_BYTES = 255


def check_names(scope, key):
    """KeyMalformed unless scope and key are each 1 to 255 bytes of UTF-8 (the server's rule);
    KeyUntranslatable for a text that is not valid Unicode (a lone surrogate)."""
    for what, value, code in (("scope", scope, "idempotency_scope_malformed"),
                              ("key", key, "idempotency_key_malformed")):
        if value is None:
            continue
        try:
            size = len(str(value).encode("utf-8"))
        except UnicodeEncodeError:
            raise KeyUntranslatable(code, f"the idempotency {what} is not valid Unicode text "
                                    "(it holds a lone surrogate)") from None
        if size == 0:
            raise KeyEmpty(code, f"the idempotency {what} must not be empty")
        if size > MAX_NAME_BYTES:
            raise KeyTooLong(code, f"the idempotency {what} is {size} bytes, over the limit "
                             f"of {MAX_NAME_BYTES}")


# ---- reserve outcomes that are not errors of the server ----

class OutcomeError(IdempotencyError):
    """A reserve that did not give the caller the key. `http_status` is what to answer."""
    http_status = 500
    outcome = ""

    def __init__(self, scope, key, reservation, message):
        super().__init__(message)
        self.scope = scope
        self.key = key
        self.reservation = reservation


class KeyInProgress(OutcomeError):
    """Another holder's claim is live: 409, retry after `retry_after` seconds (the time left on
    the holder's lease, or 1 while the holder is still inside its transaction). Also the
    server's IK003 (claim_once of a key another holder has; `reservation` is None)."""
    http_status = 409
    outcome = "in_progress"

    @property
    def retry_after(self) -> int:
        until = self.reservation.locked_until if self.reservation else None
        if until is None:
            return 1
        left = (until - _dt.datetime.now(_dt.timezone.utc)).total_seconds()
        return max(1, math.ceil(left))


class KeyMismatch(OutcomeError):
    """The key was used before with a different request: 422."""
    http_status = 422
    outcome = "mismatch"


class KeyTooOld(OutcomeError):
    """The key embeds a creation time older than the retention window: 422. Also the server's
    IK004 (claim_once of such a key; `reservation` is None)."""
    http_status = 422
    outcome = "too_old"


for _code, _outcome in OUTCOME_SQLSTATES.items():   # claim_once's IK003 / IK004
    BY_SQLSTATE[_code] = {"in_progress": KeyInProgress, "too_old": KeyTooOld}[_outcome]

__all__ = ["IdempotencyError", "ConnectionLost", "OutcomeError", "KeyInProgress", "KeyMismatch",
           "KeyTooOld", "TransactionAborted", "TransactionOpen", "KeyMalformed", "KeyEmpty",
           "KeyTooLong", "PositionBelowWatermark", "PoisonMessage", "UntranslatableCharacter",
           "KeyUntranslatable",
           "check_names", "translate", "BY_SQLSTATE",
           *(cls.__name__ for cls in set(BY_SQLSTATE.values()))]
