"""bench/peers report: medians over the rounds of speed.tsv, ratios to the middleware, the keys
that got more than one order (per scenario, summed over the rounds), the round trips per
request (roundtrips.tsv), the loops without HTTP (loop.tsv), the fault table, and a PNG chart (gnuplot) of throughput and p99 per strategy for new keys at 8
connections.   python3 report.py OUT_DIR REPORT_DIR"""
import csv
import os
import statistics
import subprocess
import sys

out, report_dir = sys.argv[1:]
NAMES = {"middleware": "(1) middleware", "statement": "(1s) the middleware's statement form",
         "external": "(2) runExternal",
         "fortress": "(3) fortress SQL", "accelerator": "(4) Redis SET NX + Lua",
         "hybrid": "(5) hybrid Redis + SQL", "powertools": "(6) Powertools, Redis",
         "express-idempotency": "(7) express-idempotency, Redis",
         "insert": "(0) the insert alone (no idempotency)",
         "fastify-middleware": "(1) middleware, Fastify",
         "fastify-statement": "(1s) the statement form, Fastify",
         "fastify-accelerator": "(4) Redis SET NX + Lua, Fastify",
         "fastify-insert": "(0) the insert alone, Fastify"}
# the chart's label of a strategy: its number, F for Fastify
LABELS = {s: NAMES[s].split(" ", 1)[0] + ("F" if s.startswith("fastify-") else "") for s in NAMES}
SCENARIOS = [("new8", "new keys, 8 conn."), ("new32", "new keys, 32 conn."),
             ("replay8", "replays, 8 conn."), ("mix8", "80% new + 20% retries"),
             ("burst8", "one key from 8 clients")]

rows = list(csv.DictReader(open(os.path.join(out, "speed.tsv")), delimiter="\t"))
strategies = [s for s in NAMES if any(r["strategy"] == s for r in rows)]
if not rows:
    strategies = []
med = {}
for s in strategies:
    for sc, _ in SCENARIOS:
        rs = [r for r in rows if r["strategy"] == s and r["scenario"] == sc]
        if rs:
            med[s, sc] = {k: statistics.median(float(r[k]) for r in rs)
                          for k in ("rps", "p50", "p99", "p999", "cpu_ms", "ok", "requests")}
            med[s, sc]["keys"] = sum(int(r.get("keys") or 0) for r in rs)
            med[s, sc]["doubled"] = sum(int(r.get("doubled") or 0) for r in rs)
            # the service's share of cpu_ms (runs before it was counted: none)
            shares = [float(r["service_ms"]) for r in rs if r.get("service_ms")]
            med[s, sc]["service_ms"] = statistics.median(shares) if shares else None
            loads = [float(r["load"]) for r in rs if r.get("load")]
            med[s, sc]["load"] = (min(loads), max(loads)) if loads else None
rounds = len({r["round"] for r in rows})
load = open(os.path.join(out, "load.txt")).read().strip()
edition_path = os.path.join(out, "edition.txt")
edition = open(edition_path).read().strip() if os.path.exists(edition_path) else "extension"
lines = [f"# bench/peers: results of one run" +
         (" against the managed edition" if edition == "managed" else ""), "",
         f"Medians of {rounds} round(s), strategy order rotated each round; {load}.",
         "Ratios are to (1) within this run. CPU ms per request: service + PostgreSQL + Redis",
         "processes (from /proc). ok: 2xx answers (a replay counts; 409 and 422 do not).",
         "doubled: keys of the scenario (all rounds) that got more than one order.", ""]
rtt_path = os.path.join(out, "roundtrips.tsv")
rtt = list(csv.DictReader(open(rtt_path), delimiter="\t")) if os.path.exists(rtt_path) else []
if rtt:
    lines += ["## Round trips per request", "",
              "Counted in the service (BENCH_COUNT=1), one request at a time: PostgreSQL's",
              "ReadyForQuery messages and Redis's replies on the service's own connections.", "",
              "| strategy | new: PostgreSQL | new: Redis | new: total | replay: PostgreSQL "
              "| replay: Redis | replay: total |", "|---|---|---|---|---|---|---|"]
    by = {(r["strategy"], r["scenario"]): (float(r["postgresql"]), float(r["redis"])) for r in rtt}
    for s in [s for s in NAMES if (s, "new") in by]:
        (np, nr), (rp, rr) = by[s, "new"], by.get((s, "replay"), (0, 0))
        lines.append(f"| {NAMES[s]} | {np:g} | {nr:g} | {np + nr:g} | {rp:g} | {rr:g} | {rp + rr:g} |")
    lines.append("")
