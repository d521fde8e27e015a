"""The extension versions the client declares, and what it says when the server's is missing
or older: an ExtensionVersionError naming both versions, not an undefined function. Against
databases of their own: one with the extension at 0.2.0 (the oldest supported, without
claim_once), one without it."""
import os

import psycopg
import pytest

import pg_idempotency
from pg_idempotency import ExtensionVersionError, check_extension
from conftest import conninfo

OLD_DB = "pyclient_versions_old"
NONE_DB = "pyclient_versions_none"


@pytest.fixture(scope="module")
def old_and_none():
    with psycopg.connect(conninfo(os.environ.get("PGDATABASE", "postgres")),
                         autocommit=True) as admin:
        for db in (OLD_DB, NONE_DB):
            admin.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
            admin.execute(f"CREATE DATABASE {db}")
    with psycopg.connect(conninfo(OLD_DB), autocommit=True) as c:
        c.execute("CREATE EXTENSION idempotency VERSION '0.2.0'")
    yield conninfo(OLD_DB), conninfo(NONE_DB)
    with psycopg.connect(conninfo(os.environ.get("PGDATABASE", "postgres")),
                         autocommit=True) as admin:
        for db in (OLD_DB, NONE_DB):
            admin.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")


def test_declared_versions_match_the_package():
    assert pg_idempotency.__version__ == pg_idempotency.CLIENT_VERSION
    oldest, newest = pg_idempotency.EXTENSION_VERSIONS
    assert oldest == "0.2.0"
    assert newest == pg_idempotency.CLIENT_VERSION


def test_current_server_passes(conn):
    assert check_extension(conn) == pg_idempotency.EXTENSION_VERSIONS[1]


def test_older_server_named_with_both_versions(old_and_none):
    with psycopg.connect(old_and_none[0], autocommit=True) as c:
        assert check_extension(c) == "0.2.0"  # the oldest supported passes the default check
        with pytest.raises(ExtensionVersionError) as info:
            check_extension(c, "0.3.0")
        assert info.value.server_version == "0.2.0" and info.value.needed == "0.3.0"
        assert "version 0.2.0, older than 0.3.0" in str(info.value)
        assert "ALTER EXTENSION idempotency UPDATE" in str(info.value)


def test_missing_function_says_which_version_it_needs(old_and_none):
    with psycopg.connect(old_and_none[0], autocommit=True) as c:
        with pytest.raises(ExtensionVersionError) as info:
            pg_idempotency.claim_once(c, "acct", "k-1")
        err = info.value
        assert err.sqlstate == "42883" and err.needed == "0.3.0"
        assert "idempotency.claim_once does not exist on this server" in str(err)
        assert "needs extension version 0.3.0 or later" in str(err)
        assert isinstance(err.pgerror, psycopg.errors.UndefinedFunction)


def test_database_without_the_extension(old_and_none):
    with psycopg.connect(old_and_none[1], autocommit=True) as c:
        with pytest.raises(ExtensionVersionError) as info:
            check_extension(c)
        assert info.value.server_version is None
        assert "not installed in this database" in str(info.value)
        assert "CREATE EXTENSION idempotency" in str(info.value)
        with pytest.raises(ExtensionVersionError) as info:
            pg_idempotency.claim_once(c, "acct", "k-1")
        assert info.value.sqlstate == "3F000"
        assert "not installed in this database" in str(info.value)
