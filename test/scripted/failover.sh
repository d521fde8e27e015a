#!/usr/bin/env bash
# idem: 15 only: pg_auto_failover is packaged for PostgreSQL 15 only (see scripts/test.sh)
# Failover under load with pg_auto_failover (Debian's postgresql-15-auto-failover and
# pg-auto-failover-cli): a monitor, a primary (node1) and a standby (node2) on 127.0.0.1, in
# synchronous mode (pg_auto_failover's default with one standby), the extension's library
# preloaded and its worker configured on both nodes. Load: the storm shape (pgbench, a new
# connection per transaction) plus ACKED clients that record a key only once its COMMIT was
# acknowledged; each acknowledged transaction also took a next_key value and accepted it as a
# position of its consumer partition. Then node1 is killed (keeper killed, postgres stopped
# -m immediate), the monitor promotes node2, clients reconnect (multi-host connection string,
# target_session_attrs=read-write). Afterwards, on the new primary:
#   - every acknowledged key replays with its response;
#   - no business row twice, none without its completed key;
#   - next_key is above every value any committed transaction saw;
#   - accept refuses every position acknowledged before the failover;
# node1 rejoins as a standby (pg_auto_failover rewinds it), and the extension's worker there
# stays quiet: one LOG that it waits for promotion, no error. Then the roles turn once more:
# node2's keeper and postmaster get SIGKILL, node1 is promoted, and the same checks hold.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/lib/prelude.sh" none
cluster_setup test-cluster/failover 54491
# Every connection below names its server; pg_autoctl would follow PGHOST (scripts/test.sh
# exports its own cluster's) to its local server instead.
unset PGHOST PGPORT PGUSER PGDATABASE
BASE=$(dirname "$CLUSTER_DATA")
MON_PORT=$CLUSTER_PORT N1_PORT=$((CLUSTER_PORT + 1)) N2_PORT=$((CLUSTER_PORT + 2))
CLIENTS=${CLIENTS:-6}
NKEYS=${NKEYS:-50}
GENERATIONS_PER_SECOND=${GENERATIONS_PER_SECOND:-5}
DURATION=${DURATION:-60} # the storm's bound; it is stopped at each failover anyway
ACKED=${ACKED:-3}
WORK=$(mktemp -d /tmp/idem-failover.XXXXXX)
chmod 0755 "$WORK"
PGAUTOCTL=/usr/bin/pg_autoctl
if [[ ! -x $PGAUTOCTL ]] || [[ ! -f $("$PG_CONFIG" --sharedir)/extension/pgautofailover.control ]]; then
  log "installing pg_auto_failover"
  apt_install postgresql-15-auto-failover pg-auto-failover-cli >/dev/null
fi
[[ -f $("$PG_CONFIG" --sharedir)/extension/pgautofailover.control ]] ||
  die "pgautofailover is not installed into $("$PG_CONFIG" --sharedir) (copy it from the Debian package: dpkg -L postgresql-15-auto-failover)"
# pg_autoctl keeps its configuration and state under XDG directories: ours, in BASE.
autoctl() {
  as_pg env XDG_CONFIG_HOME="$BASE/xdg/config" XDG_DATA_HOME="$BASE/xdg/data" \
    XDG_RUNTIME_DIR="$BASE/xdg/run" PG_CONFIG="$PG_CONFIG" timeout 180 "$PGAUTOCTL" "$@"
}
# The keeper's supervisor pid and every process below it (postgres included).
supervisor_pid() { cat "$BASE/xdg/run/pg_autoctl$BASE/$1/pg_autoctl.pid" 2>/dev/null | head -n 1; }
descendants() {
  local p
  for p in $(pgrep -P "$1" || true); do echo "$p"; descendants "$p"; done
}
# The keeper's own processes (supervisor and services), not postgres. Killed with SIGKILL,
# never stopped: runuser, their parent, would stop itself with a stopped child.
autoctl_pids() {
  local sup p
  sup=$(supervisor_pid "$1")
  [[ -n $sup ]] || return 0
  for p in "$sup" $(descendants "$sup"); do
    [[ $(ps -o comm= -p "$p" 2>/dev/null) == pg_autoctl* ]] && echo "$p"
  done
  return 0
}
postmaster_pid() { head -n 1 "$BASE/$1/postmaster.pid" 2>/dev/null; }
stop_node() { # keeper killed, postgres stopped -m immediate
  local pids
  pids=$(autoctl_pids "$1")
  # shellcheck disable=SC2086 # a list of pids
  [[ -z $pids ]] || kill -9 $pids 2>/dev/null || true
  if [[ -f $BASE/$1/postmaster.pid ]]; then
    as_pg "$PGBIN/pg_ctl" -D "$BASE/$1" -m immediate -w stop >/dev/null 2>&1 || true
  fi
}
on_exit 'stop_node node1; stop_node node2; stop_node monitor'
on_fail 'autoctl show state --pgdata "$BASE/monitor" 2>&1 | tail -n 5'
on_fail 'for n in node1 node2; do
  echo "--- $n keeper log"; tail -n 15 "$BASE/$n.log" 2>/dev/null || true
  echo "--- $n server log"; tail -n 15 "$(ls -t "$BASE/$n"/log/*.log 2>/dev/null | head -n 1)" 2>/dev/null || true
