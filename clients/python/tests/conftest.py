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
