"""Tests run against the cluster in the PG* environment (scripts/test.sh's test cluster):
databases pyclient_test (source, keys) and pyclient_target (the consumer's database) are
created afresh. With IDEM_TEST_DB_SETUP set (test/citus/clients.sh), that command is then run
with each database's name (there: it makes the database a Citus one)."""
import os
import pathlib
import subprocess
import sys

import psycopg
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
try:
    import pg_idempotency  # noqa: F401  (installed: scripts/test.sh tests the installed package)
except ImportError:
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # the source tree

SOURCE_DB = "pyclient_test"
TARGET_DB = "pyclient_target"


def conninfo(dbname):
    return psycopg.conninfo.make_conninfo(dbname=dbname)


@pytest.fixture(scope="session")
def databases():
    with psycopg.connect(conninfo(os.environ.get("PGDATABASE", "postgres")),
                         autocommit=True) as admin:
        for slot in admin.execute("SELECT slot_name FROM pg_replication_slots WHERE database "
                                  "IN (%s, %s)", (SOURCE_DB, TARGET_DB)).fetchall():
            admin.execute("SELECT pg_drop_replication_slot(%s)", slot)
        for db in (SOURCE_DB, TARGET_DB):
            admin.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
            admin.execute(f"CREATE DATABASE {db}")
    for db in (SOURCE_DB, TARGET_DB):
        with psycopg.connect(conninfo(db), autocommit=True) as c:
            c.execute("CREATE EXTENSION idempotency")
        if os.environ.get("IDEM_TEST_DB_SETUP"):
            subprocess.run([os.environ["IDEM_TEST_DB_SETUP"], db], check=True)
    return conninfo(SOURCE_DB), conninfo(TARGET_DB)


@pytest.fixture
def dsn(databases):
    return databases[0]


@pytest.fixture
def conn(dsn):
    c = psycopg.connect(dsn)
    yield c
    c.close()


@pytest.fixture
def conn2(dsn):
    c = psycopg.connect(dsn)
    yield c
    c.close()


@pytest.fixture
def vectors():
    import json
    path = ROOT / "test" / "vectors" / "fingerprint.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


# The edition the suite runs against: the managed edition when IDEM_EDITION=managed (the
# managed suite, test/managed/run.sh, runs this suite against it), the extension otherwise.
# A test of what only the extension has is marked extension_only(reason), or a whole module
# with pytestmark = pytest.mark.extension_only(reason); against the managed edition it is not
# run: it is skipped with a reason that begins "not applicable to the managed edition: ", and
# the summary counts those apart (never as passed). Each reason is a row of docs/managed.md's
# feature table.
EDITION = os.environ.get("IDEM_EDITION") or "extension"
MANAGED = EDITION == "managed"
NOT_APPLICABLE = "not applicable to the managed edition: "
# The reasons, one per row of the feature table, so that each marker names the same words.
REASON_RESERVE_BEGIN = "reserve_begin (a transaction opened by the call): the edition has none"
REASON_OUTBOX = "emit, the idempotency output plugin and lsn_key: the edition has none"
REASON_VERSIONS = "versions: the edition starts at 0.3.0, there is no 0.2.0 to install"
REASON_REPEATABLE_READ = ("REPEATABLE READ / SERIALIZABLE callers: the edition refuses them "
                          "(0A000) in calls that write keys")


def pytest_configure(config):
    config.addinivalue_line("markers", "extension_only(reason): a test of what only the "
                            "extension has (docs/managed.md's feature table says why)")


def pytest_collection_modifyitems(config, items):
    not_applicable = []
    for item in items:
        marker = item.get_closest_marker("extension_only")
        if marker is None:
            continue
        if not marker.args or not marker.args[0]:
            raise pytest.UsageError(f"{item.nodeid}: extension_only needs its reason")
        if MANAGED:
            item.add_marker(pytest.mark.skip(reason=NOT_APPLICABLE + marker.args[0]))
            not_applicable.append(item.nodeid)
    config.stash[_NOT_APPLICABLE_KEY] = not_applicable


_NOT_APPLICABLE_KEY = pytest.StashKey[list]()


def pytest_terminal_summary(terminalreporter, config):
    not_applicable = config.stash.get(_NOT_APPLICABLE_KEY, [])
    if MANAGED:
        terminalreporter.write_line(f"{len(not_applicable)} not applicable to the managed "
                                    "edition (skipped, reasons above with -rs)")