done'
MULTI="host=127.0.0.1,127.0.0.1 port=$N1_PORT,$N2_PORT dbname=postgres user=postgres target_session_attrs=read-write connect_timeout=3"
# on PORT SQL...: psql on one node (TCP, 127.0.0.1), bounded.
on() {
  local port=$1
  shift
  timeout 60 "$PGBIN/psql" -X -v ON_ERROR_STOP=1 -qAt "host=127.0.0.1 port=$port dbname=postgres user=postgres connect_timeout=3" "$@"
}
q() { timeout 60 "$PGBIN/psql" -X -v ON_ERROR_STOP=1 -qAt "$MULTI" "$@"; }
state_is() { # state_is NODE STATE...: the monitor's current state of NODE is one of them
  local node=$1 s
  shift
  s=$(timeout 20 "$PGBIN/psql" -X -qAt "host=127.0.0.1 port=$MON_PORT dbname=pg_auto_failover user=autoctl_node" \
    -c "SELECT reportedstate || '/' || goalstate FROM pgautofailover.node WHERE nodename = '$node'" 2>/dev/null) || return 1
  local want
  for want in "$@"; do [[ $s == "$want/$want" ]] && return 0; done
  return 1
}
answers() { on "$@" -c "SELECT 1" >/dev/null 2>&1; }
wait_ready() { poll --try 60 answers "$1"; } # wait_ready PORT
wait_state() { # wait_state SECONDS NODE STATE...
  local limit=$1
  shift
  poll --try "$limit" state_is "$@"
}

rm -rf "$BASE" && mkdir -p "$BASE/xdg/config" "$BASE/xdg/data" "$BASE/xdg/run"
chmod 0700 "$BASE/xdg/run"
is_root && chown -R postgres: "$BASE"

echo "--- the monitor"
autoctl create monitor --pgdata "$BASE/monitor" --pgport "$MON_PORT" --hostname 127.0.0.1 \
  --auth trust --no-ssl --pgctl "$PGBIN/pg_ctl" >"$WORK/create-monitor.log" 2>&1 ||
  { cat "$WORK/create-monitor.log"; fail "pg_autoctl create monitor"; }
autoctl config set --pgdata "$BASE/monitor" postgresql.listen_addresses 127.0.0.1 >/dev/null
# Small: this is a test machine. And quick failure detection.
cat >>"$BASE/monitor/postgresql.auto.conf" <<EOF
shared_buffers = '32MB'
pgautofailover.health_check_period = 1000
pgautofailover.health_check_timeout = 1000
pgautofailover.health_check_max_retries = 1
pgautofailover.health_check_retry_delay = 500
pgautofailover.node_considered_unhealthy_timeout = 3000
pgautofailover.primary_demote_timeout = 5000
EOF
start_keeper() { # start_keeper NODE
  as_pg env XDG_CONFIG_HOME="$BASE/xdg/config" XDG_DATA_HOME="$BASE/xdg/data" \
    XDG_RUNTIME_DIR="$BASE/xdg/run" "$PGAUTOCTL" run --pgdata "$BASE/$1" >>"$BASE/$1.log" 2>&1 &
  BG+=("$!")
}
start_keeper monitor
poll --try 60 answers "$MON_PORT" -d pg_auto_failover || true
timeout 20 "$PGBIN/psql" -X -qAt "host=127.0.0.1 port=$MON_PORT dbname=pg_auto_failover user=autoctl_node" -c "SELECT 1" >/dev/null ||
  fail "the monitor does not answer"
