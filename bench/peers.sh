#!/usr/bin/env bash
# Side by side with what users pick instead: one Express 5 service (bench/peers/
# service.mjs), POST /orders with an Idempotency-Key, the same one-row insert, under eight
# idempotency strategies: the project's middleware, its statement form (the insert as
# execute_once's statement) and runExternal, hand-written PostgreSQL ("fortress"), Redis SET
# NX + Lua, the Redis + PostgreSQL hybrid, Powertools (Redis cache layer) and
# express-idempotency (Redis adapter), and (0) the insert alone with no idempotency (new keys
# only: what any layer over that work can approach). The same service on Fastify 5
# (bench/peers/fastify.mjs) takes the strategies fastify-middleware, fastify-statement and
# fastify-accelerator (the Fastify plugin's two forms and Redis + Lua as a Fastify route), with
# fastify-insert beside them. Speed (throughput, p50/p99/p99.9, CPU per
# request over service + PostgreSQL + Redis from /proc; rounds in a rotated order) and
# correctness under faults (service SIGKILL, Redis restart, PostgreSQL -m immediate restart).
#   bash bench/peers.sh            full run; report in bench/peers/results.md + results.png
#   bash bench/peers.sh --smoke    seconds; report under bench/out/peers-smoke/
# Either fails, after writing the report, when one of the project's strategies ((1), (1s), (2),
# on either framework)
# doubled a key or lost, doubled or answered wrong under a fault.
# Knobs: BENCH_ROUNDS (3), BENCH_SECONDS (8 per scenario), BENCH_STRATEGIES, BENCH_FAULT_KEYS
# (300), BENCH_FAULT_SECONDS (120: the longest a fault run waits for its keys), BENCH_PHASES
# (speed loop roundtrips faults; loop: the work of (1), (1s), (3), (4) and of the insert
# alone, without HTTP: loop.mjs), BENCH_SCENARIOS (new8 replay8 new32 mix8 burst8: a mode and a
# number of connections; replay needs new before it), BENCH_NODE_ARGS (options of the
# service's node in the speed phase, e.g. --cpu-prof --cpu-prof-dir=DIR), BENCH_PORT (22020
# with IDEM_PORT_OFFSET=2000: PostgreSQL; +1 Redis, +2 the service), BENCH_EDITION (extension;
# managed: the project's strategies against the managed edition, as a team on RDS has it: a
# server that loads no idempotency library, the edition installed with psql -f by the
# database's owner, a role that is not a superuser, into a database of its own, the roles and
# grants of docs/managed.md's first hour pasted as they are, and the service connecting as the
# application role (orders_app) that owns nothing; the peers, (3) among them, unchanged on the
# same database; the report goes under bench/out/peers-managed[-smoke]/).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
PEERS=$IDEM_ROOT/bench/peers
SMOKE=0
[[ ${1:-} == --smoke ]] && SMOKE=1
ROUNDS=${BENCH_ROUNDS:-3}
SECONDS_PER=${BENCH_SECONDS:-8}
MAXREQ=${BENCH_MAX_REQUESTS:-200000}
FAULT_KEYS=${BENCH_FAULT_KEYS:-300}
FAULT_SECONDS=${BENCH_FAULT_SECONDS:-120}
PHASES=" ${BENCH_PHASES:-speed loop roundtrips faults} "
# shellcheck disable=SC2206 # a list of words
SCENARIOS=(${BENCH_SCENARIOS:-new8 replay8 new32 mix8 burst8})
# shellcheck disable=SC2206 # a list of words
NODE_ARGS=(${BENCH_NODE_ARGS:-})
# shellcheck disable=SC2206 # a list of words
STRATEGIES=(${BENCH_STRATEGIES:-middleware statement external fortress accelerator hybrid
  powertools express-idempotency fastify-middleware fastify-statement fastify-accelerator})
