"""The base class of every error of the client (errors.py; the generated spec.py defines the
classes of one SQLSTATE on it)."""
from __future__ import annotations


class IdempotencyError(Exception):
    """Base class. `sqlstate`, `message`, `detail` and `hint` are the server's (or, for errors
    raised in the client, ours); `pgerror` is the psycopg exception, if any."""

    sqlstate: str | None = None

    def __init__(self, message, detail=None, hint=None, sqlstate=None, pgerror=None):
        super().__init__(message)
        self.message = message
        self.detail = detail
        self.hint = hint
        if sqlstate is not None:
            self.sqlstate = sqlstate
        self.pgerror = pgerror

    def __str__(self):
        parts = [self.message]
        if self.detail:
            parts.append("DETAIL: " + self.detail)
        if self.hint:
            parts.append("HINT: " + self.hint)
        return "\n".join(parts)
