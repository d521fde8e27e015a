"""The key calls (reserve, execute_once, complete, fail, checkpoint, lookup, forget) with typed results and typed
errors, the Reservation, the checks of scopes and keys, and the request hash."""
from __future__ import annotations

import dataclasses
import datetime as _dt
import decimal
import json
import math
import re
import uuid
from typing import Any, Optional

from psycopg.types.json import Json, Jsonb

from .spec import DEFAULT_LOCK_TTL, DEFAULT_RETENTION, DEFAULT_WAIT, DURATION_UNIT
from . import statements as sql
from .connection import check_encodable, execute, load_json
from .errors import KeyInProgress, KeyMismatch, KeyTooOld, check_names
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


def request_hash(body, exclude=()):
    """fingerprint(body, exclude), or None for None (no fingerprint check)."""
    return None if body is None else fingerprint(body, exclude)


def names(scope, key):
    """The (what, value) pairs of a scope and key, for check_encodable."""
    return (("scope", scope), ("key", key))


def interval(v):
    """An interval parameter: a timedelta or a number of seconds as the spec's duration text
    (whole microseconds, nothing rounded), a text as it is."""
    if isinstance(v, _dt.timedelta):
        micros = (v.days * 86_400 + v.seconds) * 1_000_000 + v.microseconds
        return f"{micros} {DURATION_UNIT}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v * 1_000_000} {DURATION_UNIT}"
    if isinstance(v, float):
        return f"{round(v * 1_000_000)} {DURATION_UNIT}"
    return v


def reserve_params(scope, key, request_hash, lock_ttl, retention, wait):
    """reserve's parameters; KeyMalformed (a 400) for an empty scope or key, or one over 255
    bytes, before anything is sent."""
    check_names(scope, key)
    return (scope, key, request_hash, interval(lock_ttl), interval(retention), interval(wait))


def statement_param(value) -> Optional[str]:
    """A parameter of execute_once's statement as the text the server reads for its type (the
    statement's cast or column says which): None is NULL; bool true / false; int, float and
    Decimal as numbers; str as it is; date, time and datetime in ISO 8601 (a naive datetime is
    read in the session's TimeZone by timestamptz); timedelta as an interval; UUID; bytes as
    bytea's hex form; dict, list, tuple (and psycopg's Json / Jsonb) as JSON text. Anything
    else is a TypeError: the text of an unknown type would be a guess."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return repr(value)
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, _dt.timedelta):
        return f"{value.days} days {value.seconds}.{value.microseconds:06d} seconds"
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "\\x" + bytes(value).hex()
    if isinstance(value, (Json, Jsonb)):
        value = value.obj
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    raise TypeError(f"a statement parameter of type {type(value).__name__} has no text form "
                    "here: pass it as str, or as a type the client converts")


def execute_once_params(scope, key, request_hash, statement, params, status_code, lock_ttl,
                        retention, wait):
    """execute_once's parameters, the statement's converted by statement_param; KeyMalformed
    (a 400) for an empty scope or key, or one over 255 bytes, before anything is sent."""
    if not isinstance(statement, str) or not statement.strip():
        raise TypeError("execute_once needs the statement as a non-empty str")
    texts = [statement_param(v) for v in (params or ())]
    return (scope, key, request_hash, statement, texts, status_code,
            *reserve_params(scope, key, request_hash, lock_ttl, retention, wait)[3:])


def reservation_of(row, cur=None) -> Reservation:
    """A row of statements.RESERVE or RESERVE_BEGIN as a Reservation: the response arrives as
    text and is loaded as JSON, as cur's connection loads jsonb when cur is given."""
    return Reservation(str(row[0]), row[1], load_json(cur, row[2]), *row[3:])


def reserve_begin_refused(e) -> bool:
    """Whether the server refused reserve_begin as a whole: one before 0.3.0 (42883), a role
    without EXECUTE on it (42501), keys distributed by Citus (0A000). BEGIN + reserve do the
    same in two statements."""
    return getattr(e, "sqlstate", None) in ("42883", "42501", "0A000") and \
        re.search(r"reserve_begin|shard", str(e)) is not None


def raise_for(scope, key, r: Reservation):
    """KeyInProgress / KeyMismatch / KeyTooOld for those outcomes; nothing for the others."""
    if r.outcome == "in_progress":
        raise KeyInProgress(scope, key, r, f'idempotency key "{key}" is in progress')
    if r.outcome == "mismatch":
        raise KeyMismatch(scope, key, r,
                          f'idempotency key "{key}" was used with a different request')
    if r.outcome == "too_old":
        raise KeyTooOld(scope, key, r,
                        f'idempotency key "{key}" is older than the retention window')


def reserve(conn, scope, key, request_hash=None, *, lock_ttl=DEFAULT_LOCK_TTL,
            retention=DEFAULT_RETENTION, wait=DEFAULT_WAIT) -> Reservation:
    params = reserve_params(scope, key, request_hash, lock_ttl, retention, wait)
    check_encodable(conn, names(scope, key))
    cur = execute(conn, sql.RESERVE, params)
    return reservation_of(cur.fetchone(), cur)


def execute_once(conn, scope, key, statement, params=(), request_hash=None, *,
                 status_code=201, lock_ttl=DEFAULT_LOCK_TTL, retention=DEFAULT_RETENTION, wait=DEFAULT_WAIT
                 ) -> Reservation:
    """idempotency.execute_once in the connection's current transaction (in autocommit if it
    has none open, and the connection is in autocommit): on the outcome 'new' the statement ran
    with its parameters bound, and the reservation carries status_code and its response. One
    round trip. Errors of the statement come out typed, as execute's."""
    args = execute_once_params(scope, key, request_hash, statement, params, status_code,
                               lock_ttl, retention, wait)
    check_encodable(conn, names(scope, key),
                    (("statement", statement),
                     *(("statement parameter", v) for v in args[4] if v is not None)))
    cur = execute(conn, sql.EXECUTE_ONCE, args)
    return reservation_of(cur.fetchone(), cur)


def complete(conn, scope, key, status_code, response, attempt=None):
    check_encodable(conn, names(scope, key))
    execute(conn, sql.COMPLETE, (scope, key, status_code, Jsonb(response), attempt))


def fail(conn, scope, key, error=None, attempt=None):
    check_encodable(conn, names(scope, key))
    execute(conn, sql.FAIL, (scope, key, None if error is None else Jsonb(error), attempt))


def checkpoint(conn, scope, key, recovery_point, attempt=None):
    check_encodable(conn, names(scope, key), (("recovery point", recovery_point),))
    execute(conn, sql.CHECKPOINT, (scope, key, recovery_point, attempt))


def lookup(conn, scope, key) -> Optional[dict]:
    """The key's record as a dict of idempotency.lookup's columns (response and last_error
    loaded as JSON), or None if there is none."""
    check_encodable(conn, names(scope, key))
    cur = execute(conn, sql.LOOKUP, (scope, key))
    row = cur.fetchone()
    if row is None:
        return None
    record = {d.name: v for d, v in zip(cur.description, row)}
    for name in ("response", "last_error"):
        record[name] = load_json(cur, record[name])
    return record


def forget(conn, scope, key) -> bool:
    """Deletes the key's record, whatever its state: the next reserve of it is 'new'. True if
    there was one. In the connection's current transaction, as the other calls."""
    check_encodable(conn, names(scope, key))
    return execute(conn, sql.FORGET, (scope, key)).fetchone()[0]