EDITION=${BENCH_EDITION:-extension}
[[ $EDITION =~ ^(extension|managed)$ ]] || die "BENCH_EDITION is extension or managed, not $EDITION"
if [[ $SMOKE == 1 ]]; then ROUNDS=1 SECONDS_PER=1 MAXREQ=40 FAULT_KEYS=12 FAULT_SECONDS=10; fi
BASE=${BENCH_PORT:-$((20020 + ${IDEM_PORT_OFFSET:-0}))}
PGPORT_B=$BASE REDIS_PORT=$((BASE + 1)) SVC_PORT=$((BASE + 2))
OUT=$IDEM_ROOT/bench/out/peers
[[ $EDITION == extension ]] || OUT+=-$EDITION
[[ $SMOKE == 0 ]] || OUT+=-smoke
REPORT_DIR=$([[ $SMOKE == 1 || $EDITION == managed ]] && echo "$OUT" || echo "$PEERS")
rm -rf "$OUT" && mkdir -p "$OUT"
echo "$EDITION" >"$OUT/edition.txt"

# --- what it needs: redis-server (Debian), the npm packages (package-lock.json) ------------
[[ -n $(missing_packages redis-server) ]] && apt_install redis-server >&2
command -v node >/dev/null || die "node is not installed"
"$IDEM_ROOT/scripts/npm_ci.sh" "$PEERS" >&2
# the Fastify plugin's own import (fastify-plugin) resolves in the client's node_modules
"$IDEM_ROOT/scripts/npm_ci.sh" "$IDEM_ROOT/clients/node" >&2

# --- PostgreSQL --------------------------------------------------------------------------
DATA=/tmp/idempotency-bench-peers-$PGPORT_B/data
SOCK=/tmp/idempotency-$PGPORT_B
REDIS_DIR=$OUT/redis
REDIS_PID=
SVC_PID=
cleanup() {
  [[ -n $SVC_PID ]] && kill -9 "$SVC_PID" 2>/dev/null || true
  [[ -n $REDIS_PID ]] && kill -9 "$REDIS_PID" 2>/dev/null || true
  cluster_stop "$DATA" || true
}
trap cleanup EXIT
log "PostgreSQL on $PGPORT_B ($DATA), Redis on $REDIS_PORT, the service on $SVC_PORT"
# managed: no library preloaded (nor created: the edition is SQL only), as on RDS
SERVER_SETTINGS=("max_connections = 200" "synchronous_commit = on")
[[ $EDITION == managed ]] && SERVER_SETTINGS+=("shared_preload_libraries = ''")
cluster_init "$DATA" "$PGPORT_B" "$SOCK" "${SERVER_SETTINGS[@]}"
cluster_start "$DATA" "$PGPORT_B" "$SOCK"
# q: psql as the superuser, for the setup and the checks; the service connects as SVC_USER.
BENCH_DB=postgres SVC_USER=postgres
[[ $EDITION == managed ]] && BENCH_DB=bench_managed SVC_USER=orders_app
export PGHOST=$SOCK PGPORT=$PGPORT_B PGDATABASE=$BENCH_DB
export REDIS_URL=redis://127.0.0.1:$REDIS_PORT PORT=$SVC_PORT
q() { "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -U postgres "$@"; }
BENCH_TABLES="CREATE TABLE bench_orders (id bigserial PRIMARY KEY, k text NOT NULL, item text, qty int,
  created_at timestamptz NOT NULL DEFAULT now());
CREATE INDEX ON bench_orders (k);
-- the fortress's key table (strategies 3 and 5)
CREATE TABLE bench_idem (k text PRIMARY KEY, request_hash text NOT NULL, status text NOT NULL,
  status_code int, response jsonb, created_at timestamptz NOT NULL DEFAULT now());"
if [[ $EDITION == managed ]]; then
  # The database's owner (the RDS master user's part): the edition's script, the roles and
  # grants of docs/managed.md (step 2, the block that creates orders_app, as it is), the tables
  # and the service's grants on them (step 3).
  VERSION=$(sed -n "s/^default_version = '\(.*\)'$/\1/p" "$IDEM_ROOT/idempotency.control")
  q -d postgres -c "CREATE ROLE bench_admin LOGIN CREATEROLE NOSUPERUSER" \
    -c "CREATE DATABASE $BENCH_DB OWNER bench_admin"
  q -U bench_admin -1 -f "$IDEM_ROOT/editions/managed/idempotency--$VERSION.sql" >/dev/null
  python3 - "$IDEM_ROOT/docs/managed.md" <<'PY' | q -U bench_admin -1 -f -
