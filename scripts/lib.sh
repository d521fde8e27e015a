# shellcheck shell=bash
# Helpers shared by scripts/demo.sh, scripts/test.sh and test/scripted/*.sh.
# Source it from a script running under `set -euo pipefail`.
#
# Throwaway clusters:
#   cluster_setup NAME PORT      sets CLUSTER_DATA CLUSTER_PORT CLUSTER_SOCK CLUSTER_LOG
#   cluster_init  DATA PORT SOCK [setting=value ...]   (IDEM_INITDB_ARGS: more initdb options)
#   cluster_start DATA PORT SOCK
#   cluster_stop  DATA PORT SOCK          (fast; fine if already stopped)
#   cluster_crash DATA PORT SOCK          (immediate stop)
#   cluster_psql  DATA PORT SOCK [psql args ...]
# e.g.  cluster_setup test-cluster/crash 54331
#       cluster_init "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" "fsync=on"
# Clusters run as the `postgres` OS user when we are root, as the current user
# otherwise. The data dir is <repo>/.NAME/data and the server log
# <repo>/.NAME/server.log, or /tmp/idempotency-NAME-PORT/... when the postgres
# user cannot reach the checkout. The socket dir is /tmp/idempotency-PORT (0700).
# IDEM_PORT_OFFSET (default 0) is added to every port, so that two checkouts can run their
# tests side by side.

IDEM_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export IDEM_ROOT

# Debian packages the build, the demo and the test suites need. libkrb5-dev: Debian's
# libpq-be.h (server headers of 15) includes gssapi.h, and postgresql-server-dev-15 does not
# pull it in. flex: the managed suite builds pg_tle, whose GUC file parser is generated.
# locales: the managed suite's servers speak German and Japanese (ensure_locale).
IDEM_PACKAGES="postgresql-15 postgresql-server-dev-15 postgresql-15-pgtap pgtap
  postgresql-15-partman postgresql-15-wal2json postgresql-15-cron python3-yaml libssl-dev
  libgtest-dev cmake g++ make pkg-config clang libclang-rt-14-dev gnuplot-nox libipc-run-perl
  pgbouncer postgresql-15-auto-failover pg-auto-failover-cli python3-psycopg python3-pytest
  python3-setuptools python3-pip libkrb5-dev python3-venv python3-wheel curl
  python3-psycopg-pool python3-starlette python3-fastapi python3-httpx python3-flask
  python3-django python3-psycopg2 flex locales python3-prometheus-client
  python3-celery"

# Debian packages of the suites that install them when they run (scripts/test.sh's go, java
# and browser suites, test/packaging/run.sh); .ci/run installs them all at once beforehand.
# shellcheck disable=SC2034 # used by the scripts that source this file
GO_PACKAGES="golang-go golang-github-jackc-pgx-v4-dev golang-github-lib-pq-dev
  golang-github-gin-gonic-gin-dev golang-github-labstack-echo-dev golang-github-go-chi-chi-dev"
# shellcheck disable=SC2034
JAVA_PACKAGES="openjdk-17-jdk-headless libpostgresql-jdbc-java libtomcat10-java junit5
  maven libsurefire-java libmaven-compiler-plugin-java libmaven-jar-plugin-java
  libmaven-install-plugin-java libmaven-resources-plugin-java"
# shellcheck disable=SC2034
BROWSER_PACKAGES="chromium"
# The jobs suite's brokers and Celery's Redis result backend (ensure_jobs installs them).
# shellcheck disable=SC2034
JOBS_PACKAGES="python3-celery python3-redis redis-server nats-server"
# shellcheck disable=SC2034
PACKAGING_PACKAGES="postgresql-server-dev-all debhelper lintian pgxnclient python3-build
  python3-venv python3-setuptools python3-wheel unzip autopkgtest"

# shellcheck source=scripts/majors.sh
source "$IDEM_ROOT/scripts/majors.sh"
# IDEM_PG picks the PostgreSQL major: 15 (Debian 12's own, the default), 17 or 18 (built from
# Debian's source packages into $IDEM_CACHE by ensure_packages). PG_CONFIG, when set, wins.
check_pg_major || exit 1
if [[ -n ${PG_CONFIG:-} ]]; then
  PGBIN=$("$PG_CONFIG" --bindir 2>/dev/null || dirname "$PG_CONFIG")
