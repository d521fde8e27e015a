# shellcheck shell=bash
# Helpers shared by scripts/demo.sh, scripts/test.sh and test/scripted/*.sh.
# Source it from a script running under `set -euo pipefail`.
#
# Throwaway clusters:
#   cluster_setup NAME PORT      sets CLUSTER_DATA CLUSTER_PORT CLUSTER_SOCK CLUSTER_LOG
#   cluster_init  DATA PORT SOCK [setting=value ...]
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

# Debian packages the build, the demo and the test suites need.
IDEM_PACKAGES="postgresql-15 postgresql-server-dev-15 postgresql-15-pgtap pgtap
  python3-psycopg python3-pytest python3-setuptools python3-pip
  postgresql-15-partman postgresql-15-wal2json libssl-dev libgtest-dev cmake g++
  make pkg-config clang libclang-rt-14-dev gnuplot-nox libipc-run-perl"

PG_CONFIG=${PG_CONFIG:-/usr/bin/pg_config}
PGBIN=$("$PG_CONFIG" --bindir 2>/dev/null || echo /usr/lib/postgresql/15/bin)

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

is_root() { [[ $(id -u) -eq 0 ]]; }

# Run a command as root (directly, or through sudo).
as_root() { if is_root; then "$@"; else sudo "$@"; fi; }

# Run a command as the OS user that owns the clusters, from a directory it can read.
as_pg() {
  if is_root; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi
}

apt_updated=0
apt_install() {
  [[ $apt_updated == 1 ]] || { as_root apt-get update; apt_updated=1; }
  as_root env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "$@"
}

ensure_packages() {
  local pkg missing=() server dev
  # shellcheck disable=SC2086 # word splitting of the list is intended
  for pkg in $IDEM_PACKAGES; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' ||
      missing+=("$pkg")
  done
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
}

# (Each step is chained: callers may run these functions where set -e is off.)
build_and_install() {
  log "building the extension"
  make -C "$IDEM_ROOT" -j2 PG_CONFIG="$PG_CONFIG" || return
  log "installing the extension"
  as_root make -C "$IDEM_ROOT" install PG_CONFIG="$PG_CONFIG"
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
  as_pg "$PGBIN/initdb" -D "$data" -A trust -U postgres -E UTF8 --no-locale \
    --no-sync >"$base/initdb.log" || { cat "$base/initdb.log" >&2; return 1; }
  {
    echo "# added by scripts/lib.sh"
    echo "listen_addresses = ''"
    echo "port = $port"
    echo "unix_socket_directories = '$sock'"
    echo "shared_preload_libraries = 'idempotency'"
    echo "wal_level = logical"
    echo "max_replication_slots = 10"
    echo "max_wal_senders = 10"
    echo "output_plugin_libraries = 'pgoutput, test_decoding, idempotency, wal2json'"
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
