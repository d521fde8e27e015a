#!/usr/bin/env python3
"""Turns the results of bench/clients.sh (one JSON file per client: per-round medians in
microseconds) into the table (stdout) and clients.md.

In a round, the variants compared take turns request by request; a ratio or a share is taken
within each round and the median over rounds is shown with the lowest and highest round;
microseconds are medians over rounds of each round's median request.

    report.py --machine machine.tsv --markdown clients.md [--middleware middleware.json]
              python.json [node.json] [go.json] [java.json]

A result of kind "cpu" (Go, Java) holds per round the CPU per request of each variant, the
process's and its backend's (microseconds, per block of requests); its ratios are of CPU.
"""
import argparse
import json
import statistics

NAMES = {"python": "Python (pg_idempotency.run_once, psycopg)",
         "node": "Node (runOnce of @idempotency/client, pg)",
         "go": "Go (Client.RunOnce of clients/go, database/sql with pgx v4)",
         "java": "Java (IdempotencyClient.runOnce of clients/java, pgjdbc)"}
# The CPU a helper may spend per request over the same statements sent by hand.
CPU_TARGET = 1.10


def med(values):
    return statistics.median(values)


def spread(values, fmt):
    """'median (lowest to highest)' of per-round values."""
    if len(values) == 1:
        return fmt(values[0])
    return f"{fmt(med(values))} ({fmt(min(values))} to {fmt(max(values))})"


def us(v):
    return f"{v:,.1f}" if v < 100 else f"{v:,.0f}"


def ratio(v):
    return f"{v:.3f}"


def pct(v):
    return f"{v:.1f}%"