elif [[ ${IDEM_PG:-15} == 15 ]]; then
  PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
  PGBIN=/usr/lib/postgresql/15/bin
else
  PGBIN=$(pg_major_prefix "$IDEM_PG")/bin
  PG_CONFIG=$PGBIN/pg_config
fi

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

is_root() { [[ $(id -u) -eq 0 ]]; }

# Run a command as root (directly, or through sudo).
as_root() { if is_root; then "$@"; else sudo "$@"; fi; }

# Run a command as the OS user that owns the clusters, from a directory it can read.
as_pg() {
  if is_root; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi
}

# Setup steps' times (apt installs, npm ci, builds of PostgreSQL, Citus and the extension):
# note_step NAME SECONDS appends "SECONDS<tab>NAME" to $IDEM_STEP_TIMES when it is set
# (scripts/test.sh sets it; its summary and .ci/run's time table list them).
note_step() {
  [[ -z ${IDEM_STEP_TIMES:-} ]] || printf '%s\t%s\n' "$2" "$1" >>"$IDEM_STEP_TIMES" || true
}
# timed_step NAME COMMAND...: runs COMMAND, notes its time, returns its status.
timed_step() {
  local name=$1 started=$SECONDS rc=0
  shift
  "$@" || rc=$?
  note_step "$name" $((SECONDS - started))
  return $rc
}

# Another apt or dpkg run holding the lock (a second test command, a build in the background)
# is waited for rather than failed on.
APT_LOCK_WAIT=(-o DPkg::Lock::Timeout=600)
apt_updated=0
# ensure_locale NAME...: each locale (de_DE.UTF-8) in the system's locale archive, compiled
# with localedef (Debian's locales package) as root when missing: a server's lc_messages can
# only name a locale the system has.
ensure_locale() {
  local name
  for name in "$@"; do
    locale -a 2>/dev/null | grep -qix "${name/UTF-8/utf8}" && continue
    is_root || { echo "the locale $name is missing, and only root can add it" >&2; return 1; }
    localedef -i "${name%%.*}" -f UTF-8 "$name" || return 1
  done
}

