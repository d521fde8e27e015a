#!/usr/bin/env python3
"""Turns bench/run.sh's raw results into the table (stdout), results.md and results.png.

TPS is the median over rounds; mean and p99 latency pool every transaction of every round
(pgbench's per-transaction logs); a ratio is taken within each round (runs of one round are
minutes apart at most) and the median of those is shown. CPU columns: CPU time of the server
backends and of pgbench, per transaction, median over rounds. Steal: the share of the machine's
CPU time the hypervisor gave to other guests during a run (median over rounds; for a target,
per round, the larger of the two runs compared).
"""
import argparse
import glob
import os
import shutil
import statistics
import subprocess
import sys
from collections import defaultdict

NAMES = {
    "w0": "W0 baseline insert",
    "w1": "W1 hand-written pattern",
    "w2": "W2 extension",
    "w3": "W3 replay",
    "w4": "W4 mixed, 10% repeats",
    "w5": "W5 floor, W2 as bare SQL",
    "w2s": "W2 via SPI (before)",
}
# (numerator, denominator, mode, minimum): ratios at the highest client count.
TARGETS = [
    ("w2", "w0", "pipelined", 0.60),
    ("w2", "w1", "pipelined", 1.40),
    ("w2", "w1", "plain", 1.15),
    ("w3", "w0", "plain", 1.80),
    ("w3", "w0", "pipelined", 1.80),
]
# Context for the W2 targets: how far W2's statements get as bare SQL, and W2 against that.
REFERENCES = [
    ("w5", "w0", "pipelined"),
    ("w2", "w5", "pipelined"),
    ("w5", "w0", "plain"),
]


def read_tsv(path):
    with open(path) as f:
        rows = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    return rows


def latencies_ms(prefix):
    """Per-transaction latencies from pgbench -l logs PREFIX.<pid>[.<thread>]."""
    values = []
    for path in glob.glob(glob.escape(prefix) + ".*"):
        with open(path) as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 3 and fields[2].isdigit():
                    values.append(int(fields[2]) / 1000.0)
    return values


def percentile(sorted_values, p):
    if not sorted_values:
        return float("nan")
    k = max(0, min(len(sorted_values) - 1, int(round(p / 100.0 * len(sorted_values))) - 1))
    return sorted_values[k]


def fmt(x, digits=2):
    if x is None or x != x:
        return "-"
    return f"{x:.{digits}f}"