loop_path = os.path.join(out, "loop.tsv")
loop = list(csv.DictReader(open(loop_path), delimiter="\t")) if os.path.exists(loop_path) else []
if loop:
    lines += ["## Without HTTP", "",
              "Each strategy's own work (bench/peers/loop.mjs: the statements and commands the",
              "service sends, without Express and the load generator), 8 workers in one Node",
              "process, medians over the rounds. CPU us per request: that process, PostgreSQL,",
              "Redis.", ""]
    for mode, title in (("new", "new keys"), ("replay", "replays")):
        lm = {}
        for s in NAMES:
            rs = [r for r in loop if r["strategy"] == s and r["mode"] == mode]
            if rs:
                lm[s] = {k: statistics.median(float(r[k]) for r in rs)
                         for k in ("rps", "client_us", "postgresql_us", "redis_us")}
        base = lm.get("middleware", {}).get("rps")
        lines += [f"### {title}", "", "| strategy | req/s | x (1) | client us | PostgreSQL us "
                  "| Redis us | total us |", "|---|---|---|---|---|---|---|"]
        for s, m in lm.items():
            ratio = f"{m['rps'] / base:.2f}" if base else "-"
            total = m["client_us"] + m["postgresql_us"] + m["redis_us"]
            lines.append(f"| {NAMES[s]} | {m['rps']:,.0f} | {ratio} | {m['client_us']:.0f} "
                         f"| {m['postgresql_us']:.0f} | {m['redis_us']:.0f} | {total:.0f} |")
        lines.append("")
for sc, title in SCENARIOS:
    if not any((s, sc) in med for s in strategies):  # not run (BENCH_SCENARIOS)
        continue
    base = med.get(("middleware", sc), {}).get("rps")
    lines += [f"## {title}", "",
              "| strategy | req/s | x (1) | p50 ms | p99 ms | p99.9 ms | CPU ms/req | ok / sent "
              "| doubled / keys |", "|---|---|---|---|---|---|---|---|---|"]
    for s in strategies:
        m = med.get((s, sc))
        if not m:
            continue
        ratio = f"{m['rps'] / base:.2f}" if base else "-"
        lines.append(f"| {NAMES[s]} | {m['rps']:,.0f} | {ratio} | {m['p50']:.2f} "
                     f"| {m['p99']:.2f} | {m['p999']:.2f} | {m['cpu_ms']:.2f} "
                     f"| {m['ok']:.0f} / {m['requests']:.0f} | {m['doubled']} / {m['keys']} |")
    lines.append("")

# The project's forms against the hand-written pattern (3), a ratio taken within each round (the
# two ran in the same round, minutes apart at most), then their median; with the managed
# edition, beside the targets it is held to.
TARGETS = {("statement", "new"): 1.2, ("middleware", "new"): 1.0,
           ("statement", "replay"): 2.0, ("middleware", "replay"): 1.3}
by_round = {(r["round"], r["strategy"], r["scenario"]): r for r in rows}
against = []
for sc, title in SCENARIOS:
    for s in ("statement", "middleware"):
        per = []
        for (rnd, st, scn), r in sorted(by_round.items()):
            f = by_round.get((rnd, "fortress", scn))
            if st == s and scn == sc and f and float(f["rps"]):
                per.append((float(r["rps"]) / float(f["rps"]), r.get("load") or "-"))
        if per:
            target = TARGETS.get((s, sc.rstrip("0123456789"))) if edition == "managed" else None
            med_ratio = statistics.median(x for x, _ in per)
            verdict = "-" if target is None else (
                f"{target:g}: {'met' if med_ratio >= target else 'missed'}")
            against.append(f"| {title} | {NAMES[s]} / (3) | "
                           f"{', '.join(f'{x:.2f}' for x, _ in per)} | {med_ratio:.2f} | {verdict} "
                           f"| {', '.join(load for _, load in per)} |")
if against:
    lines += ["## Against the hand-written pattern (3)", "",
              "Throughput over (3)'s in the same round, each round, and their median. Load: the",
              "1-minute load average at the end of the project's strategy's scenario, each round.",
              "", "| scenario | ratio | per round | median | target | load |",
              "|---|---|---|---|---|---|", *against, ""]

