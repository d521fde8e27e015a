#!/usr/bin/env python3
"""Key-call load through a Citus coordinator, for test/citus/shard_move.sh.

  move_load.py CONNINFO STOP_FILE OUT_JSON SCOPE... [--clients N]
  move_load.py --check CONNINFO OUT_JSON      the acknowledged keys against the database

Each client loops until STOP_FILE exists, each request one transaction through the
coordinator, over the given scopes, half of the keys fresh and half from a few hot keys per
scope (repeated by every client, so a key written twice would show as two business rows):
  - reserve: BEGIN; reserve; if new: INSERT INTO orders; complete; COMMIT
  - claim:   BEGIN; claim_once; if claimed: INSERT INTO orders; COMMIT
A request whose COMMIT returned is acknowledged when it claimed its key. Errors end the
request (ROLLBACK, or a new connection when the old one is gone) and are counted by SQLSTATE
with their first message. OUT_JSON: {"acknowledged": [[scope, key], ...], "requests": n,
"errors": {sqlstate: {"count": n, "message": text}}}.
"""
import json
import os
import random
import sys
import threading

import psycopg

HOT_KEYS = 8


def client(conninfo, stop_file, scopes, number, result, lock):
    rng = random.Random(number)
    conn = None
    sequence = 0
    while not os.path.exists(stop_file):
        sequence += 1
        scope = rng.choice(scopes)
        if rng.random() < 0.5:
            key = f"f-{number}-{sequence}"
        else:
            key = f"hot-{rng.randrange(HOT_KEYS)}"
        kind = "claim" if rng.random() < 0.4 else "reserve"
        try:
            if conn is None or conn.closed:
                conn = psycopg.connect(conninfo, autocommit=False)
            with conn.cursor() as cur:
                if kind == "reserve":
                    cur.execute(
                        "SELECT outcome::text, coalesce(attempt, 0)"
                        " FROM idempotency.reserve(%s, %s)", (scope, key))
                    outcome, attempt = cur.fetchone()
                    claimed = outcome == "new"
                    if claimed:
                        cur.execute("INSERT INTO orders (tenant, key, amount) VALUES (%s, %s, %s)",
                                    (scope, key, attempt))
                        cur.execute("SELECT idempotency.complete(%s, %s, 201, '{}', %s)",
                                    (scope, key, attempt))
                else:
                    cur.execute("SELECT idempotency.claim_once(%s, %s)", (scope, key))
                    claimed = cur.fetchone()[0]
                    if claimed:
                        cur.execute("INSERT INTO orders (tenant, key, amount) VALUES (%s, %s, 0)",
                                    (scope, key))
            conn.commit()
            with lock:
                result["requests"] += 1
                if claimed:
                    result["acknowledged"].append([scope, key])
        except psycopg.Error as e:
            state = getattr(e, "sqlstate", None) or "connection"
            with lock:
                entry = result["errors"].setdefault(state, {"count": 0, "message": str(e)})
                entry["count"] += 1
            try:
                if conn is not None and not conn.closed:
                    conn.rollback()
            except psycopg.Error:
                conn = None
    if conn is not None:
        conn.close()


def check(conninfo, out):
    """Prints 'requests R acknowledged A doubled D lost L' (D acknowledged twice, L acknowledged
    but not completed, as seen through the coordinator), then a line per SQLSTATE of the
    errors: '  error STATE xCOUNT: first line of the first message'."""
    with open(out) as f:
        result = json.load(f)
    acknowledged = [tuple(k) for k in result["acknowledged"]]
    scopes = sorted({s for s, _ in acknowledged})
    with psycopg.connect(conninfo, autocommit=True) as conn:
        rows = conn.execute("SELECT scope, key FROM idempotency.keys"
                            " WHERE scope = ANY(%s) AND state = 'completed'", (scopes,)).fetchall()
    completed = {(s, k) for s, k in rows}
    doubled = len(acknowledged) - len(set(acknowledged))
    lost = sum(1 for k in set(acknowledged) if k not in completed)
    print(f"requests {result['requests']} acknowledged {len(acknowledged)} doubled {doubled} "
          f"lost {lost}")
    for state, error in sorted(result["errors"].items()):
        first_line = error["message"].splitlines()[0] if error["message"] else ""
        print(f"  error {state} x{error['count']}: {first_line}")


def main(argv):
    if argv[1] == "--check":
        check(argv[2], argv[3])
        return
    clients = 6
    if "--clients" in argv:
        i = argv.index("--clients")
        clients = int(argv[i + 1])
        del argv[i:i + 2]
    conninfo, stop_file, out, *scopes = argv[1:]
    result = {"acknowledged": [], "requests": 0, "errors": {}}
    lock = threading.Lock()
    threads = [threading.Thread(target=client, args=(conninfo, stop_file, scopes, n, result, lock))
               for n in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv)
