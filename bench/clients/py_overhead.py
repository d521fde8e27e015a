#!/usr/bin/env python3
"""The Python half of bench/clients.sh: pg_idempotency's run_once against the bare SQL calls,
over one psycopg connection, and the client-side fingerprint's share of a request.

    py_overhead.py --bodies DIR --rounds 5 --requests 2000 --requests-100k 100 --out result.json

Connects with the PG* environment (autocommit: both variants send their own BEGIN / COMMIT).
Every request is timed on its own (perf_counter_ns), and the two variants take turns request
by request (the first of each turn alternating), so that a burst of load on the machine falls
on both alike:
  bare         fingerprint(body) with pg_idempotency.fingerprint (timed on its own too:
               fp_1k / fp_100k, the fingerprint within a request), then BEGIN; SELECT * FROM
               idempotency.reserve(scope, key, fp); W2's INSERT ... RETURNING id;
               SELECT idempotency.complete(scope, key, 201, response); COMMIT
  helper       run_once(conn, scope, key, work, request=body), the same INSERT in work
--requests turns with the 1 KB body (bare, helper), then --requests-100k turns with the
100 KB body (bare_100k, helper_100k); then, for comparison:
  fp_1k_loop, fp_100k_loop   fingerprint(body) called in a loop (warm caches)
  sql_fp_1k, sql_fp_100k     SQL idempotency.fingerprint(text::jsonb) per call, server side
Writes each round's median per variant (microseconds) as JSON.
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time

import psycopg
from psycopg.types.json import Jsonb

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "clients", "python"))
import pg_idempotency  # noqa: E402  (the checkout's client)
from pg_idempotency import fingerprint, run_once  # noqa: E402

SCOPE = "bench-clients-py"
# W2's business write (bench/workloads/w2_extension.sql); client 1 is Python, 2 Node.
INSERT = "INSERT INTO bench.orders (client, amount, note) VALUES (1, %s, 'order') RETURNING id"


class Bench:
    """Each method runs one request (or one call) and returns its times in nanoseconds."""

    def __init__(self, conn, run_id):
        self.conn, self.run_id = conn, run_id
        self.seq = 0
        self.completed = 0

    def next_key(self, variant):
        self.seq += 1
        return f"{self.run_id}-{variant}-{self.seq}"

    def business_insert(self):
        order_id = self.conn.execute(INSERT, (self.seq,)).fetchone()[0]
        return {"order_id": order_id, "status": "created"}

    def bare(self, body):
        """(the request, its fingerprint)"""
        conn, key = self.conn, self.next_key("bare")
        t0 = time.perf_counter_ns()
        fp = fingerprint(body)
        t1 = time.perf_counter_ns()
        conn.execute("BEGIN")
        outcome = conn.execute("SELECT * FROM idempotency.reserve(%s, %s, %s)",
                               (SCOPE, key, fp)).fetchone()[0]
        if outcome != "new":
            raise SystemExit(f"bare: reserve of a fresh key gave {outcome}")
        response = self.business_insert()
        conn.execute("SELECT idempotency.complete(%s, %s, %s, %s)",
                     (SCOPE, key, 201, Jsonb(response)))
        conn.execute("COMMIT")
        t2 = time.perf_counter_ns()
        self.completed += 1
        return t2 - t0, t1 - t0

    def helper(self, body):
        key = self.next_key("helper")
        t0 = time.perf_counter_ns()
        result = run_once(self.conn, SCOPE, key, lambda: (201, self.business_insert()),
                          request=body)
        spent = time.perf_counter_ns() - t0
        if result.replayed or result.status_code != 201:
            raise SystemExit(f"helper: a fresh key gave {result}")
        self.completed += 1
        return spent

    def sql_fp(self, n, body):
        """Server-side nanoseconds of one idempotency.fingerprint(text::jsonb) call (the parse
        included, as on the client), from n calls in one statement less the same statement
        without the call. The call is in the target list, evaluated for every row of the join
        (in a WHERE clause on the CTE's column alone it would run once, at the CTE scan); the
        materialised CTE keeps the text from being folded into a constant."""
        sql = ("WITH b AS MATERIALIZED (SELECT %s::text AS t) "
               "SELECT sum({}) FROM b, generate_series(1, %s)")
        spent = []
        for expr in ("length(idempotency.fingerprint(t::jsonb))", "octet_length(t)"):
            t0 = time.perf_counter_ns()
            self.conn.execute(sql.format(expr), (body, n)).fetchone()
            spent.append(time.perf_counter_ns() - t0)
        return (spent[0] - spent[1]) / n


def take_turns(b, body, n):
    """n turns of a bare and a helper request, the first of each turn alternating: medians
    in microseconds of the bare requests, the helper requests and the bare requests'
    fingerprints."""
    bare, helper, fp = [], [], []
    for i in range(n):
        if i % 2:
            helper.append(b.helper(body))
        spent, fp_spent = b.bare(body)
        bare.append(spent)
        fp.append(fp_spent)
        if not i % 2:
            helper.append(b.helper(body))
    return [statistics.median(t) / 1000.0 for t in (bare, helper, fp)]


def loop(body, n):
    """Median microseconds of fingerprint(body) called n times in a row."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fingerprint(body)
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times) / 1000.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bodies", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--requests-100k", type=int, default=100)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    bodies = {}
    for name in ("1k", "100k"):
        with open(os.path.join(args.bodies, f"body-{name}.json"), encoding="utf-8") as f:
            bodies[name] = f.read()
    small, large = bodies["1k"], bodies["100k"]

    conn = psycopg.connect(autocommit=True)
    # Same bytes as the server's fingerprint (a check, not a timing).
    for name, body in bodies.items():
        server = conn.execute("SELECT idempotency.fingerprint(%s::jsonb)", (body,)).fetchone()[0]
        if bytes(server) != fingerprint(body):
            raise SystemExit(f"fingerprint of body-{name}: client and server differ")

    b = Bench(conn, f"{os.getpid()}-{time.time_ns()}")
    # Warm-up (statements prepared after psycopg's fifth execution, caches filled): a tenth
    # of a round, not recorded.
    take_turns(b, small, max(10, args.requests // 10))
    take_turns(b, large, max(2, args.requests_100k // 10))

    rounds = []
    for r in range(args.rounds):
        row = {}
        row["bare"], row["helper"], row["fp_1k"] = take_turns(b, small, args.requests)
        row["bare_100k"], row["helper_100k"], row["fp_100k"] = \
            take_turns(b, large, args.requests_100k)
        row["fp_1k_loop"] = loop(small, args.requests)
        row["fp_100k_loop"] = loop(large, args.requests_100k)
        row["sql_fp_1k"] = b.sql_fp(args.requests, small) / 1000.0
        row["sql_fp_100k"] = b.sql_fp(args.requests_100k, large) / 1000.0
        rounds.append(row)
        print(f"  python round {r + 1}/{args.rounds}: " +
              "  ".join(f"{k} {v:.1f}" for k, v in row.items()) + " (us)", file=sys.stderr)

    done = conn.execute("SELECT count(*) FROM idempotency.keys WHERE scope = %s "
                        "AND state = 'completed'", (SCOPE,)).fetchone()[0]
    if done != b.completed:
        raise SystemExit(f"{done} completed keys for {b.completed} requests")

    result = {
        "client": "python",
        "versions": f"pg_idempotency {pg_idempotency.__version__}, psycopg {psycopg.__version__}"
                    f" (libpq {psycopg.pq.version() // 10000}), "
                    f"{platform.python_implementation()} {platform.python_version()}",
        "bodies": {n: len(v.encode()) for n, v in bodies.items()},
        "counts": {"requests": args.requests, "requests_100k": args.requests_100k},
        "rounds": rounds,
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
