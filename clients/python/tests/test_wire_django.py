"""No value in any statement text on Django's connection either: psycopg2, the driver of
Django's backend here, writes every value into the text of a simple Query; the Django
middleware's statements go through libpq with their values bound (libpq_bound). Watched on the
wire with libpq's trace of psycopg2's own connection, as test_wire.py watches psycopg's."""
import ctypes
import ctypes.util
import json

import psycopg
import pytest

from test_middleware import django_harness, django_setup, orders_table  # noqa: F401
from test_wire import MARK, marked

from pg_idempotency import observe

pytest.importorskip("django")


class Trace:
    """libpq's trace (PQtrace) of one psycopg2 connection, into a file."""

    def __init__(self, pgconn_ptr, path):
        self.libpq = ctypes.CDLL(ctypes.util.find_library("pq") or "libpq.so.5")
        self.libc = ctypes.CDLL(ctypes.util.find_library("c"))
        self.libc.fopen.restype = ctypes.c_void_p
        self.libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
        self.libc.fclose.argtypes = [ctypes.c_void_p]
        self.libpq.PQtrace.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        self.libpq.PQsetTraceFlags.argtypes = [ctypes.c_void_p, ctypes.c_int]
        self.path = path
        self.file = self.libc.fopen(str(path).encode(), b"w")
        self.libpq.PQtrace(ctypes.c_void_p(pgconn_ptr), self.file)
        self.libpq.PQsetTraceFlags(ctypes.c_void_p(pgconn_ptr), 3)  # no timestamps, regress

    def close(self):
        """After the connection is closed (libpq writes to the file until then)."""
        self.libc.fclose(self.file)

    def messages(self):
        lines = self.path.read_text(encoding="utf-8", errors="replace").splitlines()
        return [(line.split("\t")[2], line) for line in lines
                if line.startswith("F\t") and len(line.split("\t")) > 2]


@pytest.fixture
def traced_django(orders_table, tmp_path):  # noqa: F811
    """Every connection Django makes for its default database, traced."""
    from django.db import connections
    from django.db.backends.signals import connection_created
    django_setup(psycopg.conninfo.conninfo_to_dict(orders_table)["dbname"])
    traces = []

    def on_created(sender, connection, **kwargs):
        if connection.alias == "default":
            traces.append(Trace(connection.connection.pgconn_ptr, tmp_path / f"{len(traces)}"))
    connection_created.connect(on_created)
    yield traces
    connection_created.disconnect(on_created)
    connections.close_all()
    for t in traces:
        t.close()


def test_django_middleware_binds_every_value(traced_django):
    from django.db import connections
    harness = django_harness()
    key, account = marked(), marked()
    events = []
    observe.add_claim_listener(events.append)
    try:
        first = harness.post(key=key, account=account, body={"item": "widget"})
        assert first.status == 201, first.body
        again = harness.post(key=key, account=account, body={"item": "widget"})
        assert again.status == 201 and again.headers.get("idempotent-replayed") == "true"
        reused = harness.post(key=key, account=account, body={"item": "other"})
        assert reused.status == 422
    finally:
        observe.remove_claim_listener(events.append)
    connections.close_all()
    messages = [m for t in traced_django for m in t.messages()]
    assert messages, "nothing traced"
    # the events' round trips are the wire's (a Sync or simple Query each: psycopg2's BEGIN,
    # the statement that makes psycopg2 open the transaction, reserve, complete, COMMIT or
    # ROLLBACK) but the view's INSERT
    own = [line for kind, line in messages if kind in ("Sync", "Query") and
           "INSERT INTO orders" not in line]
    assert [(e.outcome, e.round_trips) for e in events] == [
        ("new", 5), ("replay", 4), ("mismatch", 4)]
    assert sum(e.round_trips for e in events) == len(own)
    # the client's statements are those that call the extension (the view's INSERT is the
    # application's own, sent by psycopg2 as it sends it)
    texts = [line for kind, line in messages
             if kind in ("Parse", "Query") and "idempotency." in line]
    assert texts, "no statement of the client was traced"
    assert not [t for t in texts if MARK in t], "a value was sent as statement text"
    bound = [line for kind, line in messages if kind == "Bind"]
    assert any(MARK in b for b in bound), "the marked values were not sent at all"
    assert json.loads(first.body_bytes) == first.body
