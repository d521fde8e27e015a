"""The Python client, installed from its wheel, against the packaged extension (the packaging
suite): the version check, a new key and its replay."""
import psycopg

import pg_idempotency
from pg_idempotency import run_once

with psycopg.connect(autocommit=True) as conn:  # PGHOST, PGPORT, PGUSER, PGDATABASE
    version = pg_idempotency.check_extension(conn)
    assert version == pg_idempotency.EXTENSION_VERSIONS[1], version
    conn.execute("CREATE TABLE IF NOT EXISTS smoke_py (id serial PRIMARY KEY)")

    def work():
        row = conn.execute("INSERT INTO smoke_py DEFAULT VALUES RETURNING id").fetchone()
        return 201, {"id": row[0]}

    first = run_once(conn, "smoke", "py-1", work, {"n": 1})
    again = run_once(conn, "smoke", "py-1", work, {"n": 1})
    assert not first.replayed and again.replayed and again.status_code == 201, (first, again)
    assert conn.execute("SELECT count(*) FROM smoke_py").fetchone()[0] == 1
    print("python client", pg_idempotency.__version__, "against extension", version, ": ok")