ok "the monitor runs on 127.0.0.1:$MON_PORT"

MONITOR_URI="postgres://autoctl_node@127.0.0.1:$MON_PORT/pg_auto_failover?sslmode=disable"
create_node() { # create_node NODE PORT
  autoctl create postgres --pgdata "$BASE/$1" --pgport "$2" --listen 127.0.0.1 \
    --hostname 127.0.0.1 --name "$1" --auth trust --no-ssl --pgctl "$PGBIN/pg_ctl" \
    --monitor "$MONITOR_URI" >"$WORK/create-$1.log" 2>&1 ||
    { tail -n 20 "$WORK/create-$1.log"; fail "pg_autoctl create postgres $1"; }
}
echo "--- node1 (primary)"
create_node node1 "$N1_PORT"
# ALTER SYSTEM's file wins over pg_auto_failover's include; node2's base backup copies it.
cat >>"$BASE/node1/postgresql.auto.conf" <<EOF
shared_buffers = '64MB'
wal_keep_size = '256MB'
shared_preload_libraries = 'pg_stat_statements, idempotency'
wal_level = logical
idempotency.database = 'postgres'
idempotency.maintenance_interval = '2s'
max_connections = 60
EOF
start_keeper node1
wait_state 90 node1 single || fail "node1 did not become single"
wait_ready "$N1_PORT" || fail "node1 does not accept connections"
on "$N1_PORT" -c "CREATE EXTENSION idempotency" -c "SELECT idempotency.create_stream('ha', 10)" \
  -c "CREATE TABLE orders (key text NOT NULL, attempt int NOT NULL) /* no unique index on purpose */" \
  -c "CREATE UNLOGGED TABLE outcomes (path int, o int)" >/dev/null
ok "node1 is the primary, with the extension"

echo "--- node2 (synchronous standby)"
create_node node2 "$N2_PORT"
start_keeper node2
wait_state 120 node2 secondary || fail "node2 did not become a secondary"
wait_state 60 node1 primary || fail "node1 is not primary"
sync=$(on "$N1_PORT" -c "SHOW synchronous_standby_names")
[[ -n $sync ]] || fail "synchronous_standby_names is empty on node1"
synchronous() { [[ $(on "$N1_PORT" -c "SELECT sync_state FROM pg_stat_replication") =~ ^(sync|quorum)$ ]]; }
poll --try 60 synchronous || true
[[ $(on "$N1_PORT" -c "SELECT sync_state FROM pg_stat_replication") =~ ^(sync|quorum)$ ]] ||
  fail "node2 does not replicate synchronously"
ok "node2 streams synchronously ($sync)"

