#!/usr/bin/env bash
# Runs every query of postgres_exporter.yml against a database with the extension (PGHOST,
# PGPORT, PGUSER from the environment, as the examples suite sets them) and checks that each
# returns exactly the columns its `metrics` list names, with numbers in the non-LABEL ones.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
DB=${METRICS_EXAMPLE_DB:-metrics_example}
psql_() { psql -X -v ON_ERROR_STOP=1 -qAt "$@"; }
psql_ -d postgres -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB" >/dev/null
trap 'psql_ -d postgres -c "DROP DATABASE IF EXISTS $DB" >/dev/null 2>&1 || true' EXIT
psql_ -d "$DB" -c "CREATE EXTENSION idempotency" \
  -c "SELECT count(*) FROM idempotency.maintain()" \
  -c "SELECT 'slot' FROM pg_create_logical_replication_slot('metrics_example', 'idempotency')" \
  -c "SELECT outcome FROM idempotency.reserve('example', 'k')" >/dev/null
trap 'psql_ -d "$DB" -c "SELECT pg_drop_replication_slot(\x27metrics_example\x27)" >/dev/null 2>&1 || true
  psql_ -d postgres -c "DROP DATABASE IF EXISTS $DB" >/dev/null 2>&1 || true' EXIT
python3 - "$DB" <<'PY'
import json, subprocess, sys, yaml
db = sys.argv[1]
config = yaml.safe_load(open("postgres_exporter.yml"))
failures = 0
for name, entry in config.items():
    columns = [next(iter(m)) for m in entry["metrics"]]
    usage = {next(iter(m)): next(iter(m.values()))["usage"] for m in entry["metrics"]}
    sql = f"SELECT json_agg(q) FROM ({entry['query']}) q"
    out = subprocess.run(["psql", "-X", "-qAt", "-v", "ON_ERROR_STOP=1", "-d", db, "-c", sql],
                         capture_output=True, text=True)
    if out.returncode != 0:
        print(f"FAIL {name}: {out.stderr.strip()}"); failures += 1; continue
    rows = json.loads(out.stdout or "null") or []
    if not rows:
        print(f"FAIL {name}: no rows"); failures += 1; continue
    for row in rows:
        if list(row) != columns:
            print(f"FAIL {name}: columns {list(row)}, the config names {columns}"); failures += 1
        for col, use in usage.items():
            if use != "LABEL" and not isinstance(row.get(col), (int, float)):
                print(f"FAIL {name}: {col} = {row.get(col)!r} is not a number"); failures += 1
    print(f"ok {name}: {len(rows)} row(s) {rows[0]}")
sys.exit(1 if failures else 0)
PY
