"""The key calls (reserve, complete, fail, checkpoint, lookup) with typed results and typed
errors, the Reservation, the checks of scopes and keys, and the request hash."""
from __future__ import annotations

import dataclasses
import datetime as _dt
import re
from typing import Any, Optional

from psycopg.types.json import Jsonb

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
    """An interval parameter: a timedelta or a number of seconds as text, a text as it is."""
    if isinstance(v, _dt.timedelta):
        return f"{v.total_seconds()} seconds"
    if isinstance(v, (int, float)):
        return f"{v} seconds"
    return v


def reserve_params(scope, key, request_hash, lock_ttl, retention, wait):
    """reserve's parameters; KeyMalformed (a 400) for an empty scope or key, or one over 255
    bytes, before anything is sent."""
    check_names(scope, key)
    return (scope, key, request_hash, interval(lock_ttl), interval(retention), interval(wait))


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


def reserve(conn, scope, key, request_hash=None, *, lock_ttl="5 minutes",
            retention="24 hours", wait="0") -> Reservation:
    params = reserve_params(scope, key, request_hash, lock_ttl, retention, wait)
    check_encodable(conn, names(scope, key))
    cur = execute(conn, sql.RESERVE, params)
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
