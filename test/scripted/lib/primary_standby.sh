# shellcheck shell=bash
# For a test on a primary and a streaming standby of it: cluster_setup NAME PORT (the
# primary; scripts/lib.sh), then source this. On top of prelude.sh's cluster kind (q, fail,
# on_exit, BG, the checks, poll) it gives
#   PRIMARY_{DATA,PORT,SOCK,LOG}, STANDBY_{DATA,PORT,SOCK,LOG}  (the standby's port: +1)
#   primary ARGS... / standby ARGS...   psql -qAt on database postgres of either (120 s at most)
#   primary_within SECONDS ARGS... / standby_within SECONDS ARGS...   the same, other bound
#   make_standby [SETTING...]           pg_basebackup -R -X stream of the primary, SETTINGs
#                                       appended to its postgresql.conf, started; with
#                                       STANDBY_SLOT set, through a physical slot of that name
#   synchronous SECONDS                 true once the standby streams as a sync standby
# At exit both servers are stopped with -m immediate; fail shows both logs.
source "$(dirname "${BASH_SOURCE[0]}")/prelude.sh" cluster
PRIMARY_DATA=$CLUSTER_DATA PRIMARY_PORT=$CLUSTER_PORT PRIMARY_SOCK=$CLUSTER_SOCK
PRIMARY_LOG=$CLUSTER_LOG
STANDBY_DATA=$(dirname "$PRIMARY_DATA")/standby/data STANDBY_PORT=$((PRIMARY_PORT + 1))
STANDBY_SOCK=/tmp/idempotency-$STANDBY_PORT
STANDBY_LOG=$(dirname "$STANDBY_DATA")/server.log
crash_if_running() { if [[ -d $1 ]] && cluster_running "$1"; then cluster_crash "$1"; fi; }
on_exit 'crash_if_running "$STANDBY_DATA" >/dev/null 2>&1; crash_if_running "$PRIMARY_DATA" >/dev/null 2>&1'
on_fail 'echo "--- standby log"; tail -n 30 "$STANDBY_LOG"'
# psql_within SECONDS SOCK PORT ARGS...: interrupted (SIGINT: the query is canceled) after
# SECONDS, with timeout's exit status 124; so that a commit stuck in a sync-rep wait fails.
psql_within() {
  local limit=$1 sock=$2 port=$3
  shift 3
  timeout -s INT "$limit" "$PGBIN/psql" -X -v ON_ERROR_STOP=1 -h "$sock" -p "$port" \
    -U postgres -d postgres -qAt "$@"
}
primary_within() { psql_within "$1" "$PRIMARY_SOCK" "$PRIMARY_PORT" "${@:2}"; }
standby_within() { psql_within "$1" "$STANDBY_SOCK" "$STANDBY_PORT" "${@:2}"; }
primary() { primary_within 120 "$@"; }
standby() { standby_within 120 "$@"; }
make_standby() {
  local setting
  cluster_stop "$STANDBY_DATA" >/dev/null 2>&1 || true
  rm -rf "$(dirname "$STANDBY_DATA")" "$STANDBY_SOCK"
  mkdir -m 0700 "$STANDBY_SOCK" "$(dirname "$STANDBY_DATA")"
  if is_root; then chown postgres: "$STANDBY_SOCK" "$(dirname "$STANDBY_DATA")"; fi
  as_pg "$PGBIN/pg_basebackup" -D "$STANDBY_DATA" -h "$PRIMARY_SOCK" -p "$PRIMARY_PORT" \
    -U postgres -R -X stream -c fast --no-sync ${STANDBY_SLOT:+-C -S "$STANDBY_SLOT"} ||
    fail "pg_basebackup failed"
  {
    echo "port = $STANDBY_PORT"
    echo "unix_socket_directories = '$STANDBY_SOCK'"
    for setting in "$@"; do echo "$setting"; done
  } | as_pg tee -a "$STANDBY_DATA/postgresql.conf" >/dev/null
  cluster_start "$STANDBY_DATA"
}
streams_synchronously() {
  [[ $(primary -c "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'") == 1 ]]
}
synchronous() { poll --try "$1" streams_synchronously; }
