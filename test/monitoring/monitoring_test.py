#!/usr/bin/env python3
"""The monitoring suite's checks (test/monitoring/run.sh starts the cluster and sets the
environment: PGHOST, PGPORT, MONITORING_DIR, PROMETHEUS_PORT, EXPORTER_PORT,
MANAGED_EXPORTER_PORT).

1. promtool: alerts.yml is valid, its unit tests (alerts_test.yml) pass, and every rule has a
   case where it fires and one where it does not. Those tests run the rules as shipped, with
   their real `for` windows (the live chain below scales them down to seconds): each rule's
   tests must fail with its `for` cut to 0 and with it doubled, so they pin the window on both
   sides.
2. The metric families the queries files yield are the ones docs/operations.md
   ("Monitoring") lists, for each edition.
3. Live: the extension in database `monitoring` (its worker maintaining it every second), the
   managed edition in `monitoring_managed`; a postgres_exporter per database, as a role made
   with the grants of docs/operations.md; Prometheus scraping both every second with the
   project's rules (their `for` windows scaled down to FOR_SECONDS). Traffic: new keys,
   replays, mismatches, a claim held by an open transaction, a too-old key, failed and
   dead-lettered keys, a consumer, an outbox slot, a holder that dies with its claim, a
   takeover, the worker stopped. Prometheus's HTTP API must then answer every family with the
   values that traffic implies; IdempotencyAbandonedClaimsRising and
   IdempotencyMaintenanceNotRunning must fire, within their `for` window plus one scrape and
   one evaluation interval by Prometheus's own timestamps; every panel of the Grafana
   dashboard must return series.

Every wait is for a condition (a series, a value, an alert), bounded by WAIT_SECONDS.
Prints "ok"/"FAILED" per check and ends with "# passed N failed M".
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

import psycopg
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
METRICS_DIR = os.path.join(ROOT, "examples", "metrics")
RULES = os.path.join(METRICS_DIR, "alerts.yml")
RULE_TESTS = os.path.join(METRICS_DIR, "alerts_test.yml")
DASHBOARD = os.path.join(METRICS_DIR, "grafana-dashboard.json")
QUERY_FILES = {"extension": os.path.join(METRICS_DIR, "postgres_exporter.yml"),
               "managed": os.path.join(METRICS_DIR, "postgres_exporter_managed.yml")}
DOCS = os.path.join(ROOT, "docs", "operations.md")
DATABASES = {"extension": "monitoring", "managed": "monitoring_managed"}
RUN_DIR = os.environ.get("MONITORING_DIR", os.path.join(ROOT, "build", "monitoring"))
PROMETHEUS = f"http://127.0.0.1:{os.environ.get('PROMETHEUS_PORT', '21090')}"
EXPORTER_PORTS = {"extension": int(os.environ.get("EXPORTER_PORT", "21187")),
                  "managed": int(os.environ.get("MANAGED_EXPORTER_PORT", "21188"))}
SCRAPE_SECONDS = 1
EVAL_SECONDS = 1
FOR_SECONDS = 5
WAIT_SECONDS = 120
LIVE_ALERTS = ("IdempotencyAbandonedClaimsRising", "IdempotencyMaintenanceNotRunning")

passed = failed = 0


def ok(what):
    global passed
    passed += 1
    print(f"ok     {what}", flush=True)


def fail(what, detail=""):
    global failed
    failed += 1
    print(f"FAILED {what}", flush=True)
    for line in str(detail).splitlines():
        print(f"    {line}", flush=True)


def check(what, condition, detail=""):
    (ok if condition else lambda w: fail(w, detail))(what)
    return condition


class Timeout(Exception):
    pass


def wait_for(what, probe, seconds=WAIT_SECONDS):
    """Polls probe() until it returns something truthy; returns that."""
    deadline = time.monotonic() + seconds
    last = None
    while time.monotonic() < deadline:
        try:
            last = probe()
        except (OSError, ValueError, psycopg.Error) as e:
            last = e
        else:
            if last:
                return last
        time.sleep(0.2)
    raise Timeout(f"{what}: not within {seconds} s (last: {last!r})")


# --- the files -------------------------------------------------------------------------------

def query_file_metrics(path):
    """{metric name: [label names]} of a postgres_exporter queries file."""
    config = yaml.safe_load(open(path))
    names = {}
    for family, entry in config.items():
        columns = [(next(iter(m)), next(iter(m.values()))["usage"]) for m in entry["metrics"]]
        labels = [c for c, usage in columns if usage == "LABEL"]
        for column, usage in columns:
            if usage != "LABEL":
                names[f"{family}_{column}"] = labels
    return names


def documented_metrics():
    """{edition: set of names} from docs/operations.md's Monitoring table (column 3 says
    which editions)."""
    text = open(DOCS).read()
    section = text.split("\n## Monitoring\n", 1)[1].split("\n## ", 1)[0]
    found = {"extension": set(), "managed": set()}
    for row in section.splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`idempotency_"):
            continue
        names = re.findall(r"`(idempotency_[a-z_]+)`", cells[0])
        for edition in found:
            if edition in cells[2] or cells[2] == "both":
                found[edition].update(names)
    return found


def docs_sql_block(marker):
    """The ```sql block of docs/operations.md whose text contains marker."""
    blocks = re.findall(r"```sql\n(.*?)```", open(DOCS).read(), re.S)
    matching = [b for b in blocks if marker in b]
    if len(matching) != 1:
        raise ValueError(f"{len(matching)} sql blocks of docs/operations.md contain {marker!r}")
    return matching[0]


def rule_tests_pass(rule, changed):
    """Whether alerts_test.yml passes on a copy of alerts.yml whose rule has its `for` set to
    changed ("0s", or "doubled": twice the shipped window)."""
    groups = yaml.safe_load(open(RULES))
    for r in (r for g in groups["groups"] for r in g["rules"] if r.get("alert") == rule):
        seconds = {"s": 1, "m": 60, "h": 3600}[r["for"][-1]] * int(r["for"][:-1])
        r["for"] = "0s" if changed == "0s" else f"{2 * seconds}s"
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "alerts.yml"), "w") as f:
            yaml.safe_dump(groups, f, sort_keys=False)
        shutil.copy(RULE_TESTS, d)
        return subprocess.run(["promtool", "test", "rules", "alerts_test.yml"], cwd=d,
                              capture_output=True).returncode == 0


def check_rule_files():
    for args in (["check", "rules", RULES], ["test", "rules", RULE_TESTS]):
        out = subprocess.run(["promtool", *args], capture_output=True, text=True,
                             cwd=METRICS_DIR)
        check(f"promtool {' '.join(args[:2])} {os.path.basename(args[2])}", out.returncode == 0,
              out.stdout + out.stderr)
    rules = [r["alert"] for g in yaml.safe_load(open(RULES))["groups"] for r in g["rules"]
             if "alert" in r]
    cases = [c for t in yaml.safe_load(open(RULE_TESTS))["tests"]
             for c in t.get("alert_rule_test", [])]
    for rule in rules:
        firing = [c for c in cases if c["alertname"] == rule and c.get("exp_alerts")]
        quiet = [c for c in cases if c["alertname"] == rule and not c.get("exp_alerts")]
        check(f"alerts_test.yml tests {rule} firing ({len(firing)}) and not firing "
              f"({len(quiet)})", firing and quiet)
    for rule in rules:
        for changed in ("0s", "doubled"):
            check(f"alerts_test.yml fails with {rule}'s `for` {changed}",
                  not rule_tests_pass(rule, changed))
    expected = {"IdempotencyMaintenanceFailing", "IdempotencyMaintenanceNotRunning",
                "IdempotencyPremadePartitionsLow", "IdempotencyExpiredPartitionsNotDropped",
                "IdempotencyAbandonedClaimsRising", "IdempotencyClaimsPastLease",
                "IdempotencyFailedKeysRising", "IdempotencyDeadKeysRising",
                "IdempotencyKeyTableOverRetention"}
    check("alerts.yml has the rules docs/operations.md walks through", set(rules) == expected,
          f"missing {sorted(expected - set(rules))}, not expected {sorted(set(rules) - expected)}")
    return rules


def check_documented():
    documented = documented_metrics()
    for edition, path in QUERY_FILES.items():
        produced = set(query_file_metrics(path))
        check(f"docs/operations.md lists the {edition} edition's metrics "
              f"({len(produced)} from {os.path.basename(path)})",
              produced and produced == documented[edition],
              f"not in the docs: {sorted(produced - documented[edition])}; "
              f"not in the queries file: {sorted(documented[edition] - produced)}")


# --- the live chain --------------------------------------------------------------------------

def connect(edition, **kw):
    return psycopg.connect(dbname=DATABASES[edition], user="postgres", autocommit=True, **kw)


def managed_script():
    """The managed edition's install script (editions/managed/idempotency--VERSION.sql)."""
    scripts = [f for f in os.listdir(os.path.join(ROOT, "editions", "managed"))
               if re.fullmatch(r"idempotency--[0-9.]+\.sql", f)]
    if len(scripts) != 1:
        raise ValueError(f"editions/managed has {len(scripts)} install scripts: {scripts}")
    return os.path.join(ROOT, "editions", "managed", scripts[0])


def setup_databases():
    with psycopg.connect(dbname="postgres", user="postgres", autocommit=True) as db:
        for name in DATABASES.values():
            db.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            db.execute(f'CREATE DATABASE "{name}"')
        db.execute("DROP ROLE IF EXISTS exporter")
    with connect("extension") as db:
        db.execute("CREATE EXTENSION idempotency")
        db.execute(docs_sql_block("CREATE ROLE exporter LOGIN"))
        # The launcher started before the database existed and backs off doubling from 1 s;
        # a reload makes it forget that at once (on a loaded machine the setup can take long
        # enough for the next try to come after the wait for the worker's first run).
        db.execute("SELECT pg_reload_conf()")
    subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-1", "-d",
                    DATABASES["managed"], "-U", "postgres", "-f",
                    managed_script()],
                   check=True, stdout=subprocess.DEVNULL)
    with connect("managed") as db:
        db.execute(docs_sql_block("-- the managed edition's database"))
        db.execute("SELECT count(*) FROM idempotency.maintain()")


def start(name, argv):
    log = open(os.path.join(RUN_DIR, f"{name}.log"), "w")
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            cwd=RUN_DIR)


def start_servers():
    procs = []
    host = os.environ["PGHOST"]
    port = os.environ["PGPORT"]
    for edition, listen in EXPORTER_PORTS.items():
        dsn = (f"postgresql://exporter@:{port}/{DATABASES[edition]}?"
               + urllib.parse.urlencode({"host": host, "sslmode": "disable"}))
        env_argv = ["env", f"DATA_SOURCE_NAME={dsn}", "prometheus-postgres-exporter",
                    f"--web.listen-address=127.0.0.1:{listen}",
                    f"--extend.query-path={QUERY_FILES[edition]}",
                    "--disable-default-metrics", "--disable-settings-metrics"]
        procs.append(start(f"exporter-{edition}", env_argv))
    rules = open(RULES).read()
    scaled = re.sub(r"^(\s+for: )\S+$", rf"\g<1>{FOR_SECONDS}s", rules, flags=re.M)
    open(os.path.join(RUN_DIR, "alerts.yml"), "w").write(scaled)
    config = {
        "global": {"scrape_interval": f"{SCRAPE_SECONDS}s",
                   "evaluation_interval": f"{EVAL_SECONDS}s",
                   "scrape_timeout": f"{SCRAPE_SECONDS}s"},
        "rule_files": ["alerts.yml"],
        "scrape_configs": [{
            "job_name": "idempotency",
            "static_configs": [{"targets": [f"127.0.0.1:{p}"], "labels": {"edition": e}}
                               for e, p in EXPORTER_PORTS.items()]}],
    }
    open(os.path.join(RUN_DIR, "prometheus.yml"), "w").write(yaml.safe_dump(config))
    procs.append(start("prometheus", [
        "prometheus", "--config.file=prometheus.yml",
        f"--web.listen-address=127.0.0.1:{PROMETHEUS.rsplit(':', 1)[1]}",
        f"--storage.tsdb.path={os.path.join(RUN_DIR, 'data')}"]))
    return procs


def api(path, **params):
    url = f"{PROMETHEUS}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise ValueError(f"{path} {params}: {body}")
    return body["data"]


def instant(expr):
    return api("query", query=expr)["result"]


def value(expr):
    """The one series' value of expr, or None when it has none (more than one: an error)."""
    result = instant(expr)
    if len(result) > 1:
        raise ValueError(f"{expr}: {len(result)} series")
    return float(result[0]["value"][1]) if result else None


def wait_value(what, expr, want):
    """Waits until expr's one series has a value for which want(value) holds."""
    got = {}

    def probe():
        got["v"] = value(expr)
        return got["v"] is not None and want(got["v"])
    try:
        wait_for(what, probe)
        return ok(f"{what}: {expr} = {got['v']:g}")
    except Timeout as e:
        fail(what, e)


def first_time(selector, holds, after):
    """Prometheus's timestamp of the first scraped sample of selector (over the last 5
    minutes), at or after `after` (Unix seconds), whose value v makes holds(v) true."""
    result = instant(f"{selector}[5m]")
    times = [float(t) for s in result for t, v in s["values"]
             if holds(float(v)) and float(t) >= after]
    return min(times) if times else None


def traffic(events):
    """The scripted traffic against the extension's database; events gets the times the
    alerts' conditions start."""
    with connect("extension") as db, connect("extension") as holder:
        q = db.execute
        for i in range(1, 6):                               # 5 new keys, completed
            q("SELECT idempotency.reserve('shop', %s, '\\x01'::bytea)", (f"order-{i}",))
            q("SELECT idempotency.complete('shop', %s, 200, '{\"ok\": true}')", (f"order-{i}",))
        for i in range(1, 4):                               # 3 replays
            q("SELECT idempotency.reserve('shop', %s, '\\x01'::bytea)", (f"order-{i}",))
        for i in (4, 5):                                    # 2 mismatches
            q("SELECT idempotency.reserve('shop', %s, '\\x02'::bytea)", (f"order-{i}",))
        # a key older than any retention (a UUIDv7 of 1970): too_old
        q("SELECT idempotency.reserve('shop', '00000000-0000-7000-8000-000000000000')")
        q("SELECT idempotency.reserve('shop', 'pay-1')")    # a failed key
        q("SELECT idempotency.fail('shop', 'pay-1', '{\"error\": \"card declined\"}')")
        q("SELECT idempotency.reserve('queue', 'msg-1')")   # a dead-lettered one
        q("SELECT idempotency.fail('queue', 'msg-1', '{\"dead\": true}')")
        q("SELECT idempotency.accept('billing', 'p0', 1)")  # a consumer with two partitions
        q("SELECT idempotency.accept('billing', 'p1', 1)")
        q("SELECT 1 FROM pg_create_logical_replication_slot('monitoring_outbox', 'idempotency')")
        # A claim held inside an open transaction: in flight; another reserve: in_progress.
        holder.autocommit = False
        holder.execute("SELECT idempotency.reserve('shop', 'held')")
        q("SELECT idempotency.reserve('shop', 'held')")
        wait_value("an open transaction's claim is in flight",
                   'idempotency_claims_in_flight{edition="extension"}', lambda v: v == 1)
        holder.execute("SELECT idempotency.complete('shop', 'held', 201, NULL)")
        holder.commit()
        wait_value("no claim in flight after its commit",
                   'idempotency_claims_in_flight{edition="extension"}', lambda v: v == 0)


def crash_holder(edition, key, events):
    """A holder claims key with a 2-second lease, commits (a claim a retry could take over)
    and dies without completing it."""
    wait_value(f"{edition}: Prometheus has seen no abandoned claim",
               f'idempotency_claims_abandoned{{edition="{edition}"}}', lambda v: v == 0)
    holder = connect(edition)
    pid = holder.execute("SELECT pg_backend_pid()").fetchone()[0]
    holder.execute("SELECT idempotency.reserve('shop', %s, NULL, '2 seconds')", (key,))
    with connect(edition) as db:
        db.execute("SELECT pg_terminate_backend(%s)", (pid,))
    try:
        holder.close()
    except psycopg.Error:
        pass
    wait_value(f"{edition}: the dead holder's claim is in flight until its lease lapses, "
               "then abandoned", f'idempotency_claims_abandoned{{edition="{edition}"}}',
               lambda v: v == 1)


def check_alert_fires(alert, edition, selector, holds, after):
    """alert fires for edition; its firing sample comes within for + one scrape + one
    evaluation interval of the first scraped sample of selector for which holds(value)."""
    labels = f'alertname="{alert}",edition="{edition}"'
    started = time.monotonic()
    try:
        wait_for(f"{alert} firing", lambda: instant(f'ALERTS{{{labels},alertstate="firing"}}'))
    except Timeout as e:
        return fail(f"{alert} fires for the {edition} edition", e)
    waited = time.monotonic() - started
    held = first_time(selector, holds, after)
    fired = first_time(f'ALERTS{{{labels},alertstate="firing"}}', lambda v: v == 1, after)
    bound = FOR_SECONDS + SCRAPE_SECONDS + EVAL_SECONDS
    if held is None or fired is None:
        return fail(f"{alert} fires for the {edition} edition",
                    f"first true sample {held}, first firing sample {fired}")
    check(f"{alert} fires for the {edition} edition {fired - held:.1f} s after its condition "
          f"was first scraped (for {FOR_SECONDS} s + scrape {SCRAPE_SECONDS} s + evaluation "
          f"{EVAL_SECONDS} s; {waited:.1f} s of waiting here)", fired - held <= bound + 0.001,
          f"condition from {held}, firing from {fired}")


def check_metrics(edition, expected):
    for expr, want, what in expected:
        wait_value(f"{edition}: {what}", expr, want)


def expected_extension():
    e = '{edition="extension"}'
    eo = lambda o: f'idempotency_reserves_total{{edition="extension",outcome="{o}"}}'  # noqa: E731
    eq = lambda n: lambda v: v == n                                                  # noqa: E731
    now = time.time()
    return [
        (eo("new"), eq(10), "new keys: 5 orders, pay-1, msg-1, held, crash-1 and its takeover"),
        (eo("replay"), eq(3), "3 replays"),
        (eo("mismatch"), eq(2), "2 mismatches"),
        (eo("in_progress"), eq(1), "1 reserve of a key an open transaction held"),
        (eo("too_old"), eq(1), "1 too-old UUIDv7"),
        (f"idempotency_calls_completes_total{e}", eq(7), "7 completes"),
        (f"idempotency_calls_fails_total{e}", eq(2), "2 fails"),
        (f"idempotency_calls_takeovers_total{e}", eq(1), "1 takeover"),
        (f"idempotency_calls_counters_since_timestamp_seconds{e}",
         lambda v: now - 3600 < v <= now, "counters since the server started"),
        (f"idempotency_claims_in_flight{e}", eq(0), "no claim in flight"),
        (f"idempotency_claims_abandoned{e}", eq(0), "no abandoned claim after the takeover"),
        (f"idempotency_claims_abandoned_oldest_seconds{e}", eq(0), "no lapsed claim left"),
        (f"idempotency_keys_bytes{e}", lambda v: v > 0, "the key table's size"),
        (f"idempotency_keys_rows_estimate{e}", lambda v: v >= 0, "its row estimate"),
        (f"idempotency_keys_partitions{e}", eq(5), "today's partition, 3 made ahead, default"),
        (f"idempotency_partitions_premade{e}", eq(3), "3 partitions made ahead"),
        (f"idempotency_partitions_due_to_drop{e}", eq(0), "no partition due to drop"),
        ('idempotency_failed_keys_count{edition="extension",dead="false"}', eq(1),
         "1 failed key"),
        ('idempotency_failed_keys_count{edition="extension",dead="true"}', eq(1),
         "1 dead-lettered key"),
        (f"idempotency_consumers_count{e}", eq(1), "1 consumer"),
        (f"idempotency_consumers_partitions{e}", eq(2), "with 2 partitions"),
        ('idempotency_outbox_slot_lag_bytes{edition="extension",slot="monitoring_outbox",'
         'active="false"}', lambda v: v >= 0, "the outbox slot's lag"),
        (f"idempotency_settings_maintenance_interval_seconds{e}", eq(1),
         "maintenance every second"),
        (f"idempotency_settings_premake{e}", eq(3), "premake 3"),
    ]


def expected_managed():
    e = '{edition="managed"}'
    eq = lambda n: lambda v: v == n  # noqa: E731
    return [
        (f"idempotency_claims_in_flight{e}", eq(0), "no claim in flight"),
        (f"idempotency_claims_abandoned{e}", eq(1), "the dead holder's claim"),
        (f"idempotency_claims_abandoned_oldest_seconds{e}", lambda v: v > 0,
         "seconds since its lease lapsed"),
        (f"idempotency_keys_bytes{e}", lambda v: v > 0, "the key table's size"),
        (f"idempotency_keys_rows_estimate{e}", lambda v: v >= 0, "its row estimate"),
        (f"idempotency_keys_partitions{e}", eq(5), "today's partition, 3 made ahead, default"),
        (f"idempotency_partitions_premade{e}", eq(3), "3 partitions made ahead"),
        (f"idempotency_partitions_due_to_drop{e}", eq(0), "no partition due to drop"),
        ('idempotency_failed_keys_count{edition="managed",dead="false"}', eq(1), "1 failed key"),
        ('idempotency_failed_keys_count{edition="managed",dead="true"}', eq(0),
         "no dead-lettered key"),
        ('idempotency_maintenance_last_run_ok{edition="managed",result="ok",caller="sql"}',
         eq(1), "the last maintain() run was ok, from SQL"),
        ('idempotency_maintenance_last_run_age_seconds{edition="managed",result="ok",'
         'caller="sql"}', lambda v: v >= 0, "its age"),
        (f"idempotency_settings_maintenance_interval_seconds{e}", eq(1),
         "the interval the alert compares with"),
        (f"idempotency_settings_premake{e}", eq(3), "premake 3"),
    ]


def check_every_family(edition):
    """Every metric of the edition's queries file has a series in Prometheus."""
    names = query_file_metrics(QUERY_FILES[edition])
    missing = [n for n in names if not instant(f'{n}{{edition="{edition}"}}')]
    check(f"{edition}: all {len(names)} metrics of {os.path.basename(QUERY_FILES[edition])} "
          "are in Prometheus", not missing, f"missing: {missing}")


def check_dashboard():
    dashboard = json.load(open(DASHBOARD))
    panels = [p for p in dashboard["panels"] if p.get("type") != "row"]
    check(f"the dashboard has panels ({len(panels)})", len(panels) >= 8)
    titles = [p["title"].lower() for p in panels]
    for word in ("outcomes", "replay ratio", "in flight", "abandoned", "maintenance runs",
                 "maintenance lag", "partitions", "key table size"):
        check(f"a dashboard panel shows {word}", any(word in t for t in titles), titles)
    for panel in panels:
        for target in panel.get("targets", []):
            expr = (target["expr"].replace("$__rate_interval", "1m")
                    .replace("$__range", "5m").replace("$instance", ".+")
                    .replace("$edition", ".+").replace("$job", ".+"))
            try:
                series = wait_for(f"panel {panel['title']!r}", lambda: instant(expr), 30)
                ok(f"dashboard panel {panel['title']!r}: {len(series)} series of {target['expr']}")
            except Timeout as e:
                fail(f"dashboard panel {panel['title']!r} returns series", e)


def live():
    os.makedirs(RUN_DIR, exist_ok=True)
    setup_databases()
    procs = start_servers()
    try:
        wait_for("Prometheus ready", lambda: urllib.request.urlopen(
            f"{PROMETHEUS}/-/ready", timeout=5).status == 200)
        for edition in EXPORTER_PORTS:
            wait_value(f"{edition}: the exporter is scraped",
                       f'up{{edition="{edition}"}}', lambda v: v == 1)
        ok_extension = 'idempotency_maintenance_last_run_ok{edition="extension",caller="worker"}'
        wait_value("extension: the worker's last run was ok", ok_extension, lambda v: v == 1)
        events = {}
        traffic(events)
        # a holder that dies with its claim; the alert on abandoned claims fires
        after = time.time()
        crash_holder("extension", "crash-1", events)
        check_alert_fires("IdempotencyAbandonedClaimsRising", "extension",
                          'idempotency_claims_abandoned{edition="extension"}', lambda v: v > 0,
                          after)
        with connect("extension") as db:   # the retry takes the claim over
            db.execute("SELECT idempotency.reserve('shop', 'crash-1')")
            db.execute("SELECT idempotency.complete('shop', 'crash-1', 200, NULL)")
        check_metrics("extension", expected_extension())
        check_every_family("extension")

        with connect("managed") as db:
            db.execute("SELECT idempotency.reserve('shop', 'order-1')")
            db.execute("SELECT idempotency.complete('shop', 'order-1', 200, NULL)")
            db.execute("SELECT idempotency.reserve('shop', 'pay-1')")
            db.execute("SELECT idempotency.fail('shop', 'pay-1', '{\"error\": \"declined\"}')")
            db.execute("SELECT count(*) FROM idempotency.maintain()")
        after = time.time()
        crash_holder("managed", "crash-1", events)
        check_alert_fires("IdempotencyAbandonedClaimsRising", "managed",
                          'idempotency_claims_abandoned{edition="managed"}', lambda v: v > 0,
                          after)
        check_metrics("managed", expected_managed())
        check_every_family("managed")

        check_dashboard()

        # The worker stopped: maintenance no longer runs; the alert fires. (The managed
        # database's maintain() is run by hand above, so its alert fires as well.)
        with connect("extension") as db:
            db.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                       "WHERE backend_type = 'idempotency launcher'")
        after = time.time()
        for edition in ("extension", "managed"):
            interval = value('idempotency_settings_maintenance_interval_seconds'
                             f'{{edition="{edition}"}}')
            check_alert_fires("IdempotencyMaintenanceNotRunning", edition,
                              f'idempotency_maintenance_last_run_age_seconds{{edition="{edition}"}}',
                              lambda v: v > 3 * interval,
                              after if edition == "extension" else 0)
        for alert, dead in (("IdempotencyFailedKeysRising", "false"),
                            ("IdempotencyDeadKeysRising", "true")):
            try:
                wait_for(alert, lambda: instant(f'ALERTS{{alertname="{alert}",dead="{dead}",'
                                                'edition="extension",alertstate="firing"}'))
                ok(f"{alert} fires after the traffic's failures")
            except Timeout as e:
                fail(f"{alert} fires after the traffic's failures", e)
        quiet = instant('ALERTS{alertname=~"IdempotencyPremadePartitionsLow|'
                        'IdempotencyExpiredPartitionsNotDropped|IdempotencyClaimsPastLease|'
                        'IdempotencyMaintenanceFailing|IdempotencyKeyTableOverRetention"}')
        check("the alerts whose conditions the traffic never met stay quiet", not quiet, quiet)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


def main():
    check_rule_files()
    check_documented()
    try:
        live()
    except (Timeout, OSError, ValueError, psycopg.Error, subprocess.CalledProcessError) as e:
        fail("the live chain", f"{type(e).__name__}: {e}")
        for name in ("exporter-extension", "exporter-managed", "prometheus"):
            path = os.path.join(RUN_DIR, f"{name}.log")
            if os.path.exists(path):
                print(f"    --- tail of {path}")
                for line in open(path).read().splitlines()[-10:]:
                    print(f"    {line}")
    print(f"# passed {passed} failed {failed}")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