def md_table(header, rows):
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---:" if i else "---" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def text_table(header, rows):
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    fmt = lambda r: "  ".join(str(x).ljust(w) if i == 0 else str(x).rjust(w)  # noqa: E731
                              for i, (x, w) in enumerate(zip(r, widths)))
    return [fmt(header), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--machine", required=True)
    ap.add_argument("--markdown", required=True)
    ap.add_argument("--middleware")
    ap.add_argument("results", nargs="+")
    args = ap.parse_args()

    with open(args.machine) as f:
        machine = dict(line.rstrip("\n").split("\t", 1) for line in f if "\t" in line)
    runs = []
    for path in args.results:
        with open(path) as f:
            runs.append(json.load(f))

    overhead_header = ["client", "body", "bare SQL us", "helper us", "helper - bare us",
                       "helper / bare"]
    overhead = []
    share_header = ["client", "body", "fingerprint in a request us", "in a loop us",
                    "helper request us", "fingerprint share"]
    share = []
    server = None
    cpu_header = ["client", "bare CPU us (process + backend)", "helper CPU us (process + backend)",
                  "helper / bare (process)", "helper / bare (process + backend)",
                  f"within {round(100 * (CPU_TARGET - 1))}%"]
    cpu_rows = []
    for run in runs:
        rounds = run["rounds"]
        name = run["client"]
        if run.get("kind") == "cpu":
            bare = [r["bare_cpu"] + r["bare_backend_cpu"] for r in rounds]
            helper = [r["helper_cpu"] + r["helper_backend_cpu"] for r in rounds]
            total = [h / b for h, b in zip(helper, bare)]
            cpu_rows.append([name,
                        f"{us(med(bare))} ({us(med([r['bare_cpu'] for r in rounds]))} + "
                        f"{us(med([r['bare_backend_cpu'] for r in rounds]))})",
                        f"{us(med(helper))} ({us(med([r['helper_cpu'] for r in rounds]))} + "
                        f"{us(med([r['helper_backend_cpu'] for r in rounds]))})",
                        spread([r["helper_cpu"] / r["bare_cpu"] for r in rounds], ratio),
                        spread(total, ratio), "yes" if med(total) <= CPU_TARGET else "NO"])
            continue
        for body, suffix in (("1k", ""), ("100k", "_100k")):
            bare = [r["bare" + suffix] for r in rounds]
            helper = [r["helper" + suffix] for r in rounds]
            fp = [r[f"fp_{body}"] for r in rounds]
            size = f"{run['bodies'][body]:,} B"
            overhead.append([name, size, us(med(bare)), us(med(helper)),
                             spread([h - b for h, b in zip(helper, bare)], us),
                             spread([h / b for h, b in zip(helper, bare)], ratio)])
            share.append([name, size, us(med(fp)), us(med([r[f"fp_{body}_loop"] for r in rounds])),
                          us(med(helper)),
                          spread([100 * f / h for f, h in zip(fp, helper)], pct)])
        if "sql_fp_1k" in rounds[0]:
            server = {b: med([r[f"sql_fp_{b}"] for r in rounds]) for b in ("1k", "100k")}

    out = ["Client overhead per request (bench/clients.sh)", ""]
    if overhead:
        out += text_table(overhead_header, overhead) + [""]
        out += text_table(share_header, share)
    if cpu_rows:
        out += ([""] if overhead else []) + [
            "CPU per request: the helper against the same statements sent by hand", ""]
        out += text_table(cpu_header, cpu_rows)
    if server:
        out += ["", "server-side idempotency.fingerprint(text::jsonb) per call: "
                f"{us(server['1k'])} us (1 KB), {us(server['100k'])} us (100 KB)"]
    middleware_header = ["request", "BEGIN + reserve us", "reserve_begin us",
                         "reserve_begin / BEGIN + reserve", "client CPU us (each)",
                         "server CPU us (each)"]
    middleware = []
    if args.middleware:
        with open(args.middleware) as f:
            mw = json.load(f)
        for phase, title in (("new", "new key"), ("replay", "replay")):
            rows = mw["rounds"]
            old = [r[f"begin_reserve_{phase}"] for r in rows]
            new = [r[f"reserve_begin_{phase}"] for r in rows]

            def cpu(kind):
                return " / ".join(us(med([r[f"{v}_{phase}_{kind}_cpu"] for r in rows]))
                                  for v in ("begin_reserve", "reserve_begin"))
            middleware.append([title, us(med(old)), us(med(new)),
                               spread([n / o for n, o in zip(new, old)], ratio),
                               cpu("client"), cpu("server")])
        out += ["", "Python WSGI middleware: reserve_begin against BEGIN + reserve", ""]
        out += text_table(middleware_header, middleware)
    print("\n".join(out))

    md = ["# Client overhead per request", "",
          "Written by `bash bench/clients.sh` (method: [README.md](README.md), \"Client "
          "overhead\"). One run on a machine with 2 noisy cores: only the ratios and shares "
          "within this run mean something, not the absolute microseconds.", ""]
    md += [f"- {k}: {v}" for k, v in machine.items()]
    md += [f"- {NAMES.get(r['client'], r['client'])}: {r['versions']}" for r in runs]
    if overhead:
        md += ["", "## The helper against the bare SQL calls", "",
               "Per request: BEGIN; `reserve` with the fingerprint of the body (computed "
               "client-side in both variants, by the client's own function); the business INSERT; "
               "`complete`; COMMIT. The two variants take turns request by request. Microseconds: "
               "median over rounds of the round's median request; the difference and the ratio: "
               "within each round, median (lowest to highest round).", ""]
        md += md_table(overhead_header, overhead)
        md += ["", "## The fingerprint's share of a request", "",
               "The fingerprint in a request: `fingerprint(body text)` timed inside the bare "
               "requests (the helper computes it the same way); in a loop: called over and over "
               "(warm caches). Share: the round's median fingerprint in a request over its median "
               "helper request (whose work is the same small INSERT: the body is only "
               "fingerprinted, not stored), median (lowest to highest round).", ""]
        md += md_table(share_header, share)
    if server:
        md += ["", "For comparison, the server: `idempotency.fingerprint(text::jsonb)` (the "
               f"text parsed too) takes {us(server['1k'])} us per call for the 1 KB body and "
               f"{us(server['100k'])} us for the 100 KB body."]
    if middleware:
        md += ["", "## The Python WSGI middleware: reserve_begin against BEGIN + reserve", "",
               "`pg_idempotency.wsgi.IdempotencyMiddleware` around a WSGI app whose handler "
               "makes the same business INSERT, called directly (no HTTP server), each variant "
               "on a pool of one connection: as a role with `EXECUTE` on `reserve_begin` (the "
               "server opens the transaction for a new key; a replay is one round trip) and as "
               "one without (the middleware falls back to psycopg's `BEGIN`, `reserve`, and a "
               "`ROLLBACK` after a replay). Both end with `complete` + `COMMIT` in one query. "
               f"Per round and variant {mw['requests']:,} new keys, then a replay of each; the "
               "variants take turns request by request. Microseconds: median over rounds of the "
               "round's median request; the ratio within each round, median (lowest to highest "
               "round); CPU per request (BEGIN + reserve / reserve_begin): this process, and "
               "the variant's own backend from /proc (10 ms ticks).", ""]
        md += md_table(middleware_header, middleware)
    if cpu_rows:
        md += ["", "## CPU per request: the Go and Java helpers against the same statements by "
               "hand", "",
               "Per request, both variants fingerprint the 1 KB body with the client's own "
               "function and send the same statements in the same round trips: `reserve_begin` "
               "(which opens the transaction), the business INSERT, then `complete` and COMMIT "
               "in one round trip; bare sends them by hand with the driver, helper is the "
               "client's run-once helper. One connection (a pool of one), so one backend. The "
               "variants take turns block by block; per block, the process's CPU, every thread "
               "(Go's collector, the JVM's JIT and collector: getrusage in Go, the threads' "
               "/proc schedstat in Java) and its backend's (/proc/PID/schedstat) over its "
               "requests. CPU us: median over rounds, process + "
               "backend in parentheses; ratios within each round, median (lowest to highest "
               f"round); the target: helper / bare (process + backend) at most {CPU_TARGET}.",
               ""]
        md += md_table(cpu_header, cpu_rows)
    md += ["", "## Every round (us: medians of requests; CPU: per request of the round)", ""]
    for run in runs:
        keys = list(run["rounds"][0])
        md += [f"{run['client']}:", ""]
        md += md_table(["round"] + keys,
                       [[str(i + 1)] + [us(r[k]) for k in keys] for i, r in
                        enumerate(run["rounds"])])
        md += [""]
    with open(args.markdown, "w") as f:
        f.write("\n".join(md).rstrip("\n") + "\n")


if __name__ == "__main__":
    main()