apt_install() {
  local what="apt-get install $*"
  [[ ${#what} -le 72 ]] || what="${what:0:69}..."
  [[ $apt_updated == 1 ]] || {
    timed_step "apt-get update" as_root apt-get "${APT_LOCK_WAIT[@]}" update
    apt_updated=1
  }
  timed_step "$what" as_root env DEBIAN_FRONTEND=noninteractive \
    apt-get "${APT_LOCK_WAIT[@]}" install -y --no-install-recommends "$@"
}

# The packages of the list that are not installed yet.
missing_packages() {
  local pkg
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || echo "$pkg"
  done
}

# Installs those of the packages that are missing (none installed already is upgraded).
install_missing() {
  local missing
  missing=$(missing_packages "$@")
  [[ -z $missing ]] && return 0
  log "installing" $missing
  # shellcheck disable=SC2086 # one package a word
  apt_install $missing
}

ensure_packages() {
  local missing=() server dev
  # shellcheck disable=SC2086 # word splitting of the list is intended
  mapfile -t missing < <(missing_packages $IDEM_PACKAGES)
  # Node.js for the HTTP example: any install will do (Debian's, or one the machine ships).
  command -v node >/dev/null || missing+=(nodejs)
  command -v npm >/dev/null || missing+=(npm)
  if [[ ${#missing[@]} -gt 0 ]]; then
    log "installing ${missing[*]}"
    apt_install "${missing[@]}"
  fi
  # The server must be the minor release of the headers we build with: a Debian 12 image may
  # carry an older postgresql-15 than the postgresql-server-dev-15 just installed, and
  # output_plugin_libraries only exists from 15.19 on.
  server=$(dpkg-query -W -f='${Version}' postgresql-15)
  dev=$(dpkg-query -W -f='${Version}' postgresql-server-dev-15)
  if [[ $server != "$dev" ]]; then
    log "postgresql-15 is $server, its headers $dev: upgrading both to the current release"
    apt_install postgresql-15 postgresql-client-15 postgresql-server-dev-15
  fi
  if [[ ${IDEM_PG:-15} != 15 ]]; then build_pg_major "$IDEM_PG"; fi
}

# (Each step is chained: callers may run these functions where set -e is off.)
build_and_install() {
  log "building the extension"
  timed_step "the extension's build" make -C "$IDEM_ROOT" -j2 PG_CONFIG="$PG_CONFIG" || return
  log "installing the extension"
  as_root make -C "$IDEM_ROOT" install PG_CONFIG="$PG_CONFIG"
}

# install_extension_with PG_CONFIG [MAKE-VARIABLE=VALUE ...]: builds and installs the extension
# for another server (say the other side of a pg_upgrade), or another build of it (the faults
# suite's IDEM_FAULT_POINTS=1, the sanitizers suite's IDEM_SANITIZE=undefined), in a copy of the
# tree under build/, so the checkout's own objects stay those of $PG_CONFIG; for $PG_CONFIG
# itself with no variable, the checkout's own build.
install_extension_with() {
  local config=$1 dir
  shift
  # The checkout's own build when that is the one asked for (built already, as a rule).
  if [[ $# -eq 0 && $config == "$PG_CONFIG" ]]; then
    IDEM_WERROR=1 build_and_install >/dev/null
    return
  fi
  dir=$IDEM_ROOT/build/ext-$("$config" --version | awk '{print $2}')${1:+-${1//[^A-Za-z0-9]/}} ||
    return
  # Sources only (mtimes kept, so an unchanged file is not rebuilt): never the checkout's objects.
  mkdir -p "$dir" &&
    tar -C "$IDEM_ROOT" --exclude='*.o' --exclude='*.so' -cf - Makefile idempotency.control src \
      extension | tar -C "$dir" -xpf - &&
    timed_step "the extension's build${1:+ with $1}" \
      make -s -C "$dir" -j2 PG_CONFIG="$config" IDEM_WERROR=1 "$@" >"$dir/build.log" 2>&1 &&
    as_root make -s -C "$dir" install PG_CONFIG="$config" "$@" >>"$dir/build.log" 2>&1 ||
    { tail -n 30 "$dir/build.log" >&2; return 1; }
}

# Can the cluster user reach (search) the checkout?
checkout_reachable() { as_pg test -x "$IDEM_ROOT" 2>/dev/null; }

# shellcheck disable=SC2034 # the CLUSTER_* variables are for the caller
cluster_setup() {
  local name=$1 port=$(($2 + ${IDEM_PORT_OFFSET:-0})) base
  if checkout_reachable; then
    base=$IDEM_ROOT/.$name
  else
    base=/tmp/idempotency-${name//\//-}-$port
    log "the postgres user cannot reach $IDEM_ROOT: cluster '$name' lives in $base"
  fi
  CLUSTER_DATA=$base/data
  CLUSTER_LOG=$base/server.log
  CLUSTER_PORT=$port
  CLUSTER_SOCK=/tmp/idempotency-$port
}

cluster_running() { as_pg "$PGBIN/pg_ctl" -D "$1" status >/dev/null 2>&1; }

cluster_stop() {
  local data=$1
  if [[ -d $data ]] && cluster_running "$data"; then
    as_pg "$PGBIN/pg_ctl" -D "$data" -m fast -w stop >/dev/null
  fi
}

cluster_crash() { as_pg "$PGBIN/pg_ctl" -D "$1" -m immediate -w stop >/dev/null; }

# log_shows_within SECONDS LOG OFFSET PATTERN: true once LOG, from byte OFFSET on, has a line
# matching PATTERN (grep), checked every 0.2 s for at most SECONDS. (grep reads it all: -q
# would stop early, and pipefail would see tail's SIGPIPE.)
log_shows_within() {
  local tries=$(($1 * 5))
  while ! tail -c +"$3" "$2" | grep -- "$4" >/dev/null; do
    ((--tries > 0)) || return 1
    sleep 0.2
  done
}

cluster_init() {
  local data=$1 port=$2 sock=$3 base setting lock other
  shift 3
  base=$(dirname "$data")
  cluster_stop "$data" || return
  # A leftover server from elsewhere on our socket? Stop it through its data dir.
  lock=$sock/.s.PGSQL.$port.lock
  if [[ -f $lock ]]; then
    other=$(sed -n 2p "$lock")
    if [[ -n $other && -d $other ]]; then cluster_stop "$other" || return; fi
  fi
  rm -rf "$data" "$sock" && mkdir -p "$base" && mkdir -m 0700 "$sock" || return
  if is_root; then chown postgres: "$base" "$sock" || return; fi
  # shellcheck disable=SC2086 # IDEM_INITDB_ARGS: extra initdb options, one a word
  as_pg "$PGBIN/initdb" -D "$data" -A trust -U postgres -E UTF8 --no-locale \
    --no-sync ${IDEM_INITDB_ARGS:-} >"$base/initdb.log" || { cat "$base/initdb.log" >&2; return 1; }
  {
    echo "# added by scripts/lib.sh"
    echo "listen_addresses = ''"
    echo "port = $port"
    echo "unix_socket_directories = '$sock'"
    echo "shared_preload_libraries = 'idempotency'"
    echo "wal_level = logical"
    echo "max_replication_slots = 10"
    echo "max_wal_senders = 10"
    # Only servers from 15.19 on know it (and restrict decoding to the plugins it lists).
    # (grep reads it all: -q would stop early, and pipefail would see postgres's SIGPIPE.)
    if "$PGBIN/postgres" --describe-config 2>/dev/null | grep '^output_plugin_libraries' >/dev/null; then
      echo "output_plugin_libraries = 'pgoutput, test_decoding, idempotency, wal2json'"
    fi
    echo "logging_collector = off"
    echo "fsync = on"
    echo "max_connections = 100"
    for setting in "$@"; do echo "$setting"; done
  } >>"$data/postgresql.conf"
}

cluster_start() {
  local data=$1
  as_pg "$PGBIN/pg_ctl" -D "$data" -w -l "$(dirname "$data")/server.log" start >/dev/null || {
    tail -n 30 "$(dirname "$data")/server.log" >&2
    return 1
  }
}

cluster_psql() {
  local port=$2 sock=$3
  shift 3
  "$PGBIN/psql" -X -v ON_ERROR_STOP=1 -h "$sock" -p "$port" -U postgres "$@"
}

# --- Citus (the `citus` suite) -----------------------------------------------------------------
# Citus is not in Debian: it is built from ../shared/vendor/citus-<version>.tar.gz (next to
# the clone) into the PostgreSQL of $PG_CONFIG when citus.so is not installed there, in a
# build directory kept under $IDEM_CACHE (scripts/majors.sh), so a second run
# only re-installs. Citus 12.1 supports PostgreSQL 14 to 16.
CITUS_VERSION=12.1.12
CITUS_ARCHIVE=${IDEM_CITUS_ARCHIVE:-$IDEM_ROOT/../shared/vendor/citus-$CITUS_VERSION.tar.gz}
CITUS_BUILD_DEPS="libcurl4-openssl-dev liblz4-dev libzstd-dev libkrb5-dev libselinux1-dev
  libxslt1-dev libpam0g-dev libreadline-dev"

# build_citus: Citus built (not installed) for the major of $PG_CONFIG in a folder under
# $IDEM_CACHE, once; 0 when it is (or now is), otherwise prints why not on stdout and returns
# 1. Under a lock on that folder: a build that .ci/run started in the background and the citus
# suite's never run into each other (the second waits, then finds the first one's build).
build_citus() {
  local major cache
  major=$("$PG_CONFIG" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
  cache=$IDEM_CACHE/citus-$CITUS_VERSION-pg$major
  mkdir -p "$IDEM_CACHE" || { echo "cannot create $IDEM_CACHE"; return 1; }
  (
    flock 8 || { echo "cannot lock $cache.lock"; exit 1; }
    [[ -f $cache/.built ]] && exit 0
    if [[ ! -f $CITUS_ARCHIVE ]]; then
      echo "citus.so is not installed in $("$PG_CONFIG" --pkglibdir) and $CITUS_ARCHIVE does not exist"
      exit 1
    fi
    local dep missing=()
    # shellcheck disable=SC2086 # word splitting of the list is intended
    for dep in $CITUS_BUILD_DEPS; do
      dpkg-query -W -f='${Status}' "$dep" 2>/dev/null | grep -q 'install ok installed' ||
        missing+=("$dep")
    done
    if [[ ${#missing[@]} -gt 0 ]]; then
      log "installing Citus build dependencies: ${missing[*]}"
      apt_install "${missing[@]}" >&2 || { echo "could not install ${missing[*]}"; exit 1; }
    fi
    log "building Citus $CITUS_VERSION in $cache (a few minutes)"
    local started=$SECONDS
    rm -rf "$cache" && mkdir -p "$cache" || { echo "cannot create $cache"; exit 1; }
    if ! { tar -xzf "$CITUS_ARCHIVE" -C "$cache" --strip-components=1 &&
      (cd "$cache" && ./configure --without-libcurl PG_CONFIG="$PG_CONFIG" &&
        make -j2 with_llvm=no); } >"$cache/build.log" 2>&1; then
      tail -n 20 "$cache/build.log" >&2
      echo "building Citus failed (log: $cache/build.log)"
      exit 1
    fi
    note_step "Citus $CITUS_VERSION build (PostgreSQL $major)" $((SECONDS - started))
    touch "$cache/.built"
  ) 8>"$cache.lock"
}

# ensure_citus: 0 when citus.so is (or now is) installed; otherwise prints why not on stdout
# and returns 2 when this PostgreSQL major is not one Citus supports, 1 when the build or
# install failed.
ensure_citus() {
  local major libdir cache
  major=$("$PG_CONFIG" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
  if [[ $major -lt 14 || $major -gt 16 ]]; then
    echo "Citus $CITUS_VERSION supports PostgreSQL 14 to 16, this is PostgreSQL $major"
    return 2
  fi
  libdir=$("$PG_CONFIG" --pkglibdir)
  [[ -f $libdir/citus.so ]] && return 0
  build_citus || return 1
  cache=$IDEM_CACHE/citus-$CITUS_VERSION-pg$major
  log "installing Citus $CITUS_VERSION into $libdir"
  as_root make -C "$cache" install with_llvm=no >"$cache/install.log" 2>&1 || {
    echo "installing Citus failed (log: $cache/install.log)"
    return 1
  }
}

# citus_cluster_setup NAME PORT: a coordinator on PORT (plus IDEM_PORT_OFFSET) and workers on
# the next two ports; sets COORD_{DATA,PORT,SOCK} W1_... W2_... and NODE_NAMES=(coord w1 w2).
# shellcheck disable=SC2034 # the variables are for the caller
citus_cluster_setup() {
  cluster_setup "$1/coordinator" "$2"
  COORD_DATA=$CLUSTER_DATA COORD_PORT=$CLUSTER_PORT COORD_SOCK=$CLUSTER_SOCK
  local base
  base=$(dirname "$(dirname "$COORD_DATA")")
  W1_DATA=$base/worker1/data W1_PORT=$((COORD_PORT + 1)) W1_SOCK=/tmp/idempotency-$((COORD_PORT + 1))
  W2_DATA=$base/worker2/data W2_PORT=$((COORD_PORT + 2)) W2_SOCK=/tmp/idempotency-$((COORD_PORT + 2))
}

# citus_node coord|w1|w2 [psql args]: psql on one node of the cluster, database postgres.
citus_node() {
  local which=$1
  shift
  case $which in
    coord) cluster_psql "$COORD_DATA" "$COORD_PORT" "$COORD_SOCK" -d postgres "$@" ;;
    w1) cluster_psql "$W1_DATA" "$W1_PORT" "$W1_SOCK" -d postgres "$@" ;;
    w2) cluster_psql "$W2_DATA" "$W2_PORT" "$W2_SOCK" -d postgres "$@" ;;
  esac
}

# Fast stops; a node that does not stop within pg_ctl's wait is stopped immediately.
citus_cluster_stop() {
  local data
  for data in "$COORD_DATA" "$W1_DATA" "$W2_DATA"; do
    cluster_stop "$data" >/dev/null 2>&1 || cluster_crash "$data" >/dev/null 2>&1 || true
  done
}

# citus_cluster_start [setting=value ...]: three fresh servers (Citus first in
# shared_preload_libraries, listening on 127.0.0.1 too, as Citus nodes reach each other over
# TCP), citus and idempotency created on each, the workers added to the coordinator.
citus_cluster_start() {
  local node data port sock
  for node in "$COORD_DATA $COORD_PORT $COORD_SOCK" "$W1_DATA $W1_PORT $W1_SOCK" \
    "$W2_DATA $W2_PORT $W2_SOCK"; do
    read -r data port sock <<<"$node"
    cluster_init "$data" "$port" "$sock" "shared_preload_libraries = 'citus, idempotency'" \
      "listen_addresses = '127.0.0.1'" "max_prepared_transactions = 100" \
      "citus.node_conninfo = 'sslmode=disable'" "max_connections = 200" \
      "$@" || return
    cluster_start "$data" || return
  done
  for node in coord w1 w2; do
    citus_node "$node" -qAt -c "CREATE EXTENSION citus" -c "CREATE EXTENSION idempotency" \
      >/dev/null || return
  done
  citus_node coord -qAt -c "SELECT citus_set_coordinator_host('127.0.0.1', $COORD_PORT)" \
    -c "SELECT citus_add_node('127.0.0.1', $W1_PORT)" \
    -c "SELECT citus_add_node('127.0.0.1', $W2_PORT)" >/dev/null
}

# ---- RabbitMQ, Redis, NATS, Prometheus (the brokers, jobs and monitoring suites) ----
# apt_install_quiet_services PKG...: installs the missing ones among PKG without starting a
# system service: the tests run servers of their own on their own ports. While the packages
# install, a policy-rc.d that refuses every start is in place unless the machine has one
# already (a container's); a service installed here is disabled again, and a machine that
# already had the package keeps its service as it was.
apt_install_quiet_services() {
  local missing policy=/usr/sbin/policy-rc.d ours=0 rc=0 pkg
  missing=$(missing_packages "$@")
  [[ -z $missing ]] && return 0
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\n# idempotency tests: no service starts while packages install\nexit 101\n' |
      as_root tee "$policy" >/dev/null && as_root chmod 755 "$policy" && ours=1
  fi
  log "installing $missing"
  # shellcheck disable=SC2086 # one package a word
  apt_install $missing || rc=$?
  [[ $ours == 1 ]] && as_root rm -f "$policy"
  # (systemctl disable also works where systemd is not running, on the unit files.)
  if command -v systemctl >/dev/null; then
    for pkg in $missing; do
      if [[ -e /lib/systemd/system/$pkg.service ]]; then
        as_root systemctl disable --quiet "$pkg.service" >/dev/null 2>&1 || true
      fi
    done
  fi
  return $rc
}

# ensure_rabbitmq: Debian's rabbitmq-server and python3-pika (test/brokers/rabbitmq.sh runs
# the broker).
ensure_rabbitmq() { apt_install_quiet_services rabbitmq-server python3-pika; }

# The monitoring suite's Prometheus, promtool and postgres_exporter (test/monitoring).
# shellcheck disable=SC2034
MONITORING_PACKAGES="prometheus prometheus-postgres-exporter"
ensure_monitoring() {
  # shellcheck disable=SC2086 # one package a word
  apt_install_quiet_services $MONITORING_PACKAGES
}

# ensure_jobs: RabbitMQ, Redis, NATS and Celery (the jobs suite).
ensure_jobs() {
  # shellcheck disable=SC2086 # one package a word
  apt_install_quiet_services rabbitmq-server python3-pika $JOBS_PACKAGES
}
