"""What the decision flow (flow.py) needs of a session, one request's database handle
(psycopg_session.py's psycopg connection, sync or async; django_session.py's Django
connection), besides the operations it yields: how a lost connection shows."""
from __future__ import annotations


def going_away(sqlstate) -> bool:
    """Class 08 (connection exceptions) or 57P01-57P03 (the server shutting down, crashed, or
    not yet accepting connections): the connection is gone, not the statement refused."""
    return sqlstate is not None and (sqlstate.startswith("08") or
                                     sqlstate in ("57P01", "57P02", "57P03"))


class StaleConnection(Exception):
    """The connection broke on the claim, its first statement (a pooled connection that died
    while idle: the server restarted, the backend was terminated). The claim commits nothing
    (a new key's transaction stays open for the application), so the request may be tried
    again on another connection."""

    def __init__(self, error):
        super().__init__(str(error))
        self.error = error
