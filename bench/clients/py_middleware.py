#!/usr/bin/env python3
"""The WSGI middleware's two ways to claim a key, in bench/clients.sh: reserve_begin (one round
trip for a replay, the transaction opened by the server for a new key) against BEGIN + reserve
(psycopg's BEGIN, reserve, and a ROLLBACK after a replay: what a server that refuses
reserve_begin gets, here a role without EXECUTE on it).

    py_middleware.py --rounds 5 --requests 2000 --out middleware.json

Connects with the PG* environment, as a superuser that creates the role. One WSGI app (the
business INSERT of W2, answer 201 with the order id) behind two IdempotencyMiddleware, each on
a pool of one connection; the WSGI call is made directly (no HTTP server). In a round, the two
take turns request by request (the first of each turn alternating): --requests new keys each,
then a replay of each of those keys. Per variant and phase: the round's median request in
microseconds, and the client's CPU (this process) and the server's (the variant's own
backend, from /proc) per request. Checks that the fallback variant never ran reserve_begin
and that every key is completed once.
"""
import argparse
import io
import json
import os
import statistics
import sys
import time

import psycopg
from psycopg_pool import ConnectionPool

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "clients", "python"))
from pg_idempotency.wsgi import IdempotencyMiddleware  # noqa: E402  (the checkout's client)

INSERT = "INSERT INTO bench.orders (client, amount, note) VALUES (1, %s, 'order') RETURNING id"
FALLBACK_ROLE = "bench_middleware_fallback"
TICK_US = 1e6 / os.sysconf("SC_CLK_TCK")


def app(environ, start_response):
    ctx = environ["idempotency"]
    amount = json.loads(environ["wsgi.input"].read())["amount"]
    order_id = ctx.conn.execute(INSERT, (amount,)).fetchone()[0]
    out = json.dumps({"order_id": order_id}).encode()
    start_response("201 Created", [("Content-Type", "application/json"),
                                   ("Content-Length", str(len(out)))])
    return [out]


def fallback_role(admin):
    """A role with what the middleware needs except EXECUTE on reserve_begin (42501)."""
    drop_fallback_role(admin)
    admin.execute(f"CREATE ROLE {FALLBACK_ROLE} LOGIN")
    admin.execute(f"GRANT USAGE ON SCHEMA idempotency, bench TO {FALLBACK_ROLE}")
    admin.execute("GRANT EXECUTE ON FUNCTION "
                  "idempotency.reserve(text, text, bytea, interval, interval, interval), "
                  "idempotency.complete(text, text, integer, jsonb, integer) "
                  f"TO {FALLBACK_ROLE}")
    admin.execute(f"GRANT SELECT, INSERT ON bench.orders TO {FALLBACK_ROLE}")  # RETURNING
    admin.execute(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA bench TO {FALLBACK_ROLE}")


def drop_fallback_role(admin):
    if admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (FALLBACK_ROLE,)).fetchone():
        admin.execute(f"DROP OWNED BY {FALLBACK_ROLE}")  # its grants
        admin.execute(f"DROP ROLE {FALLBACK_ROLE}")


def backend_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


class Variant:
    def __init__(self, name, conninfo):
        self.name, self.scope = name, f"bench-mw-{name}-{os.getpid()}"
        self.pool = ConnectionPool(conninfo, min_size=1, max_size=1, open=True)
        self.middleware = IdempotencyMiddleware(app, pool=self.pool, scope=self.scope)
        with self.pool.connection() as conn:
            self.backend = conn.info.backend_pid

    def call(self, key, replay):
        body = json.dumps({"amount": 1}).encode()
        environ = {"REQUEST_METHOD": "POST", "PATH_INFO": "/orders",
                   "CONTENT_TYPE": "application/json", "CONTENT_LENGTH": str(len(body)),
                   "wsgi.input": io.BytesIO(body), "HTTP_IDEMPOTENCY_KEY": key}
        answer = []
        b"".join(self.middleware(environ, lambda s, h, e=None: answer.append((s, dict(h)))))
        status, headers = answer[0]
        headers = {name.lower(): value for name, value in headers.items()}  # any case (PEP 3333)
        if not status.startswith("201") or \
                (headers.get("idempotent-replayed") == "true") != replay:
            raise SystemExit(f"{self.name}: {status} {headers} for {key} (replay: {replay})")


def take_turns(variants, keys, replay):
    """One request per variant per turn: {variant: (median us, client CPU us, server CPU us)}."""
    spent = {v.name: [] for v in variants}
    cpu = {v.name: 0.0 for v in variants}
    ticks = {v.name: backend_ticks(v.backend) for v in variants}
    for i, key in enumerate(keys):
        for v in (variants if i % 2 == 0 else variants[::-1]):
            c0, t0 = time.process_time(), time.perf_counter_ns()
            v.call(f"{v.name}-{key}", replay)
            spent[v.name].append(time.perf_counter_ns() - t0)
            cpu[v.name] += time.process_time() - c0
    n = len(keys)
    return {v.name: (statistics.median(spent[v.name]) / 1000.0, cpu[v.name] * 1e6 / n,
                     (backend_ticks(v.backend) - ticks[v.name]) * TICK_US / n)
            for v in variants}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    with psycopg.connect(autocommit=True) as admin:
        fallback_role(admin)
    superuser = psycopg.conninfo.make_conninfo("")
    variants = [Variant("begin_reserve", psycopg.conninfo.make_conninfo("", user=FALLBACK_ROLE)),
                Variant("reserve_begin", superuser)]
    run = f"{os.getpid()}-{time.time_ns()}"
    warm = [f"{run}-warm-{i}" for i in range(max(10, args.requests // 10))]
    take_turns(variants, warm, False)
    take_turns(variants, warm, True)

    rounds = []
    for r in range(args.rounds):
        keys = [f"{run}-{r}-{i}" for i in range(args.requests)]
        row = {}
        for phase, replay in (("new", False), ("replay", True)):
            for name, (median, client, server) in take_turns(variants, keys, replay).items():
                row[f"{name}_{phase}"] = median
                row[f"{name}_{phase}_client_cpu"] = client
                row[f"{name}_{phase}_server_cpu"] = server
        rounds.append(row)
        print(f"  python middleware round {r + 1}/{args.rounds}: " +
              "  ".join(f"{k} {v:.1f}" for k, v in row.items() if not k.endswith("cpu")) +
              " (us)", file=sys.stderr)

    # Each variant did what its name says, and every key was completed once.
    fallback, direct = variants
    if fallback.middleware.reserve_begin or not direct.middleware.reserve_begin:
        raise SystemExit("the variants did not claim as named (reserve_begin flags "
                         f"{fallback.middleware.reserve_begin}, {direct.middleware.reserve_begin})")
    expected = len(warm) + args.rounds * args.requests
    with psycopg.connect(autocommit=True) as check:
        for v in variants:
            done = check.execute("SELECT count(*) FROM idempotency.keys WHERE scope = %s AND "
                                 "state = 'completed'", (v.scope,)).fetchone()[0]
            if done != expected:
                raise SystemExit(f"{v.name}: {done} completed keys for {expected} new requests")
        drop_fallback_role(check)
    for v in variants:
        v.pool.close()
    with open(args.out, "w") as f:
        json.dump({"requests": args.requests, "rounds": rounds}, f, indent=1)


if __name__ == "__main__":
    main()