def main():
    ap = argparse.ArgumentParser()
    for name in ("runs", "writes", "settings", "machine", "markdown", "chart", "workdir"):
        ap.add_argument("--" + name, required=True)
    args = ap.parse_args()

    header, *rows = read_tsv(args.runs)
    runs = [dict(zip(header, r)) for r in rows]
    clients = sorted({int(r["clients"]) for r in runs}, reverse=True)
    modes = [m for m in ("plain", "pipelined") if any(r["mode"] == m for r in runs)]
    workloads = [w for w in NAMES if any(r["workload"] == w for r in runs)]

    tps = defaultdict(dict)  # (clients, mode, workload) -> {round: tps}
    cpu = defaultdict(list)  # (clients, mode, workload) -> [(server us, client us)]
    lat = defaultdict(list)
    steal = defaultdict(dict)  # (clients, mode, workload) -> {round: steal %}
    for r in runs:
        key = (int(r["clients"]), r["mode"], r["workload"])
        tps[key][r["round"]] = float(r["tps"])
        steal[key][r["round"]] = float(r.get("steal_pct", "nan"))
        txns = max(1, int(r["txns"]))
        server = float(r["server_cpu_s"])
        cpu[key].append((server * 1e6 / txns if server >= 0 else None,
                         float(r["client_cpu_s"]) * 1e6 / txns))
        lat[key].extend(latencies_ms(r["logs"]))

    def rounds(c, mode, w, base):
        """[(ratio, steal %)] per round in which both ran."""
        a, b = tps.get((c, mode, w)), tps.get((c, mode, base))
        if not a or not b:
            return []
        sa, sb = steal[(c, mode, w)], steal[(c, mode, base)]
        return [(a[k] / b[k], max(sa[k], sb[k])) for k in sorted(a, key=int)
                if k in b and b[k] > 0]

    def ratio(c, mode, w, base):
        per_round = [v for v, _ in rounds(c, mode, w, base)]
        return statistics.median(per_round) if per_round else None

    table = []  # rows of strings
    cols = ["clients", "mode", "workload", "TPS (median)", "mean ms", "p99 ms", "vs W0",
            "vs W1", "server CPU us/txn", "pgbench CPU us/txn", "steal %"]
    for c in clients:
        for mode in modes:
            for w in workloads:
                key = (c, mode, w)
                if key not in tps:
                    continue
                l = sorted(lat[key])
                servers = [s for s, _ in cpu[key] if s is not None]
                table.append([
                    str(c), mode, NAMES[w],
                    fmt(statistics.median(tps[key].values()), 0),
                    fmt(statistics.mean(l), 3) if l else "-",
                    fmt(percentile(l, 99), 3),
                    fmt(ratio(c, mode, w, "w0")),
                    fmt(ratio(c, mode, w, "w1")),
                    fmt(statistics.median(servers), 0) if servers else "-",
                    fmt(statistics.median(x for _, x in cpu[key]), 0),
                    fmt(statistics.median(steal[key].values()), 1),
                ])

    top = clients[0]
    targets = []
    for num, den, mode, minimum in TARGETS:
        value = ratio(top, mode, num, den)
        if value is None:
            continue
        detail = ", ".join(f"{v:.2f} ({st:.0f}%)" for v, st in rounds(top, mode, num, den))
        targets.append(("target", f"{num.upper()} {mode} / {den.upper()} {mode}, {top} clients",
                        f">= {minimum:.2f}", value, "met" if value >= minimum else "MISSED",
                        detail))
    for num, den, mode in REFERENCES:
        value = ratio(top, mode, num, den)
        if value is None:
            continue
        detail = ", ".join(f"{v:.2f} ({st:.0f}%)" for v, st in rounds(top, mode, num, den))
        targets.append(("reference", f"{num.upper()} {mode} / {den.upper()} {mode}, {top} clients",
                        "reference", value, "", detail))

    writes_header, *writes_rows = read_tsv(args.writes)
    writes = []
    for row in writes_rows:
        d = dict(zip(writes_header, row))
        n = int(d["txns"])
        per = lambda k: int(d[k]) / n
        writes.append([NAMES[d["workload"]], fmt(per("wal_bytes"), 0), fmt(per("wal_records"), 1),
                       fmt(per("wal_fpi"), 2), fmt(per("ins") + per("upd") + per("del"), 2),
                       fmt(per("ins"), 2), fmt(per("upd"), 2), fmt(per("hot_upd"), 2)])
    writes_cols = ["workload", "WAL bytes/request", "WAL records/request", "full-page images/request",
                   "row versions/request", "inserted", "updated", "of which HOT"]

    # --- stdout ---
    def text_table(cols, rows):
        widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c)
                  for i, c in enumerate(cols)]
        out = ["  ".join(c.ljust(widths[i]) for i, c in enumerate(cols)),
               "  ".join("-" * w for w in widths)]
        out += ["  ".join(v.ljust(widths[i]) for i, v in enumerate(r)) for r in rows]
        return "\n".join(out)

    print(text_table(cols, table))
    print()
    for kind, name, goal, value, verdict, detail in targets:
        verdict = "" if kind == "reference" else f" ({goal}) {verdict}"
        print(f"{kind} {name}: {value:.2f}{verdict}; rounds: {detail}")
    print()
    print(text_table(writes_cols, writes))

    # --- markdown ---
    def md_table(cols, rows):
        out = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
        out += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(out)

    machine = dict(read_tsv(args.machine))
    settings = read_tsv(args.settings)
    md = ["# Benchmark results", "",
          f"- date: {machine.get('date', '?')}",
          f"- machine: {machine.get('cpu', '?')}, {machine.get('memory', '?')}; "
          f"{machine.get('os', '?')}; data on {machine.get('disk', '?')}",
          f"- run: {machine.get('run', '?')}",
          "- settings: " + ", ".join(f"`{k}={v}`" for k, v in settings), "",
          "TPS: median over rounds. Latency: mean and 99th percentile over every transaction "
          "of every round. Ratios: within a round, median over rounds. CPU: server backends "
          "and pgbench, per transaction. Client and server share the cores; compare ratios, "
          "not absolute figures.", "",
          md_table(cols, table), "",
          "## Targets", "",
          md_table(["ratio", "target", "measured (median)", "", "per round (steal)"],
                   [[n, goal, f"{v:.2f}", verdict, d]
                    for _, n, goal, v, verdict, d in targets]), "",
          "W5 is no alternative (it has no lock and no checks): W2's reads and writes as plain "
          "SQL, so its ratios show what W2's statements cost with the extension's logic taken "
          "out.", "",
          "## Writes per request (1 client, plain, after a warm-up)", "",
          md_table(writes_cols, writes), "",
          f"![chart]({os.path.basename(args.chart)})", ""]
    with open(args.markdown, "w") as f:
        f.write("\n".join(md))

    # --- chart ---
    if not shutil.which("gnuplot"):
        print("gnuplot not found: no chart", file=sys.stderr)
        return
    data = os.path.join(args.workdir, "chart.dat")
    with open(data, "w") as f:
        f.write("# config " + " ".join(workloads) + " " + " ".join("r" + w for w in workloads) + "\n")
        for c in clients:
            for mode in modes:
                vals = [statistics.median(tps[(c, mode, w)].values()) if (c, mode, w) in tps
                        else float("nan") for w in workloads]
                rats = [ratio(c, mode, w, "w0") or float("nan") for w in workloads]
                f.write(f'"{c} cl. {mode}" ' + " ".join(f"{v:.1f}" for v in vals) + " " +
                        " ".join(f"{v:.3f}" for v in rats) + "\n")
    n = len(workloads)
    plot_tps = ", ".join(
        f"'{data}' using {i + 2}:xtic(1) title '{NAMES[w]}'" for i, w in enumerate(workloads))
    plot_ratio = ", ".join(
        f"'{data}' using {n + i + 2}:xtic(1) title '{NAMES[w]}'" for i, w in enumerate(workloads))
    script = f"""
set terminal pngcairo size 1400,560 font ',10'
set output '{args.chart}'
set multiplot layout 1,2 title 'idempotency benchmark ({machine.get("date", "")})'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set key outside bottom center horizontal font ',9'
set grid ytics
set title 'TPS, median of rounds (log scale)'
set logscale y
plot {plot_tps}
unset logscale y
set title 'TPS relative to W0 in the same round'
set yrange [0:*]
plot {plot_ratio}, 0.6 with lines dt 2 lc rgb 'black' title 'W2/W0 target 0.60'
unset multiplot
"""
    script_path = os.path.join(args.workdir, "chart.gp")
    with open(script_path, "w") as f:
        f.write(script)
    subprocess.run(["gnuplot", script_path], check=True)


if __name__ == "__main__":
    main()
