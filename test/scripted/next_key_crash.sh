#!/usr/bin/env bash
# next_key after crashes: several clients record every value next_key returns to them, as
# they receive it (autocommit, one transaction left open, transactions that roll back); the
# server is then killed, once with `pg_ctl stop -m immediate` and once with SIGKILL to the
# postmaster. After each restart every new value must exceed every recorded one, and the
# recorded values must be unique and increasing per client.
# wal_writer_delay is at its maximum so that WAL nobody flushed stays in shared memory and
# dies with the server: a bound written but not flushed before its values were handed out
# would show up here as a repeated value.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
cluster_setup test-cluster/next-key-crash "${IDEM_NEXT_KEY_CRASH_PORT:-54419}"
source "$(dirname "${BASH_SOURCE[0]}")/lib/prelude.sh" cluster
WORK=$(mktemp -d /tmp/next-key-crash.XXXXXX)
NEXT="SELECT idempotency.next_key('crash');"

# client NAME PREFIX REPEATED: psql runs PREFIX, then REPEATED forever; its stdout is line
# buffered, so each value is in NAME's file as soon as psql has received it.
client() {
  local name=$1 prefix=$2 repeated=$3
  { printf '%s\n' "$prefix"; yes "$repeated"; } 2>/dev/null |
    stdbuf -oL "$PGBIN/psql" -X -qAt -v ON_ERROR_STOP=1 -h "$CLUSTER_SOCK" -p "$CLUSTER_PORT" \
      -U postgres -d postgres >>"$WORK/$name.values" 2>>"$WORK/clients.err" &
  BG+=($!)
}

start_clients() {
  BG=()
  client auto1 "" "$NEXT"
  client auto2 "" "$NEXT"
  client open_tx "BEGIN;" "$NEXT"
  client rollbacks "" "BEGIN; $NEXT $NEXT ROLLBACK;"
  client other_stream "" "SELECT idempotency.next_key('crash_other');"
}

every_client_has() { # every_client_has N: at least N values from every client
  local f
  for f in auto1 auto2 open_tx rollbacks; do
    [[ -f $WORK/$f.values && $(wc -l <"$WORK/$f.values") -ge $1 ]] || return 1
  done
}
wait_for_values() { poll --try 120 every_client_has "$1" || fail "clients did not get $1 values each"; }

gone() { ! kill -0 "$1" 2>/dev/null; }
wait_clients_gone() {
  local p
  for p in "${BG[@]}"; do
    poll --try 30 gone "$p" || kill "$p" 2>/dev/null || true
  done
  BG=()
}

# After a SIGKILLed postmaster, its children exit on their own; start once they have.
starts() { as_pg "$PGBIN/pg_ctl" -D "$CLUSTER_DATA" -w -l "$CLUSTER_LOG" start >/dev/null 2>&1; }
start_after_crash() { poll --try 120 starts || fail "server did not restart"; }

check() { # ROUND: recorded values are unique, increasing per client, below every new value
  local round=$1 f max count unique new
  for f in "$WORK"/*.values; do
    sort -n -c "$f" 2>/dev/null || fail "$round: $(basename "$f") values not increasing"
    [[ -z $(sort -n "$f" | uniq -d) ]] || fail "$round: $(basename "$f") got a value twice"
  done
  cat "$WORK"/{auto1,auto2,open_tx,rollbacks}.values >"$WORK/all"
  count=$(wc -l <"$WORK/all")
  unique=$(sort -n -u "$WORK/all" | wc -l)
  [[ $count == "$unique" ]] || fail "$round: $((count - unique)) values handed out twice"
  max=$(sort -n "$WORK/all" | tail -n1)
  new=$(q -c "SELECT min(idempotency.next_key('crash')) FROM generate_series(1, 5)")
  [[ $new -gt $max ]] || fail "$round: new value $new is not above recorded $max"
  local other_max other_new
  other_max=$(sort -n "$WORK/other_stream.values" | tail -n1)
  other_new=$(q -c "SELECT idempotency.next_key('crash_other')")
  [[ $other_new -gt $other_max ]] || fail "$round: crash_other $other_new <= $other_max"
  passed "$round: $count values recorded (max $max), next value after restart $new"
  # The values after the restart count as recorded for the next round.
  echo "$new" >>"$WORK/auto1.values"
}

cluster_init "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" \
  "restart_after_crash = off" "wal_writer_delay = 10s" "checkpoint_timeout = 1h"
cluster_start "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK"
q -c "CREATE EXTENSION idempotency" \
  -c "SELECT idempotency.create_stream('crash', 20)" \
  -c "SELECT idempotency.create_stream('crash_other', 7)"

# Round 1: immediate stop.
start_clients
wait_for_values 300
cluster_crash "$CLUSTER_DATA"
wait_clients_gone
start_after_crash
check "immediate stop"

# Round 2: SIGKILL to the postmaster.
start_clients
wait_for_values 600
pm=$(as_pg head -n1 "$CLUSTER_DATA/postmaster.pid")
kill -KILL "$pm"
wait_clients_gone
start_after_crash
check "SIGKILL to the postmaster"
echo "PASS"