import re, sys
blocks = re.findall(r"^```sql\n(.*?)^```", open(sys.argv[1]).read(), re.S | re.M)
print(next(b for b in blocks if "CREATE ROLE orders_app LOGIN" in b))
PY
  q -U bench_admin -1 <<SQL
$BENCH_TABLES
GRANT SELECT, INSERT, UPDATE ON bench_orders, bench_idem TO $SVC_USER;
GRANT USAGE ON SEQUENCE bench_orders_id_seq TO $SVC_USER;
SQL
  EDITION_SQL=$(python3 -c 'import json, sys
print(json.load(open(sys.argv[1]))["statements"]["edition"]["sql"])' "$IDEM_ROOT/test/vectors/statements.json")
  [[ $(q -U "$SVC_USER" -c "SELECT edition || ' ' || installed_as FROM ($EDITION_SQL) AS e") == "managed script" ]] ||
    die "$BENCH_DB does not have the managed edition installed as a script"
  [[ $(q -c "SELECT rolsuper FROM pg_roles WHERE rolname = current_user" -U "$SVC_USER") == f ]] ||
    die "$SVC_USER is a superuser"
else
  q <<SQL
CREATE EXTENSION IF NOT EXISTS idempotency;
$BENCH_TABLES
SQL
fi
export PGUSER=$SVC_USER

# --- Redis: MODE default (redis-server's defaults) or aof (appendonly yes, everysec) --------
redis_start() {
  local extra=()
  [[ ${REDIS_MODE:-default} == aof ]] && extra=(--appendonly yes --appendfsync everysec)
  mkdir -p "$REDIS_DIR"
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$REDIS_DIR" "${extra[@]}" \
    >>"$OUT/redis.log" 2>&1 &
  REDIS_PID=$!
  until redis-cli -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG; do
    kill -0 "$REDIS_PID" 2>/dev/null || die "redis-server did not start (see $OUT/redis.log)"
    sleep 0.05
  done
}
redis_stop() {
  if [[ -n $REDIS_PID ]]; then kill -9 "$REDIS_PID" 2>/dev/null || true; fi
  while [[ -n $REDIS_PID ]] && kill -0 "$REDIS_PID" 2>/dev/null; do sleep 0.05; done
  REDIS_PID=
}
reset_state() {
  q -c 'TRUNCATE bench_orders, bench_idem, idempotency.keys'
  redis-cli -p "$REDIS_PORT" flushall >/dev/null
}

# CPU ticks (user + system) of the service, every PostgreSQL process and Redis: "pid ticks"
# lines (the delta is taken per process, so one that exits meanwhile does not count negative).
cpu_ticks() {
  local pids pid postmaster
  postmaster=$(head -1 "$DATA/postmaster.pid" 2>/dev/null || true)
  pids="$SVC_PID $REDIS_PID $postmaster $(pgrep -P "$postmaster" 2>/dev/null | tr '\n' ' ')"
  for pid in $pids; do
    awk -v pid="$pid" '{ print pid, $14 + $15 }' "/proc/$pid/stat" 2>/dev/null || true
  done
}
HZ=$(getconf CLK_TCK)

svc_start() { # STRATEGY [node options...]
  local service=$PEERS/service.mjs
  [[ $1 == fastify-* ]] && service=$PEERS/fastify.mjs
  # emptied here, not by the child's redirection: that may come after the wait below has read
  # the "listening" of the previous start
  : >"$OUT/service-$1.log"
  STRATEGY=$1 node "${@:2}" "$service" >>"$OUT/service-$1.log" 2>&1 &
  SVC_PID=$!
  until grep -q listening "$OUT/service-$1.log" 2>/dev/null; do
    kill -0 "$SVC_PID" 2>/dev/null ||
      { cat "$OUT/service-$1.log" >&2; die "service $1 did not start"; }
    sleep 0.05
  done
}
# SIGTERM: the service exits on it (a --cpu-prof profile is written then).
svc_stop() { kill "$SVC_PID" 2>/dev/null; wait "$SVC_PID" 2>/dev/null || true; SVC_PID=; }

# --- speed ----------------------------------------------------------------------------------
SPEED=$OUT/speed.tsv
# cpu_ms: service + PostgreSQL + Redis; service_ms: the service's share; load: the 1-minute
# load average at the scenario's end
printf 'round\tstrategy\tscenario\trps\tp50\tp99\tp999\tcpu_ms\tok\trequests\tkeys\tdoubled\tservice_ms\tload\n' \
  >"$SPEED"
# Keys of KEYFILE that got more than one order.
doubled() { q -c 'CREATE TEMP TABLE sent (k text)' -c "\\copy sent FROM '$1'" \
  -c 'SELECT count(*) FROM (SELECT k FROM bench_orders WHERE k IN (SELECT k FROM sent)
      GROUP BY k HAVING count(*) > 1) d'; }
scenario() { # ROUND STRATEGY NAME MODE CONNS
  local t0 t1 line keys
  cpu_ticks >"$OUT/ticks0"
  line=$(node "$PEERS/load.mjs" "http://127.0.0.1:$SVC_PORT" "$4" "$5" "$SECONDS_PER" "$MAXREQ" \
    "$OUT/keys-$2" "$OUT/sent")
  cpu_ticks >"$OUT/ticks1"
  keys=$(grep -c . "$OUT/sent" || true)
  python3 - "$1" "$2" "$3" "$line" "$OUT/ticks0" "$OUT/ticks1" "$HZ" "$keys" "$(doubled "$OUT/sent")" \
    "$SVC_PID" >>"$SPEED" <<'PY'
import json, sys
rnd, strat, name, line, before, after, hz, keys, doubled, service = sys.argv[1:]
r = json.loads(line)
t0 = dict(map(int, l.split()) for l in open(before) if l.strip())
delta = {pid: t - t0.get(pid, 0) for pid, t in
         (map(int, l.split()) for l in open(after) if l.strip())}
per_request = lambda ticks: ticks * 1000 / int(hz) / max(r["requests"], 1)
cpu, service_cpu = per_request(sum(delta.values())), per_request(delta.get(int(service), 0))
print(f'{rnd}\t{strat}\t{name}\t{r["rps"]:.1f}\t{r["p50"]:.2f}\t{r["p99"]:.2f}\t{r["p999"]:.2f}'
      f'\t{cpu:.3f}\t{r["ok"]}\t{r["requests"]}\t{keys}\t{doubled}\t{service_cpu:.3f}'
      f'\t{open("/proc/loadavg").read().split()[0]}')
PY
}
# The index of the I-th strategy to run in round ROUND, of N: each round starts (ROUND - 1) /
# ROUNDS of the way along the list, so over 3 rounds a strategy runs once early, once in the
# middle and once late in a round (shifted by one a round, a strategy would run last in one
# round and first or second in the others: a drift within rounds would weigh on it alone).
in_round() { echo $((($1 + ($2 - 1) * $3 / ROUNDS) % $3)); }
REDIS_MODE=default redis_start
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/load.txt"
# (0), the insert alone (no idempotency), runs beside them for new keys: the ceiling of any layer
# over the same work (on Fastify too when a strategy runs there).
SPEED_STRATEGIES=("${STRATEGIES[@]}" insert)
[[ " ${STRATEGIES[*]}" == *" fastify-"* ]] && SPEED_STRATEGIES+=(fastify-insert)
n=${#SPEED_STRATEGIES[@]}
for ((round = 1; round <= ROUNDS; round++)); do
  [[ $PHASES == *" speed "* ]] || break
  for ((i = 0; i < n; i++)); do
    s=${SPEED_STRATEGIES[$(in_round "$i" "$round" "$n")]}
    reset_state
    svc_start "$s" "${NODE_ARGS[@]}"
    log "round $round: $s"
    for sc in "${SCENARIOS[@]}"; do # new8 -> mode new, 8 connections
      [[ $s == *insert && $sc != new* ]] && continue
      scenario "$round" "$s" "$sc" "${sc%%[0-9]*}" "${sc##*[a-z]}"
    done
    svc_stop
  done
done

# --- without HTTP: each strategy's own work in a loop (loop.mjs), the same rotation -------
LOOP=$OUT/loop.tsv
printf 'round\tstrategy\tmode\trps\tclient_us\tpostgresql_us\tredis_us\n' >"$LOOP"
LOOP_STRATEGIES=()
for s in middleware statement fortress accelerator; do
  [[ " ${STRATEGIES[*]} " == *" $s "* ]] && LOOP_STRATEGIES+=("$s")
done
LOOP_STRATEGIES+=(insert)
for ((round = 1; round <= ROUNDS; round++)); do
  [[ $PHASES == *" loop "* ]] || break
  for ((i = 0; i < ${#LOOP_STRATEGIES[@]}; i++)); do
    s=${LOOP_STRATEGIES[$(in_round "$i" "$round" "${#LOOP_STRATEGIES[@]}")]}
    reset_state
    log "round $round without HTTP: $s"
    for mode in new replay; do
      [[ $s == insert && $mode == replay ]] && continue # no idempotency, no replays
      line=$(LOOP_POSTMASTER=$(head -1 "$DATA/postmaster.pid") LOOP_REDIS=$REDIS_PID LOOP_HZ=$HZ \
        node "$PEERS/loop.mjs" "$s" "$mode" 8 "$SECONDS_PER" "$OUT/loop-keys")
      python3 -c 'import json, sys
r = json.loads(sys.argv[4])
print("\t".join(sys.argv[1:4] + [f"{r[k]:.1f}" for k in
      ("rps", "client_us", "postgresql_us", "redis_us")]))' "$round" "$s" "$mode" "$line" >>"$LOOP"
    done
  done
done

# --- round trips: one request at a time, answers counted on the service's connections ------
RTT=$OUT/roundtrips.tsv
printf 'strategy\tscenario\trequests\tpostgresql\tredis\n' >"$RTT"
counted() { # the counters of the service (BENCH_COUNT=1): "postgresql redis"
  node -e 'const r = await (await fetch(process.argv[1])).json();
    console.log(r.postgresql, r.redis);' --input-type=module "http://127.0.0.1:$SVC_PORT/__roundtrips"
}
count_rtt() { # STRATEGY SCENARIO MODE REQUESTS
  local before after
  before=$(counted)
  node "$PEERS/load.mjs" "http://127.0.0.1:$SVC_PORT" "$3" 1 60 "$4" "$OUT/rtt-keys" >/dev/null
  after=$(counted)
  python3 -c 'import sys
s, sc, n, b0, b1, a0, a1 = sys.argv[1:]
n = int(n)
print(f"{s}\t{sc}\t{n}\t{(int(a0) - int(b0)) / n:.2f}\t{(int(a1) - int(b1)) / n:.2f}")' \
    "$1" "$2" "$4" $before $after >>"$RTT"
}
if [[ $PHASES == *" roundtrips "* ]]; then
  for s in "${STRATEGIES[@]}"; do
    reset_state
    BENCH_COUNT=1 svc_start "$s"
    log "round trips: $s"
    # warm: the pool's and Redis's connections opened, statements prepared
    node "$PEERS/load.mjs" "http://127.0.0.1:$SVC_PORT" new 1 60 20 >/dev/null
    count_rtt "$s" new new $((SMOKE == 1 ? 10 : 200))
    count_rtt "$s" replay replay $((SMOKE == 1 ? 10 : 200))
    svc_stop
  done
fi
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/load.txt"

# --- faults ---------------------------------------------------------------------------------
FAULTS=$OUT/faults.tsv
printf 'redis\tstrategy\tfault\tkeys\tanswered\tfaults\tlost\tdoubled\twrong\n' >"$FAULTS"
export PG_CONFIG IDEM_PORT_OFFSET
pg_restart="source '$IDEM_ROOT/scripts/lib.sh'; cluster_crash '$DATA';
  cluster_start '$DATA' '$PGPORT_B' '$SOCK'"
# The smoke run (the test command's) takes Redis with its defaults only, and stops waiting for
# a key after 10 s: it shows that every fault run works, not what it finds.
MODES=(default aof)
[[ $SMOKE == 1 ]] && MODES=(default)
[[ $PHASES == *" faults "* ]] || MODES=()
for mode in ${MODES[@]+"${MODES[@]}"}; do
  redis_stop
  rm -rf "$REDIS_DIR"
  REDIS_MODE=$mode redis_start
  aof_args=
  if [[ $mode == aof ]]; then aof_args='--appendonly yes --appendfsync everysec'; fi
  for s in "${STRATEGIES[@]}"; do
    for fault in kill redis pg; do
      # (1s) takes the Redis restart too, though it uses no Redis (it must not notice); Redis's
      # persistence (aof) changes nothing for the PostgreSQL-only strategies
      [[ $fault == redis && ${s#fastify-} =~ ^(middleware|external|fortress)$ ]] && continue
      [[ $mode == aof && ${s#fastify-} =~ ^(middleware|statement|external|fortress)$ ]] && continue
      reset_state
      # Redis restarted without saving: SIGKILL, then a new server on the same directory (with
      # aof, it reads what everysec wrote).
      redis_restart="kill -9 $REDIS_PID; while kill -0 $REDIS_PID 2>/dev/null; do sleep 0.05; done; \
        redis-server --port $REDIS_PORT --bind 127.0.0.1 --dir '$REDIS_DIR' \
        $aof_args \
        >>'$OUT/redis.log' 2>&1 & echo \$! >'$OUT/redis.pid'; \
        until redis-cli -p $REDIS_PORT ping 2>/dev/null | grep -q PONG; do sleep 0.05; done"
      cmd=$pg_restart
      [[ $fault == redis ]] && cmd=$redis_restart
      log "faults ($mode Redis): $s, $fault"
      line=$(STRATEGY=$s FAULT_CMD=$cmd FAULT_SECONDS=$FAULT_SECONDS \
        FAULT_MIN_KILLS=$((SMOKE == 1 ? 1 : 4)) \
        node "$PEERS/faults.mjs" "$fault" "$FAULT_KEYS" 8)
      if [[ $fault == redis ]]; then REDIS_PID=$(cat "$OUT/redis.pid"); fi
      python3 - "$mode" "$s" "$line" >>"$FAULTS" <<'PY'
import json, sys
mode, strat, line = sys.argv[1:]
r = json.loads(line)
print("\t".join(str(x) for x in (mode, strat, r["fault"], r["keys"], r["answered"], r["faults"],
                                   r["lost"], r["doubled"], r["wrong"])))
PY
    done
  done
done

python3 "$PEERS/report.py" "$OUT" "$REPORT_DIR"
cat "$REPORT_DIR/results.md"

# The project's own strategies promise each key one order: with the report written, the run
# fails if one of them doubled a key in a speed scenario (the burst of one key from 8 clients
# included), or lost, doubled or answered wrong in a fault run (or one had no fault or no
# answer: it would show nothing). The peers' figures are findings.
python3 - "$SPEED" "$FAULTS" <<'PY'
import csv, sys
speed, faults = sys.argv[1:]
ONCE = {"middleware", "statement", "external", "fastify-middleware", "fastify-statement"}
broken = []
for r in csv.DictReader(open(speed), delimiter="\t"):
    if r["strategy"] in ONCE and int(r["doubled"]) != 0:
        broken.append(f'round {r["round"]} {r["strategy"]} {r["scenario"]}: {r["doubled"]} doubled')
for r in csv.DictReader(open(faults), delimiter="\t"):
    if r["strategy"] not in ONCE:
        continue
    if any(int(r[k]) != 0 for k in ("lost", "doubled", "wrong")):
        broken.append(f'faults {r["redis"]} {r["strategy"]} {r["fault"]}: lost {r["lost"]}, '
                      f'doubled {r["doubled"]}, wrong {r["wrong"]}')
    if int(r["faults"]) == 0 or int(r["answered"]) == 0:  # nothing would have been shown
        broken.append(f'faults {r["redis"]} {r["strategy"]} {r["fault"]}: {r["faults"]} '
                      f'faults, {r["answered"]} keys answered')
for line in broken:
    print(f"not exactly once: {line}", file=sys.stderr)
sys.exit(1 if broken else 0)
PY
