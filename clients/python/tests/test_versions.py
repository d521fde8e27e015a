"""The extension versions the client declares, and what it says when the server's is missing
or older: an ExtensionVersionError naming both versions, not an undefined function. Against
databases of their own: one with the extension at 0.2.0 (the oldest supported, without
claim_once), one without it."""
import asyncio
import os

import psycopg
import pytest

import pg_idempotency
from pg_idempotency import Edition, ExtensionVersionError, check_extension, edition, edition_async
from conftest import EDITION, MANAGED, REASON_VERSIONS, ROOT, conninfo

OLD_DB = "pyclient_versions_old"
NONE_DB = "pyclient_versions_none"
SCRIPT_DB = "pyclient_versions_script"
DBS = (OLD_DB, NONE_DB, SCRIPT_DB)


@pytest.fixture(scope="module")
def old_and_none():
    """Databases with the extension at 0.2.0 (not on the managed edition, which has no 0.2.0),
    with nothing, and with the managed edition run as a plain script (psql -f)."""
    with psycopg.connect(conninfo(os.environ.get("PGDATABASE", "postgres")),
                         autocommit=True) as admin:
        for db in DBS:
            admin.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
            admin.execute(f"CREATE DATABASE {db}")
    if not MANAGED:
        with psycopg.connect(conninfo(OLD_DB), autocommit=True) as c:
            c.execute("CREATE EXTENSION idempotency VERSION '0.2.0'")
    script = (ROOT / "editions" / "managed" / "idempotency--0.4.0.sql").read_text("utf-8")
    with psycopg.connect(conninfo(SCRIPT_DB), autocommit=True) as c:
        c.execute(script.encode())  # bytes: sent as it is, several statements, no parameters
    yield conninfo(OLD_DB), conninfo(NONE_DB), conninfo(SCRIPT_DB)
    with psycopg.connect(conninfo(os.environ.get("PGDATABASE", "postgres")),
                         autocommit=True) as admin:
        for db in DBS:
            admin.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")


def test_declared_versions_match_the_package():
    assert pg_idempotency.__version__ == pg_idempotency.CLIENT_VERSION
    oldest, newest = pg_idempotency.EXTENSION_VERSIONS
    assert oldest == "0.2.0"
    assert newest == pg_idempotency.CLIENT_VERSION


def test_current_server_passes(conn):
    assert check_extension(conn) == pg_idempotency.EXTENSION_VERSIONS[1]


@pytest.mark.extension_only(REASON_VERSIONS)
def test_older_server_named_with_both_versions(old_and_none):
    with psycopg.connect(old_and_none[0], autocommit=True) as c:
        assert check_extension(c) == "0.2.0"  # the oldest supported passes the default check
        with pytest.raises(ExtensionVersionError) as info:
            check_extension(c, "0.3.0")
        assert info.value.server_version == "0.2.0" and info.value.needed == "0.3.0"
        assert "version 0.2.0, older than 0.3.0" in str(info.value)
        assert "ALTER EXTENSION idempotency UPDATE" in str(info.value)


@pytest.mark.extension_only(REASON_VERSIONS)
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


def test_edition_of_the_suites_database_asked_once(dsn):
    with psycopg.connect(dsn) as c:
        e = edition(c)
        assert isinstance(e, Edition)
        assert (e.name, e.version, e.installed_as) == (EDITION, pg_idempotency.CLIENT_VERSION,
                                                      "extension")
        assert e.offers("reserve") and e.offers("claim_once") and e.offers("fingerprint")
        assert not e.offers("no_such_function")
        assert e.offers("reserve_begin") == (not MANAGED)
        # asked outside a transaction, it opened none
        assert c.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert edition(c) is e  # cached: not asked again
        again = edition(c, refresh=True)
        assert again == e and again is not e


def test_edition_async(dsn):
    async def ask():
        async with await psycopg.AsyncConnection.connect(dsn) as c:
            e = await edition_async(c)
            assert c.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            assert await edition_async(c) is e
            return e
    assert asyncio.run(ask()).name == EDITION


def test_edition_of_a_database_without_either(old_and_none):
    with psycopg.connect(old_and_none[1], autocommit=True) as c:
        assert edition(c) == Edition(None, None, None, frozenset())


def test_edition_of_the_plain_script(old_and_none):
    with psycopg.connect(old_and_none[2], autocommit=True) as c:
        e = edition(c)
        assert (e.name, e.version, e.installed_as) == (
            "managed", pg_idempotency.CLIENT_VERSION, "script")
        assert e.offers("reserve") and e.offers("maintain")
        assert not e.offers("reserve_begin") and not e.offers("emit")


@pytest.mark.extension_only(REASON_VERSIONS)
def test_edition_of_the_extension_at_0_2_0(old_and_none):
    with psycopg.connect(old_and_none[0], autocommit=True) as c:
        e = edition(c)
        assert (e.name, e.version, e.installed_as) == ("extension", "0.2.0", "extension")
        assert e.offers("reserve") and not e.offers("claim_once")


def test_a_role_is_offered_what_it_may_execute(dsn):
    with psycopg.connect(dsn) as c:
        c.execute("CREATE ROLE pyclient_edition_role")
        c.execute("GRANT USAGE ON SCHEMA idempotency TO pyclient_edition_role")
        c.execute("GRANT pyclient_edition_role TO CURRENT_USER")  # SET ROLE, as a non-superuser
        c.execute("SET LOCAL ROLE pyclient_edition_role")
        e = edition(c, refresh=True)
        assert e.name == EDITION
        assert e.offers("fingerprint")  # granted to every role
        assert not e.offers("reserve") and not e.offers("reserve_begin")  # operations.md
        c.rollback()