# --- load -----------------------------------------------------------------------------------
q() { timeout 60 "$PGBIN/psql" -X -v ON_ERROR_STOP=1 -qAt "$MULTI" "$@"; }
fail_storm() { echo "storm: $*"; }
source "$(dirname "${BASH_SOURCE[0]}")/lib/storm_shape.sh"
storm_script
start_load() { # start_load ROUND
  local round=$1 c
  timeout $((DURATION + 30)) "$PGBIN/pgbench" -n -C -c "$CLIENTS" -j 2 -T "$DURATION" \
    -f "$WORK/storm.pgbench" "$MULTI" >"$WORK/pgbench-$round.log" 2>&1 &
  BG+=("$!")
  STORM_PID=$!
  ACKED_PIDS=()
  for ((c = 1; c <= ACKED; c++)); do
    acked_client "$round" "$c" &
    BG+=("$!")
    ACKED_PIDS+=("$!")
  done
}
# One client: a transaction per key; the key, its next_key value and the accepted position
# are recorded only after psql saw COMMIT succeed. Stops at $WORK/stop.
acked_client() {
  local round=$1 c=$2 i=0 out
  while [[ ! -f $WORK/stop ]]; do
    i=$((i + 1))
    out=$(timeout 20 "$PGBIN/psql" -X -v ON_ERROR_STOP=1 -qAt "$MULTI" 2>/dev/null <<SQL
BEGIN;
SELECT outcome AS outcome FROM idempotency.reserve('acked', 'r$round-c$c-$i') \gset
INSERT INTO orders VALUES ('r$round-c$c-$i', 1);
SELECT idempotency.next_key('ha') AS nk \gset
SELECT idempotency.accept('acked', 'c$c', :nk) AS acc \gset
SELECT idempotency.complete('acked', 'r$round-c$c-$i', 201, jsonb_build_object('nk', :nk)) \gset
COMMIT;
\echo ACK :outcome :nk :acc
SQL
    ) || { sleep 0.2; continue; }
    [[ $out == "ACK new "*" t" ]] || { echo "unexpected: $out" >>"$WORK/acked-errors"; continue; }
    read -r _ _ nk _ <<<"$out"
    echo "r$round-c$c-$i $nk c$c" >>"$WORK/acked-$round-$c"
  done
}
stop_load() {
  touch "$WORK/stop"
  local p
  for p in "${ACKED_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  kill "$STORM_PID" 2>/dev/null || true
  wait "$STORM_PID" 2>/dev/null || true
  rm -f "$WORK/stop"
}

# After a failover to PORT: every check on the new primary.
check_after() { # check_after ROUND NEW_PORT
  local round=$1 port=$2 acked bad max next refused total dup orphan
  cat "$WORK"/acked-*-* >"$WORK/acked-all"
  acked=$(wc -l <"$WORK/acked-all")
  ((acked > 10)) || fail "only $acked acknowledged keys"
  # Every acknowledged key replays with its response.
  on "$port" -c "CREATE TEMP TABLE a (key text, nk bigint, part text)" \
    -c "\\copy a FROM '$WORK/acked-all' WITH (DELIMITER ' ')" \
    -c "SELECT count(*) FROM a, LATERAL idempotency.reserve('acked', a.key) r
        WHERE r.outcome <> 'replay' OR r.status_code <> 201 OR r.response <> jsonb_build_object('nk', a.nk)" \
    >"$WORK/bad" || fail "replaying the acknowledged keys"
  bad=$(cat "$WORK/bad")
  [[ $bad == 0 ]] || fail "$bad of $acked acknowledged keys do not replay with their response"
  ok "round $round: all $acked acknowledged keys replay with their response"
  read -r total dup orphan <<<"$(on "$port" -F ' ' -c "SELECT
      (SELECT count(*) FROM orders),
      (SELECT count(*) FROM (SELECT key FROM orders GROUP BY key HAVING count(*) > 1) d),
      (SELECT count(*) FROM orders o WHERE NOT EXISTS (SELECT FROM idempotency.keys k
         WHERE k.scope IN ('storm', 'acked') AND k.key = o.key AND k.state = 'completed'
           AND k.attempt = o.attempt))")"
  [[ $dup == 0 ]] || fail "$dup keys with more than one business row"
  [[ $orphan == 0 ]] || fail "$orphan business rows without their completed key"
  ok "round $round: $total business rows, none twice, none without its completed key"
  # next_key above every value a committed transaction saw (the acknowledged ones, and any
  # other that survived in a response).
  max=$(on "$port" -c "SELECT greatest(
      (SELECT max(nk) FROM (SELECT (response->>'nk')::bigint nk FROM idempotency.keys WHERE scope = 'acked') x),
      $(sort -n -k2 "$WORK/acked-all" | tail -n 1 | cut -d' ' -f2))")
  next=$(on "$port" -c "SELECT idempotency.next_key('ha')")
  ((next > max)) || fail "next_key on the new primary gave $next, not above $max"
  ok "round $round: next_key on the new primary ($next) is above every committed value ($max)"
  # accept refuses every position acknowledged before the failover.
  refused=$(on "$port" -c "CREATE TEMP TABLE a (key text, nk bigint, part text)" \
    -c "\\copy a FROM '$WORK/acked-all' WITH (DELIMITER ' ')" \
    -c "SELECT count(*) FILTER (WHERE NOT idempotency.accept('acked', part, nk)) || '/' || count(*) FROM a")
  [[ $refused == "$acked/$acked" ]] || fail "accept refused $refused acknowledged positions"
  ok "round $round: accept refuses all $acked acknowledged positions"
}

