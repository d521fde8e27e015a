#!/usr/bin/env bash
# Client overhead per request: the request helpers of the Python client
# (pg_idempotency.run_once) and of the Node client (runOnce of @idempotency/client) against
# the bare SQL calls they make (BEGIN; reserve; the business INSERT; complete; COMMIT) over
# the same connection, as a ratio within one run; and the share of a request spent computing
# the fingerprint client-side, for a 1 KB and a 100 KB JSON body (bench/clients/bodies.py);
# and the Python WSGI middleware claiming with reserve_begin against BEGIN + reserve; and the
# CPU per request (the process's and its backend's) of the Go client's RunOnce and the Java
# client's runOnce against the same statements sent by hand, in the same round trips (target:
# within 10%).
# Method: bench/clients/py_overhead.py, node_overhead.mjs, go_overhead/main.go and
# JavaOverhead.java, and bench/pages/client-overhead.md. Prints a table and writes
# bench/clients.md.
#
#   bash bench/clients.sh            full run (about 2 minutes on 2 cores)
#   bash bench/clients.sh --smoke    a few seconds; writes its report under bench/out/ only
#
# Knobs (environment):
#   BENCH_ROUNDS=5            rounds (a ratio or share is taken within a round)
#   BENCH_REQUESTS=2000       requests per variant and round with the 1 KB body (bare and
#                             helper take turns request by request)
#   BENCH_REQUESTS_100K=100   the same with the 100 KB body
#   BENCH_LANGS="python node go java"
#   BENCH_BLOCK=50            Go and Java: requests per block (bare and helper take turns
#                             block by block; CPU is read per block)
#   BENCH_SYNC=off            synchronous_commit of the cluster: off, so the commit's WAL flush
#                             (a disk wait the client does not change) does not hide the
#                             client's share; on to measure with it
#   BENCH_PORT                default 54455 + IDEM_PORT_OFFSET (free: the citus suites hold
#                             54460-54462, 54466-54471)
#   BENCH_BUILD=0             1: build and install the extension first (0: the installed one)
#   BENCH_OUT=bench/out/clients   working folder (bodies, raw results); emptied first
#   BENCH_REPORT_DIR=bench    where clients.md goes
#   BENCH_KEEP=0              1: leave the throwaway cluster running
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
BENCH=$IDEM_ROOT/bench

SMOKE=0
[[ ${1:-} == --smoke ]] && SMOKE=1
ROUNDS=${BENCH_ROUNDS:-5}
REQUESTS=${BENCH_REQUESTS:-2000}
REQUESTS_100K=${BENCH_REQUESTS_100K:-100}
if [[ $SMOKE == 1 ]]; then
  ROUNDS=1 REQUESTS=20 REQUESTS_100K=4 BLOCK=5
fi
LANGS=${BENCH_LANGS:-python node go java}
BLOCK=${BENCH_BLOCK:-50}
SYNC=${BENCH_SYNC:-off}
PORT=${BENCH_PORT:-$((54455 + ${IDEM_PORT_OFFSET:-0}))}
OUT=${BENCH_OUT:-$BENCH/out/$([[ $SMOKE == 1 ]] && echo clients-smoke || echo clients)}
REPORT_DIR=${BENCH_REPORT_DIR:-$BENCH}
[[ $SMOKE == 1 ]] && REPORT_DIR=$OUT
# Debian's python3, which has python3-psycopg (another python3 first on PATH may not).
PYTHON=${BENCH_PYTHON:-/usr/bin/python3}
NODE_CLIENT=${IDEM_NODE_CLIENT_DIR:-$IDEM_ROOT/clients/node}

# --- what the clients need ----------------------------------------------------------------
"$PYTHON" -c 'import psycopg' 2>/dev/null || die "$PYTHON cannot import psycopg (python3-psycopg)"
if [[ " $LANGS " == *" node "* ]]; then
  command -v node >/dev/null || die "node is not installed (BENCH_LANGS=python to skip Node)"
  [[ -f $NODE_CLIENT/package.json ]] ||
    die "no Node client in $NODE_CLIENT (BENCH_LANGS=python to skip Node)"
  # The package's devDependencies (pg) from its lock file, as the clients suite installs them.
  "$IDEM_ROOT/scripts/npm_ci.sh" "$NODE_CLIENT" >&2
fi
if [[ " $LANGS " == *" go "* ]]; then
  if ! command -v go >/dev/null || [[ ! -d /usr/share/gocode/src/github.com/jackc/pgx/v4 ]]; then
    die "go or pgx v4 is missing (apt-get install golang-go golang-github-jackc-pgx-v4-dev;" \
      "BENCH_LANGS without go to skip Go)"
  fi
fi
if [[ " $LANGS " == *" java "* ]]; then
  if ! command -v javac >/dev/null || [[ ! -f /usr/share/java/postgresql.jar ||
    ! -f /usr/share/java/tomcat10-servlet-api.jar ]]; then
    die "javac or pgjdbc is missing (apt-get install openjdk-17-jdk-headless" \
      "libpostgresql-jdbc-java libtomcat10-java; BENCH_LANGS without java to skip Java)"
  fi
fi

