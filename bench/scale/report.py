#!/usr/bin/env python3
"""bench/scale.sh's report: the TSV files of its output folder as Markdown (stdout)."""
import re
import csv
import statistics
import sys
from pathlib import Path

out = Path(sys.argv[1])


def rows(name):
    path = out / name
    if not path.exists():
        return []
    with path.open() as f:
        return list(csv.DictReader(f, delimiter="\t"))


def kv(name):
    path = out / name
    if not path.exists():
        return {}
    return dict(line.rstrip("\n").split("\t", 1) for line in path.open() if "\t" in line)


runs = rows("runs.tsv")
sizes = sorted({int(r["size"]) for r in runs})
clients = sorted({int(r["clients"]) for r in runs})
WORKLOADS = [("new", "new keys"), ("recent", "replays, as retries arrive"),
             ("uniform", "replays, uniform (cold)")]


def med(size, c, w, field):
    vals = [float(r[field]) for r in runs
            if int(r["size"]) == size and int(r["clients"]) == c and r["workload"] == w]
    return statistics.median(vals) if vals else None


def fmt(v, digits=0):
    if v is None:
        return "-"
    return f"{v:,.{digits}f}"


def ratio(a, b):
    return f"{a / b:.2f}" if a and b else "-"


machine = kv("machine.tsv")
print("# bench/scale: the key table at production size\n")
for k, v in machine.items():
    print(f"- {k}: {v}")
print()

