"""The versions of the idempotency extension this client works with, and the check of a
server's: a server whose extension is missing or older says so, naming both versions, instead
of failing later with an undefined function."""
from __future__ import annotations

import re

import psycopg

from .errors import IdempotencyError

CLIENT_VERSION = "0.3.0"
# The oldest and the newest extension version this client is tested against. Before 0.3.0 the
# helpers that need a newer function (below) are refused; everything else works.
EXTENSION_VERSIONS = ("0.2.0", "0.3.0")
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
    row = conn.execute(
        "SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'idempotency'"
    ).fetchone()
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