# --- cluster ----------------------------------------------------------------------------------
log "PostgreSQL $("$PG_CONFIG" --version | awk '{ print $2 }') ($PG_CONFIG)"
[[ ${BENCH_BUILD:-0} == 1 ]] && IDEM_WERROR=1 build_and_install >&2
DATA=/tmp/idempotency-bench-clients-$PORT/data
SOCK=/tmp/idempotency-$PORT
stop_cluster() { if [[ ${BENCH_KEEP:-0} != 1 ]]; then cluster_stop "$DATA" || true; fi; }
log "starting a throwaway cluster on port $PORT ($DATA), synchronous_commit = $SYNC"
cluster_init "$DATA" "$PORT" "$SOCK" "synchronous_commit = $SYNC"
trap stop_cluster EXIT
cluster_start "$DATA" "$PORT" "$SOCK"
export PGHOST=$SOCK PGPORT=$PORT PGUSER=postgres PGDATABASE=postgres
q() { "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 "$@"; }
# bench/setup.sql: bench.orders, the business table of W2 (and 1000 completed keys).
q -v w3keys=1000 -f "$BENCH/setup.sql"

rm -rf "$OUT"
mkdir -p "$OUT"
"$PYTHON" "$BENCH/clients/bodies.py" "$OUT"
counts=(--rounds "$ROUNDS" --requests "$REQUESTS" --requests-100k "$REQUESTS_100K")

# The Go and Java programs, built offline as the go and java suites build the clients: Go in
# module mode over a vendor folder of links to Debian's Go sources (scripts/go_vendor.py), Java
# with javac against /usr/share/java.
if [[ " $LANGS " == *" go "* ]]; then
  log "building bench/clients/go_overhead"
  "$PYTHON" "$IDEM_ROOT/scripts/go_vendor.py" "$BENCH/clients/go_overhead"
  (cd "$BENCH/clients/go_overhead" && GO111MODULE=on GOFLAGS=-mod=vendor GOPROXY=off \
    GOCACHE=$IDEM_ROOT/build/go-cache go build -o "$OUT/go_overhead" .)
fi
if [[ " $LANGS " == *" java "* ]]; then
  log "building the Java client"
  IDEM_JAVA_BUILD=$OUT/java bash "$IDEM_ROOT/clients/java/build.sh" >&2
fi

# --- runs -------------------------------------------------------------------------------------
load_start=$(cut -d' ' -f1 /proc/loadavg)
results=()
for lang in $LANGS; do
  case $lang in
    go | java) log "$lang: $ROUNDS rounds of $REQUESTS requests per variant, in blocks of $BLOCK" ;;
    *) log "$lang: $ROUNDS rounds of $REQUESTS + $REQUESTS_100K requests per variant" ;;
  esac
  case $lang in
    python) "$PYTHON" "$BENCH/clients/py_overhead.py" --bodies "$OUT" "${counts[@]}" \
      --out "$OUT/python.json" ;;
    node) IDEM_NODE_CLIENT_DIR=$NODE_CLIENT node "$BENCH/clients/node_overhead.mjs" \
      --bodies "$OUT" "${counts[@]}" --out "$OUT/node.json" ;;
    go) "$OUT/go_overhead" -bodies "$OUT" -rounds "$ROUNDS" -requests "$REQUESTS" \
      -block "$BLOCK" -out "$OUT/go.json" \
      -versions "pgx $(dpkg-query -W -f='${Version}' golang-github-jackc-pgx-v4-dev 2>/dev/null)" ;;
    java) java -cp "$OUT/java/classes:/usr/share/java/postgresql.jar" \
      "$BENCH/clients/JavaOverhead.java" --bodies "$OUT" --rounds "$ROUNDS" \
      --requests "$REQUESTS" --block "$BLOCK" --out "$OUT/java.json" ;;
    *) die "unknown client '$lang' in BENCH_LANGS (python, node, go, java)" ;;
  esac
  results+=("$OUT/$lang.json")
done
# The WSGI middleware: reserve_begin against BEGIN + reserve (bench/clients/py_middleware.py).
middleware=()
if [[ " $LANGS " == *" python "* ]]; then
  log "python middleware: $ROUNDS rounds of $REQUESTS new keys and replays per variant"
  "$PYTHON" "$BENCH/clients/py_middleware.py" --rounds "$ROUNDS" --requests "$REQUESTS" \
    --out "$OUT/middleware.json"
  middleware=(--middleware "$OUT/middleware.json")
fi

# --- report -----------------------------------------------------------------------------------
{
  echo "date	$(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "cpu	$(lscpu | sed -nE 's/^Model name: +//p' | head -1), $(nproc) cores"
  echo "os	$(. /etc/os-release && echo "$PRETTY_NAME"), kernel $(uname -r)"
  echo "load	1-minute load average $load_start at the start," \
    "$(cut -d' ' -f1 /proc/loadavg) at the end"
  echo "server	PostgreSQL $(q -c 'SHOW server_version'), unix socket," \
    "synchronous_commit = $SYNC, fsync = on"
  echo "run	bash bench/clients.sh$([[ $SMOKE == 1 ]] && echo ' --smoke'): $ROUNDS rounds;" \
    "per round and variant $REQUESTS requests with the 1 KB body," \
    "$REQUESTS_100K with the 100 KB body"
} >"$OUT/machine.tsv"
"$PYTHON" "$BENCH/clients/report.py" --machine "$OUT/machine.tsv" \
  --markdown "$REPORT_DIR/clients.md" "${middleware[@]}" \
  "${results[@]}"
