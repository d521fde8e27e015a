#!/usr/bin/env python3
"""The Python half of bench/clients.sh: pg_idempotency's run_once against the bare SQL calls,
over one psycopg connection, and the client-side fingerprint's share of a request.

    py_overhead.py --bodies DIR --rounds 5 --requests 2000 --requests-100k 200 \
        --fp-iterations 2000 --fp-iterations-100k 100 --out result.json

Connects with the PG* environment (autocommit: both variants send their own BEGIN / COMMIT).
Variants, every one timed request by request (perf_counter_ns), the order rotated each round:
  bare         fingerprint(body) with pg_idempotency.fingerprint, then BEGIN; SELECT * FROM
               idempotency.reserve(scope, key, fp); INSERT ... RETURNING id;
               SELECT idempotency.complete(scope, key, 201, response); COMMIT
  helper       run_once(conn, scope, key, work, request=body): the same INSERT in work
  helper_100k  the same with the 100 KB body
  fp_1k        fingerprint(body) alone, 1 KB body;  fp_100k: the 100 KB body
  sql_fp_1k    SQL idempotency.fingerprint(text::jsonb) per call, server side (n calls in one
               statement, less the same statement without the call, over n); sql_fp_100k
The body of bare and helper is the 1 KB one. Writes per-round medians (microseconds) as JSON.
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
import pg_idempotency  # noqa: E402  (the checkout's client, unless one is installed)
from pg_idempotency import fingerprint, run_once  # noqa: E402

SCOPE = "bench-clients-py"
# W2's business write (bench/workloads/w2_extension.sql); client 1 is Python, 2 Node.
INSERT = "INSERT INTO bench.orders (client, amount, note) VALUES (1, %s, 'order') RETURNING id"


def median_us(samples_ns):
    return statistics.median(samples_ns) / 1000.0


class Bench:
    def __init__(self, conn, bodies, run_id):
        self.conn, self.bodies, self.run_id = conn, bodies, run_id
        self.seq = 0
        self.completed = 0

    def next_key(self, variant):
        self.seq += 1
        return f"{self.run_id}-{variant}-{self.seq}"

    def business_insert(self, amount):
        order_id = self.conn.execute(INSERT, (amount,)).fetchone()[0]
        return {"order_id": order_id, "status": "created"}

    def bare(self, n, body):
        conn, times = self.conn, []
        for i in range(n):
            key = self.next_key("bare")
            t0 = time.perf_counter_ns()
            fp = fingerprint(body)
            conn.execute("BEGIN")
            outcome = conn.execute("SELECT * FROM idempotency.reserve(%s, %s, %s)",
                                   (SCOPE, key, fp)).fetchone()[0]
            if outcome != "new":
                raise SystemExit(f"bare: reserve of a fresh key gave {outcome}")
            response = self.business_insert(i)
            conn.execute("SELECT idempotency.complete(%s, %s, %s, %s)",
                         (SCOPE, key, 201, Jsonb(response)))
            conn.execute("COMMIT")
            times.append(time.perf_counter_ns() - t0)
        self.completed += n
        return times

    def helper(self, n, body, variant="helper"):
        times = []
        for i in range(n):
            key = self.next_key(variant)
            t0 = time.perf_counter_ns()
            result = run_once(self.conn, SCOPE, key, lambda: (201, self.business_insert(i)),
                              request=body)
            times.append(time.perf_counter_ns() - t0)
            if result.replayed or result.status_code != 201:
                raise SystemExit(f"{variant}: a fresh key gave {result}")
        self.completed += n
        return times

    @staticmethod
    def fp(n, body):
        times = []
        for _ in range(n):
            t0 = time.perf_counter_ns()
            fingerprint(body)
            times.append(time.perf_counter_ns() - t0)
        return times

    def sql_fp(self, n, body, repeats=3):
        """Server-side time of one idempotency.fingerprint(text::jsonb) call (the parse
        included, as on the client), from n calls in one statement, less the same statement
        without the call. The call is in the target list, evaluated for every row of the join
        (a WHERE clause on the CTE's column alone would be evaluated once, at the CTE scan);
        a materialised CTE keeps the text from being folded into a constant."""
        sql = ("WITH b AS MATERIALIZED (SELECT %s::text AS t) "
               "SELECT sum({}) FROM b, generate_series(1, %s)")
        per_call = []
        for _ in range(repeats):
            spent = []
            for expr in ("length(idempotency.fingerprint(t::jsonb))", "octet_length(t)"):
                t0 = time.perf_counter_ns()
                self.conn.execute(sql.format(expr), (body, n)).fetchone()
                spent.append(time.perf_counter_ns() - t0)
            per_call.append((spent[0] - spent[1]) / n)
        return [statistics.median(per_call)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bodies", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--requests-100k", type=int, default=200)
    ap.add_argument("--fp-iterations", type=int, default=2000)
    ap.add_argument("--fp-iterations-100k", type=int, default=100)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    bodies = {}
    for name in ("1k", "100k"):
        with open(os.path.join(args.bodies, f"body-{name}.json"), encoding="utf-8") as f:
            bodies[name] = f.read()

    conn = psycopg.connect(autocommit=True)
    # Same bytes as the server's fingerprint (a check, not a timing).
    for name, body in bodies.items():
        server = conn.execute("SELECT idempotency.fingerprint(%s::jsonb)", (body,)).fetchone()[0]
        if bytes(server) != fingerprint(body):
            raise SystemExit(f"fingerprint of body-{name}: client and server differ")

    b = Bench(conn, bodies, f"{os.getpid()}-{time.time_ns()}")
    small, large = bodies["1k"], bodies["100k"]
    variants = {
        "bare": lambda: b.bare(args.requests, small),
        "helper": lambda: b.helper(args.requests, small),
        "helper_100k": lambda: b.helper(args.requests_100k, large, "helper_100k"),
        "fp_1k": lambda: b.fp(args.fp_iterations, small),
        "fp_100k": lambda: b.fp(args.fp_iterations_100k, large),
        "sql_fp_1k": lambda: b.sql_fp(args.fp_iterations, small),
        "sql_fp_100k": lambda: b.sql_fp(args.fp_iterations_100k, large),
    }
    names = list(variants)

    # Warm-up (statements prepared, caches filled): a tenth of a round, not recorded.
    b.bare(max(10, args.requests // 10), small)
    b.helper(max(10, args.requests // 10), small)
    b.helper(max(2, args.requests_100k // 10), large, "helper_100k")

    rounds = []
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        row = {}
        for name in order:
            samples = variants[name]()
            row[name] = median_us(samples)
        rounds.append(row)
        print(f"  python round {r + 1}/{args.rounds}: " +
              "  ".join(f"{n} {row[n]:.1f}" for n in names) + " (us)", file=sys.stderr)

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
        "counts": {"requests": args.requests, "requests_100k": args.requests_100k,
                   "fp_iterations": args.fp_iterations,
                   "fp_iterations_100k": args.fp_iterations_100k},
        "rounds": rounds,
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
