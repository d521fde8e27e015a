"""The connection layer against the installed psycopg: every internal of psycopg and libpq that
pg_idempotency/connection.py uses is there and behaves as that module relies on, and the
psycopg is one of the versions the module says it is tested with. An upgrade of psycopg that
breaks the layer fails here, naming what is missing."""
import psycopg
import pytest
from psycopg.pq import ConnStatus, Escaping, ExecStatus

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
    (lambda conn: type(conn.pgconn), "exec_", "psycopg.pq.PGconn.exec_"),
    (lambda conn: type(conn.pgconn), "pipeline_status", "psycopg.pq.PGconn.pipeline_status"),
    (lambda conn: Escaping, "escape_literal", "psycopg.pq.Escaping.escape_literal"),
    (lambda conn: psycopg.pq.PGresult, "get_value", "psycopg.pq.PGresult.get_value"),
    (lambda conn: psycopg.errors, "error_from_result", "psycopg.errors.error_from_result"),
    (lambda conn: conn, "lock", "psycopg.Connection.lock"),
])
def test_a_missing_internal_is_named(conn, monkeypatch, owner, attribute, name):
    monkeypatch.delattr(owner(conn), attribute)
    assert connection.missing_internals(conn) == [name]


def test_exec_sends_several_statements_as_one_query_and_returns_the_last_result(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        with conn.lock:
            result = conn.pgconn.exec_(b"BEGIN; SELECT 't'::boolean")
        assert result.status == ExecStatus.TUPLES_OK and result.get_value(0, 0) == b"t"
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        conn.execute("ROLLBACK")


def test_a_failed_result_becomes_psycopgs_typed_error(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        result = conn.pgconn.exec_(b"SELECT 1/0")
        assert result.status == ExecStatus.FATAL_ERROR
        assert conn.pgconn.status == ConnStatus.OK and b"division by zero" in result.error_message
        e = psycopg.errors.error_from_result(result, encoding=conn.info.encoding)
        assert isinstance(e, psycopg.errors.DivisionByZero) and e.sqlstate == "22012"


@pytest.mark.parametrize("text", ["plain", "it's", "back\\slash", "ä\u00a5€", "' OR 1=1 --"])
def test_escape_literal_gives_back_the_text(dsn, text):
    with psycopg.connect(dsn, autocommit=True) as conn:
        literal = Escaping(conn.pgconn).escape_literal(text.encode(conn.info.encoding))
        result = conn.pgconn.exec_(b"SELECT " + literal)
        assert result.status == ExecStatus.TUPLES_OK
        assert result.get_value(0, 0).decode(conn.info.encoding) == text


def test_pipeline_status_and_client_encoding(conn):
    assert not conn.pgconn.pipeline_status
    with conn.pipeline():
        assert conn.pgconn.pipeline_status
    assert conn.pgconn.parameter_status(b"client_encoding").decode() == \
        conn.execute("SHOW client_encoding").fetchone()[0]
    conn.rollback()
