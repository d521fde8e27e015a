"""The versions of the idempotency extension this client works with, and the check of a
server's: a server whose extension is missing or older says so, naming both versions, instead
of failing later with an undefined function."""
from __future__ import annotations

import re
import weakref
from dataclasses import dataclass, field
from typing import Optional

import psycopg

from . import statements
from .errors import IdempotencyError
from .observe import note_round_trip

CLIENT_VERSION = "0.4.0"
# The oldest and the newest extension version this client is tested against. Before 0.3.0 the
# helpers that need a newer function (below) are refused; everything else works.
EXTENSION_VERSIONS = ("0.2.0", "0.4.0")
# Functions the client calls that came after the oldest version: the version that added each.
FUNCTION_SINCE = {"claim_once": "0.3.0", "reserve_begin": "0.3.0", "execute_once": "0.3.0"}

_SUPPORTED = f"{EXTENSION_VERSIONS[0]} to {EXTENSION_VERSIONS[1]}"


def parse_version(version: str) -> tuple:
    """'0.3.0' -> (0, 3, 0); a part that is not a number ends the tuple."""
    parts = []
    for part in str(version).split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts)


class ExtensionVersionError(IdempotencyError, psycopg.ProgrammingError):
    """The server's idempotency extension is missing or older than this client needs.
    `server_version` is the installed version (None: not installed, or unknown), `needed` the
    oldest version that serves the call. `sqlstate` is the server's (42883 for a missing
    function, 3F000 for a missing schema), or 42883 from check_extension. Also a
    psycopg.ProgrammingError (as psycopg's UndefinedFunction is), so handlers of that keep
    working."""
    sqlstate = "42883"
    http_status = 500

    def __init__(self, message, server_version=None, needed=None, sqlstate=None, pgerror=None,
                 hint=None):
        super().__init__(message, hint=hint or "ALTER EXTENSION idempotency UPDATE (as its "
                         "owner) after installing the newer extension package",
                         sqlstate=sqlstate, pgerror=pgerror)
        self.server_version = server_version
        self.needed = needed


def server_extension_version(conn) -> str | None:
    """The version of the idempotency extension created in conn's database, or None."""
    row = conn.execute(statements.EXTENSION_VERSION).fetchone()
    return row[0] if row else None


def check_extension(conn, needed: str | None = None) -> str:
    """The server's extension version, once it is at least `needed` (default: the oldest this
    client supports); ExtensionVersionError, naming both versions, otherwise."""
    needed = needed or EXTENSION_VERSIONS[0]
    version = server_extension_version(conn)
    if version is None:
        raise ExtensionVersionError(
            f"the idempotency extension is not installed in this database; pg_idempotency "
            f"{CLIENT_VERSION} needs extension version {needed} or later (it works with "
            f"{_SUPPORTED})", None, needed,
            hint="CREATE EXTENSION idempotency (as a superuser)")
    if parse_version(version) < parse_version(needed):
        raise ExtensionVersionError(
            f"the server's idempotency extension is version {version}, older than {needed}, "
            f"which pg_idempotency {CLIENT_VERSION} needs (it works with {_SUPPORTED})",
            version, needed)
    return version


_MISSING_FUNCTION = re.compile(r'function idempotency\.(\w+)\(')


def missing_from_server(err) -> ExtensionVersionError | None:
    """For a server error saying that a function of schema idempotency (42883), or the schema
    (3F000), does not exist: the ExtensionVersionError that says which version is needed."""
    state = getattr(err, "sqlstate", None)
    diag = getattr(err, "diag", None)
    message = (diag.message_primary if diag is not None else None) or str(err)
    if state == "3F000" and '"idempotency"' in message:
        return ExtensionVersionError(
            f"{message}: the idempotency extension is not installed in this database; "
            f"pg_idempotency {CLIENT_VERSION} works with extension versions {_SUPPORTED}",
            None, EXTENSION_VERSIONS[0], sqlstate=state, pgerror=err,
            hint="CREATE EXTENSION idempotency (as a superuser)")
    match = _MISSING_FUNCTION.search(message) if state == "42883" else None
    if match is None:
        return None
    needed = FUNCTION_SINCE.get(match.group(1), EXTENSION_VERSIONS[0])
    return ExtensionVersionError(
        f"idempotency.{match.group(1)} does not exist on this server: it needs extension "
        f"version {needed} or later, and the server's is older (pg_idempotency "
        f"{CLIENT_VERSION} works with extension versions {_SUPPORTED}; "
        f"pg_idempotency.check_extension(conn) names the server's)",
        None, needed, sqlstate=state, pgerror=err)