# The same strategies on both frameworks: (1s) to (4) on each, and Fastify to Express.
pairs = [(s, f"fastify-{s}") for s in ("statement", "accelerator", "middleware", "insert")]
pairs = [p for p in pairs if any((p[1], sc) in med for sc, _ in SCENARIOS)]
if pairs:
    def ratio(a, b):
        return f"{a['rps'] / b['rps']:.2f}" if a and b and b["rps"] else "-"
    shown = [(sc, title) for sc, title in SCENARIOS if any((f, sc) in med for _, f in pairs)]
    lines += ["## Fastify beside Express", "",
              "Medians of the tables above. The statement form's throughput over Redis SET NX +",
              "Lua's on the same framework:", "",
              "| scenario | (1s) / (4), Express | (1s) / (4), Fastify |", "|---|---|---|"]
    for sc, title in shown:
        over = [ratio(med.get((p + "statement", sc)), med.get((p + "accelerator", sc)))
                for p in ("", "fastify-")]
        lines.append(f"| {title} | {over[0]} | {over[1]} |")
    lines += ["", "A strategy on Fastify beside the same on Express. CPU ms per request: the",
              "service's + the backends' (PostgreSQL and Redis). Load: the 1-minute load average",
              "at the end of its runs (lowest to highest over the rounds, both frameworks).", "",
              "| scenario | strategy | req/s, Express | req/s, Fastify | Fastify / Express "
              "| CPU ms/req, Express | CPU ms/req, Fastify | load |",
              "|---|---|---|---|---|---|---|---|"]
    def load_of(*ms):
        loads = [x for m in ms if m and m["load"] for x in m["load"]]
        return f"{min(loads):.1f} to {max(loads):.1f}" if loads else "-"
    def cpu_of(m):
        if not m:
            return "-"
        if m["service_ms"] is None:
            return f"{m['cpu_ms']:.2f}"
        return f"{m['service_ms']:.2f} + {m['cpu_ms'] - m['service_ms']:.2f}"
    for sc, title in shown:
        for e, f in pairs:
            me, mf = med.get((e, sc)), med.get((f, sc))
            if not me and not mf:
                continue
            cells = [f"{m['rps']:,.0f}" if m else "-" for m in (me, mf)]
            cpu = [cpu_of(m) for m in (me, mf)]
            lines.append(f"| {title} | {NAMES[e].split(' ', 1)[0]} | {cells[0]} | {cells[1]} "
                         f"| {ratio(mf, me)} | {cpu[0]} | {cpu[1]} | {load_of(me, mf)} |")
    lines.append("")

faults = list(csv.DictReader(open(os.path.join(out, "faults.tsv")), delimiter="\t"))
lines += ["## Faults", "",
          "Clients retry each key with the same body until answered. kill: the service SIGKILLed",
          "and restarted every ~1.5 s; redis: Redis SIGKILLed and restarted (no save) once a",
          "third of the keys are answered; pg: PostgreSQL stopped with -m immediate and started",
          "at that point. lost: an answered key without an order; doubled: more than one order",
          "for a key; wrong: the answer names an order that does not exist (or none).", "",
          "| Redis | strategy | fault | keys | answered | faults | lost | doubled | wrong |",
          "|---|---|---|---|---|---|---|---|---|"]
for f in faults:
    lines.append(f"| {f['redis']} | {NAMES[f['strategy']]} | {f['fault']} | {f['keys']} | "
                 f"{f['answered']} | {f['faults']} | {f['lost']} | {f['doubled']} | {f['wrong']} |")
lines.append("")

dat = os.path.join(out, "chart.dat")
with open(dat, "w") as fh:
    for i, s in enumerate(strategies):
        m = med.get((s, "new8"))
        if m:
            fh.write(f'{i} "{LABELS[s]}" {m["rps"]:.1f} {m["p99"]:.2f}\n')
png = os.path.join(report_dir, "results.png")
script = f"""set terminal pngcairo size 900,420 noenhanced
set output '{png}'
set multiplot layout 1,2 title 'bench/peers: new keys, 8 connections (medians)'
set style fill solid 0.6
set boxwidth 0.7
set yrange [0:*]
set title 'throughput (req/s)'
plot '{dat}' using 1:3:xtic(2) with boxes notitle
set title 'p99 latency (ms)'
plot '{dat}' using 1:4:xtic(2) with boxes notitle
unset multiplot
"""
try:
    subprocess.run(["gnuplot"], input=script, text=True, check=True)
    lines += ["![throughput and p99 per strategy](results.png)", ""]
except (OSError, subprocess.CalledProcessError) as e:
    lines += [f"(no chart: gnuplot failed: {e})", ""]
open(os.path.join(report_dir, "results.md"), "w").write("\n".join(lines))