print("## Throughput and latency (medians over the rounds)\n")
print("| keys | clients | workload | extension tps | p50 ms | p99 ms | hand-written tps | p50 ms "
      "| p99 ms | ext / hw | load average |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for size in sizes:
    for c in clients:
        for w, label in WORKLOADS:
            e, h = med(size, c, "ext_" + w, "tps"), med(size, c, "hw_" + w, "tps")
            loads = [float(r["load"].split()[0]) for r in runs
                     if int(r["size"]) == size and int(r["clients"]) == c
                     and r["workload"] in ("ext_" + w, "hw_" + w)]
            print(f"| {size:,} | {c} | {label} | {fmt(e)} | {fmt(med(size, c, 'ext_' + w, 'p50_ms'), 3)} "
                  f"| {fmt(med(size, c, 'ext_' + w, 'p99_ms'), 3)} | {fmt(h)} "
                  f"| {fmt(med(size, c, 'hw_' + w, 'p50_ms'), 3)} | {fmt(med(size, c, 'hw_' + w, 'p99_ms'), 3)} "
                  f"| {ratio(e, h)} | {min(loads, default=0):.1f} to {max(loads, default=0):.1f} |")
print()

if len(sizes) > 1:
    small, large = sizes[0], sizes[-1]
    print(f"## The curve: {large:,} keys against {small:,} (tps ratio, medians)\n")
    print("| clients | workload | extension | hand-written |")
    print("|---|---|---|---|")
    for c in clients:
        for w, label in WORKLOADS:
            print(f"| {c} | {label} | {ratio(med(large, c, 'ext_' + w, 'tps'), med(small, c, 'ext_' + w, 'tps'))} "
                  f"| {ratio(med(large, c, 'hw_' + w, 'tps'), med(small, c, 'hw_' + w, 'tps'))} |")
    print()

print("## Targets\n")
if len(sizes) > 1:
    for c in clients:
        for w in ("new", "recent"):
            r = ratio(med(large, c, "ext_" + w, "tps"), med(small, c, "ext_" + w, "tps"))
            met = "met" if r != "-" and float(r) >= 0.9 else "not met"
            print(f"target {w} keys at {large:,} / {small:,}, {c} clients: {r}x (>= 0.9: {met})")
for c in clients:
    top = sizes[-1]
    r = ratio(med(top, c, "ext_uniform", "tps"), med(top, c, "hw_uniform", "tps"))
    met = "met" if r != "-" and float(r) >= 1.0 else "not met"
    print(f"target uniform replays at {top:,}, {c} clients: extension / hand-written {r}x (>= 1.0: {met})")
print()

sz = rows("sizes.tsv")
growth = {(int(r["size"]), r["table"]): r for r in rows("growth.tsv")}
print("## Bytes per key\n")
print("After the load (VACUUM ANALYZE; the hand-written rows loaded in their final state, so "
      "without the dead versions its UPDATE leaves), and as the new-key runs wrote them (growth of "
      "all the table's relations / new keys).\n")
print("| keys | table | heap | TOAST | primary key | other indexes | total | as written | "
      "index of the new keys' partition |")
print("|---|---|---|---|---|---|---|---|---|")
for r in sz:
    n = int(r["rows"])
    parts = [int(r[k]) for k in ("heap", "toast", "primary_key", "other_indexes")]
    g = growth.get((int(r["size"]), r["table"]))
    written = (f"{int(g['growth_bytes']) / int(g['new_keys']):.0f}"
               if g and int(g["new_keys"]) > 0 else "-")
    hot = f"{int(r['new_key_partition_index']) / 2**20:,.0f} MB" if r["table"] == "ext" else \
        f"{int(r['new_key_partition_index']) / 2**20:,.0f} MB (the whole primary key)"
    name = "extension" if r["table"] == "ext" else "hand-written"
    print(f"| {n:,} | {name} | " + " | ".join(f"{p / n:.0f}" for p in parts) +
          f" | {sum(parts) / n:.0f} | {written} | {hot} |")
print()

wr = rows("written.tsv")
print("Bytes per key as written, by relation: the growth over the new-key runs (into the loaded "
      "tables, whose bulk-built indexes the first random inserts split) and new keys written "
      "into empty tables through the same workloads (8 clients).\n")
print("| written | keys | table | heap | TOAST | primary key | other indexes | total |")
print("|---|---|---|---|---|---|---|---|")
for g in growth.values():
    k = int(g["new_keys"])
    if k > 0 and "heap" in g:
        name = "extension" if g["table"] == "ext" else "hand-written"
        parts = [int(g[f]) for f in ("heap", "toast", "primary_key", "other_indexes")]
        print(f"| into {int(g['size']):,} loaded | {k:,} | {name} | " +
              " | ".join(f"{p / k:.0f}" for p in parts) + f" | {sum(parts) / k:.0f} |")
for r in wr:
    k = int(r["keys"])
    name = "extension" if r["table"] == "ext" else "hand-written"
    parts = [int(r[f]) for f in ("heap", "toast", "primary_key", "other_indexes")]
    print(f"| into empty | {k:,} | {name} | " + " | ".join(f"{p / k:.0f}" for p in parts) +
          f" | {sum(parts) / k:.0f} |")
if len(wr) == 2:
    t = {r["table"]: sum(int(r[f]) for f in ("heap", "toast", "primary_key", "other_indexes"))
         / int(r["keys"]) for r in wr}
    state = "met" if t["ext"] <= t["hw"] else "not met"
    print(f"\ntarget bytes per key as written into empty tables: extension {t['ext']:.0f}, "
          f"hand-written {t['hw']:.0f} ({state})")
print()

print("## WAL per new key (medians over the new-key runs; CHECKPOINT before each run)\n")
print("| keys | clients | extension bytes | full-page images | hand-written bytes | full-page images "
      "| ext / hw |")
print("|---|---|---|---|---|---|---|")
for size in sizes:
    for c in clients:
        def per_key(t, field):
            vals = [int(r[field]) / int(r["txns"]) for r in runs
                    if int(r["size"]) == size and int(r["clients"]) == c
                    and r["workload"] == t + "_new" and int(r["txns"]) > 0]
            return statistics.median(vals) if vals else None
        e, h = per_key("ext", "wal_bytes"), per_key("hw", "wal_bytes")
        print(f"| {size:,} | {c} | {fmt(e)} | {fmt(per_key('ext', 'wal_fpi'), 3)} | {fmt(h)} "
              f"| {fmt(per_key('hw', 'wal_fpi'), 3)} | {ratio(e, h)} |")
print()

av = rows("autovacuum.tsv")
if av:
    print("## Autovacuum over a sustained run of new keys (8 clients)\n")
    print("| keys | table | seconds | new keys | autovacuum runs | their time (s) | autoanalyze runs "
          "| dead rows after | updates (HOT) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in av:
        name = "extension" if r["table"] == "ext" else "hand-written"
        print(f"| {int(r['size']):,} | {name} | {r['seconds']} | {int(r['txns']):,} | {r['autovacuum_runs']} "
              f"| {r['autovacuum_s']} | {r['autoanalyze_runs']} | {int(r['dead_rows_after']):,} "
              f"| {int(r['updates']):,} ({int(r['hot_updates']):,}) |")
    print()

tl = kv("timeline.tsv")
if tl:
    size = int(tl.get("size") or max([int(r["size"]) for r in sz] or [sizes[-1] if sizes else 0]))
    print(f"## Maintenance under load at {size:,} keys\n")
    print(f"maintain() dropped an expired partition of {int(tl['dropped_rows']):,} keys "
          f"({int(tl['dropped_bytes']) / 2**20:,.0f} MB) and created {tl['created']} partitions in "
          f"{tl['maintain_ms']} ms, while 8 clients made new keys and replays (half each): "
          f"{tl['calls_during']} calls overlapped it, the slowest {tl['max_ms_during']} ms "
          f"({tl['over_50ms']} over 50 ms); the slowest call outside it {tl['max_ms_other']} ms "
          f"({tl['calls']} calls from {tl['run_from_s']} s to {tl['run_to_s']} s around maintain()'s start).\n")
    target = "met" if float(tl["max_ms_during"]) <= 50 else "not met"
    print(f"target no key call waits more than 50 ms on maintenance: slowest overlapping call "
          f"{tl['max_ms_during']} ms ({target})\n")
    print("Timeline (100 ms buckets from maintain()'s start; calls ended, slowest):\n")
    print("```")
    for line in (out / "timeline-buckets.tsv").read_text().splitlines():
        _, t, n, mx = line.split("\t")
        if -1.0 <= float(t) <= float(tl["maintain_ms"]) / 1000 + 1.0:
            print(f"{float(t):5.1f} s  {int(n):5d} calls  max {float(mx):8.2f} ms")
    print("```")
    waits = out / "timeline-waits.tsv"
    if waits.exists():
        print("\nSampled every 5 ms while maintain() ran: active client backends by wait event "
              "(`activity`), and maintain() holding or awaiting the exclusive lock of "
              "idempotency.keys (`holds`, `awaits`); seconds from maintain()'s start.\n")
        print("| kind | wait / lock | samples | backends | first s | last s |")
        print("|---|---|---|---|---|---|")
        for line in waits.read_text().splitlines():
            print("| " + " | ".join(line.split("\t")) + " |")
        lock_waits = out / "timeline-lock-waits.log"
        lines = lock_waits.read_text().splitlines() if lock_waits.exists() else []
        waited = [float(m) for m in re.findall(r"after ([0-9.]+) ms", "\n".join(lines))]
        longest = f", the longest {max(waited):.1f} ms" if waited else ""
        print(f"\nlog_lock_waits lines (waits past 10 ms) during the step: {len(lines)}{longest}")