# The server's edition is told by one statement that raises nothing whatever is installed
# (statements.EDITION): the C++ extension (its functions are in language c), the managed edition
# (SQL and PL/pgSQL: created through pg_tle, or run with psql -f, when the schema's comment
# names it), or none; its version; and the functions of schema idempotency the session may
# execute.


@dataclass(frozen=True)
class Edition:
    """What the server offers. `name`: "extension" (the C++ extension), "managed" (the managed
    edition) or None (neither is installed in this database); `version`: the installed
    version (None when not installed); `installed_as`: "extension" (CREATE EXTENSION, through
    pg_tle for the managed edition) or "script" (the managed edition run with psql -f), None
    when not installed; `functions`: the names of the functions of schema idempotency this
    session may execute."""
    name: Optional[str] = None
    version: Optional[str] = None
    installed_as: Optional[str] = None
    functions: frozenset = field(default_factory=frozenset)

    def offers(self, function: str) -> bool:
        """Whether the server has idempotency.<function> and this session may execute it (the
        managed edition has no reserve_begin, emit or stats; an extension before 0.3.0 no
        claim_once)."""
        return function in self.functions

    @classmethod
    def of_row(cls, row) -> "Edition":
        """The edition of one result row of statements.EDITION."""
        name, version, installed_as, functions = row
        return cls(name, version, installed_as, frozenset(functions.split()))


# Editions detected, by the object they were asked of: a psycopg connection, or a pool (whose
# connections share a database and a role).
_detected: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _cached(source, refresh):
    if refresh:
        return None
    try:
        return _detected.get(source)
    except TypeError:  # an object that takes no weak reference: asked each time
        return None


def _remember(source, found: Edition) -> Edition:
    try:
        _detected[source] = found
    except TypeError:
        pass
    return found


def edition(conn, *, refresh: bool = False) -> Edition:
    """The edition of the database of conn (a psycopg Connection, or a psycopg_pool
    ConnectionPool: one of its connections is used): one query the first time, cached for that
    object from then on (refresh=True asks again, after ALTER EXTENSION UPDATE or a move
    between editions). In a transaction the caller has open, it is one more statement of it;
    otherwise its own, and it leaves no transaction open."""
    found = _cached(conn, refresh)
    if found is not None:
        return found
    if hasattr(conn, "connection") and not hasattr(conn, "execute"):  # a pool
        with conn.connection() as c:
            note_round_trip()
            row = c.execute(statements.EDITION).fetchone()
    elif conn.autocommit or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        note_round_trip()
        row = conn.execute(statements.EDITION).fetchone()
    else:  # its own statement, opening no transaction that the caller did not open
        conn.autocommit = True
        try:
            note_round_trip()
            row = conn.execute(statements.EDITION).fetchone()
        finally:
            conn.autocommit = False
    return _remember(conn, Edition.of_row(row))


async def edition_async(conn, *, refresh: bool = False) -> Edition:
    """edition() for a psycopg AsyncConnection or a psycopg_pool AsyncConnectionPool."""
    found = _cached(conn, refresh)
    if found is not None:
        return found
    if hasattr(conn, "connection") and not hasattr(conn, "execute"):  # a pool
        async with conn.connection() as c:
            note_round_trip()
            row = await (await c.execute(statements.EDITION)).fetchone()
    elif conn.autocommit or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        note_round_trip()
        row = await (await conn.execute(statements.EDITION)).fetchone()
    else:  # its own statement, opening no transaction that the caller did not open
        await conn.set_autocommit(True)
        try:
            note_round_trip()
            row = await (await conn.execute(statements.EDITION)).fetchone()
        finally:
            await conn.set_autocommit(False)
    return _remember(conn, Edition.of_row(row))
