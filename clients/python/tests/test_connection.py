"""The connection layer against the installed psycopg: every internal of psycopg and libpq that
pg_idempotency/connection.py uses is there and behaves as that module relies on, and the
psycopg is one of the versions the module says it is tested with. An upgrade of psycopg that
breaks the layer fails here, naming what is missing."""
import psycopg
import pytest

from pg_idempotency import connection


def driver():
    return f"psycopg {psycopg.__version__} ({psycopg.pq.__impl__}, libpq {psycopg.pq.version()})"


def test_psycopg_is_a_version_the_connection_layer_is_tested_with():
    assert psycopg.__version__ in connection.TESTED_PSYCOPG, (
        f"{driver()} is not among the versions pg_idempotency/connection.py is tested with "
        f"{connection.TESTED_PSYCOPG}: run this suite with it, then add it to TESTED_PSYCOPG")


def test_every_internal_the_connection_layer_uses_is_there(conn):
    missing = connection.missing_internals(conn)
    assert not missing, f"{driver()} lacks what pg_idempotency/connection.py uses: {missing}"


@pytest.mark.parametrize("owner, attribute, name", [
    (lambda conn: type(conn.pgconn), "pipeline_status", "psycopg.pq.PGconn.pipeline_status"),
    (lambda conn: type(conn.pgconn), "parameter_status", "psycopg.pq.PGconn.parameter_status"),
])
def test_a_missing_internal_is_named(conn, monkeypatch, owner, attribute, name):
    monkeypatch.delattr(owner(conn), attribute)
    assert connection.missing_internals(conn) == [name]


def test_pipeline_status_and_client_encoding(conn):
    assert not conn.pgconn.pipeline_status
    with conn.pipeline():
        assert conn.pgconn.pipeline_status
    assert conn.pgconn.parameter_status(b"client_encoding").decode() == \
        conn.execute("SHOW client_encoding").fetchone()[0]
    conn.rollback()