acks() { cat "$WORK"/acked-"$1"-* 2>/dev/null | wc -l; }
acked_at_least() { [[ $(acks "$1") -ge $2 ]]; }
# load_under_way ROUND: the load of ROUND started, and 20 keys acknowledged.
load_under_way() {
  start_load "$1"
  poll --try 120 acked_at_least "$1" 20 || fail "the load of round $1 did not get going ($(acks "$1") acks)"
}
# promoted ROUND NODE PORT WHAT: NODE is promoted (within 90 s from now), the clients go on
# on it (10 more acknowledged keys), then the load stops and check_after checks NODE.
promoted() {
  local round=$1 node=$2 port=$3 what=$4 t0=$SECONDS n
  wait_state 90 "$node" wait_primary primary || fail "$node was not promoted within 90 s"
  ok "the monitor promoted $node $((SECONDS - t0)) s after $what"
  n=$(acks "$round")
  poll --try 120 acked_at_least "$round" $((n + 10)) || fail "the clients did not go on after the failover"
  stop_load
  [[ ! -s $WORK/acked-errors ]] || fail "acknowledged clients saw: $(head -n 3 "$WORK/acked-errors")"
  check_after "$round" "$port"
}

# --- round 1: node1 stopped -m immediate (its keeper killed first, so it stays down) ---------
echo "--- round 1: load, then node1 is stopped -m immediate"
load_under_way 1
pids=$(autoctl_pids node1)
[[ -n $pids ]] || fail "no pg_autoctl process for node1"
# shellcheck disable=SC2086 # a list of pids
kill -9 $pids
as_pg "$PGBIN/pg_ctl" -D "$BASE/node1" -m immediate -w stop >/dev/null
promoted 1 node2 "$N2_PORT" "node1 went down"

echo "--- node1 rejoins as a standby"
# The server log (logging_collector); what the postmaster says before its logger starts goes
# to startup.log (pg_autoctl's pg_ctl -l, rewritten at each start).
node1_logs() { cat "$BASE"/node1/log/*.log 2>/dev/null; }
mark=$(node1_logs | wc -c)
start_keeper node1
wait_state 150 node1 secondary || fail "node1 did not rejoin as a secondary"
wait_state 60 node2 primary || fail "node2 is not primary with node1 back"
ok "node1 rejoined as a synchronous standby"
node1_new_logs() { node1_logs | tail -c +$((mark + 1)); cat "$BASE/node1/startup.log"; }
standby_said() { node1_new_logs | grep "idempotency: this server is a standby" >/dev/null; }
poll --try 60 standby_said || true
# Nothing more should happen on the standby, so nothing is waited for: a window as long as
# two of the worker's 2-second intervals, in which it would have complained.
sleep 4
logs=$(node1_new_logs)
if grep -E "(ERROR|WARNING|FATAL): +idempotency" <<<"$logs"; then
  fail "the extension complains on the standby"
fi
n=$(grep -c "idempotency: this server is a standby" <<<"$logs" || true)
((n >= 1)) || fail "no LOG from the extension on the standby"
ok "the worker on the standby is quiet: $n LOG line(s) per start, no error"

# --- round 2: node2's keeper and postmaster get SIGKILL; node1 is promoted -----------------
echo "--- round 2: load, then node2's keeper and postmaster get SIGKILL"
rm -f "$WORK/acked-errors"
load_under_way 2
pids="$(autoctl_pids node2) $(postmaster_pid node2)"
[[ -n ${pids// /} ]] || fail "no processes for node2"
# shellcheck disable=SC2086 # a list of pids
kill -9 $pids
promoted 2 node1 "$N1_PORT" "node2's postmaster was killed"
launcher_up() {
  [[ $(on "$N1_PORT" -c "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'idempotency launcher'") == 1 ]]
}
poll 60 "the maintenance launcher started on node1 at its promotion" launcher_up

echo "$CHECKS checks passed"
echo "PASS"
