"""Jobs per second of a Celery task and a BullMQ job that apply their effect (one ledger line)
exactly once (ExactlyOnceTask, exactlyOnceProcessor) against the same task or job with its
own bare insert in a transaction, on the same workers and brokers (the jobs suite's servers
and workers, test/jobs). A round produces COUNT tasks per mode, then starts the workers; the
rate is taken from the effects' own commit times (the first to the last), so worker start-up
is not in it. Modes rotate each round; ratios are per round, the median reported.
    run.py ROUNDS COUNT REPORT       (PG*, JOBS_PORT, JOBS_DIR from the environment;
                                      BENCH_FRAMEWORKS: "celery bullmq" unless it names fewer)"""
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../test/jobs"))
import jobs_test as jt  # noqa: E402

ROUNDS, COUNT, REPORT = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
FRAMEWORKS = os.environ.get("BENCH_FRAMEWORKS", "celery bullmq").split()


def rate(run):
    with jt.db() as c:
        n, first, last = c.execute(
            "SELECT count(*), min(clock), max(clock) FROM (SELECT applied_at AS clock "
            "FROM ledger WHERE consumer = %s) t", (run,)).fetchone()
    if n != COUNT:
        raise SystemExit(f"{run}: {n} effects for {COUNT} tasks")
    return (n - 1) / max((last - first).total_seconds(), 1e-6)


def celery(mode, rnd):
    queue = f"bench-{mode}-{rnd}"
    m = jt.celery_app(queue)
    task = m.add if mode == "ext" else m.plain_add
    run = f"celery-{mode}-{rnd}"
    for i in range(COUNT):
        task.apply_async((run, f"{run}-{i}"), queue=m.queue(queue))
    w = jt.celery_worker(f"bench-celery-{mode}", queue, concurrency=2).start()
    jt.wait_for(f"{run}: every task applied", lambda: len(jt.effects(run)) >= COUNT, 600)
    w.kill()
    return rate(run)


def bullmq(mode, rnd):
    queue = f"bench-{mode}-{rnd}"
    run = f"bullmq-{mode}-{rnd}"
    keys = [f"{run}-{i}" for i in range(COUNT)]
    jt.node_tool("bullmq_producer.js", "add", queue, ",".join(keys), "")
    w = jt.node_worker(f"bench-bullmq-{mode}", "bullmq_worker.js", BULLMQ_QUEUE=queue,
                       CONSUMER_GROUP=run, CONCURRENCY="4",
                       **({"DEDUP": "bullmq"} if mode == "bare" else {})).start()
    jt.wait_for(f"{run}: every job applied", lambda: len(jt.effects(run)) >= COUNT, 600)
    w.kill()
    return rate(run)


def main():
    os.environ["WORK_MS"] = jt.ENV["WORK_MS"] = "0"
    jt.DIR.mkdir(parents=True, exist_ok=True)
    jt.reset_database()
    runs = {f: fn for f, fn in (("celery", celery), ("bullmq", bullmq)) if f in FRAMEWORKS}
    if not runs:
        raise SystemExit(f"BENCH_FRAMEWORKS names neither celery nor bullmq: {FRAMEWORKS}")
    servers = [s for f, s in (("celery", jt.RABBIT), ("bullmq", jt.REDIS)) if f in runs]
    load = [os.getloadavg()[0]]
    results = {f: {"bare": [], "ext": []} for f in runs}
    try:
        for s in servers:
            s.start()
        for rnd in range(ROUNDS):
            order = ["bare", "ext"] if rnd % 2 == 0 else ["ext", "bare"]
            for framework, fn in runs.items():
                for mode in order:
                    results[framework][mode].append(fn(mode, rnd))
                    print(f"# round {rnd} {framework} {mode}: "
                          f"{results[framework][mode][-1]:.0f}/s", flush=True)
    finally:
        for w in jt.Worker.every:
            w.kill()
        for s in servers:
            s.stop()
    load.append(os.getloadavg()[0])
    lines = [f"Run of {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: {ROUNDS} round(s) of "
             f"{COUNT} tasks per mode; 1-minute load average {load[0]:.2f} at the start, "
             f"{load[1]:.2f} at the end (a shared 2-core machine: noisy).", "",
             "bare: the same task / job with its own insert in a transaction; ext: "
             "ExactlyOnceTask / exactlyOnceProcessor (claim, insert, stored return value, one "
             "transaction). Celery: one prefork worker, 2 children, RabbitMQ; BullMQ: one "
             "worker, concurrency 4, Redis.", "",
             "| framework | bare jobs/s | ext jobs/s | ext / bare (median, range) |",
             "|---|---:|---:|---:|"]
    for f, r in results.items():
        ratios = [e / b for b, e in zip(r["bare"], r["ext"])]
        lines.append(f"| {f} | {statistics.median(r['bare']):.0f} | "
                     f"{statistics.median(r['ext']):.0f} | {statistics.median(ratios):.2f} "
                     f"({min(ratios):.2f} to {max(ratios):.2f}) |")
    text = "\n".join(lines) + "\n"
    open(REPORT, "w").write(text)
    print(text)


if __name__ == "__main__":
    main()
