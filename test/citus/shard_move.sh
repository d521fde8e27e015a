#!/usr/bin/env bash
# A shard move under load, with Citus's default transfer mode. The key calls write the local
# shard directly, outside Citus's executor; at the commit they take Citus's lock on the
# shard's placement metadata, as its executor holds it for a write, and fail (40001) when the
# placement moved meanwhile (src/pg/citus/citus.cpp, UsedShards): a commit either precedes
# the move's last catch-up or is refused. Load through the coordinator
# (test/citus/lib/move_load.py: reserve + business INSERT + complete, and claim_once + INSERT,
# fresh and hot keys) over the moved tenant and one tenant of each worker, while the tenant's
# shard moves away and back. Pass: both moves succeed (no deadlock makes Citus cancel them);
# every call either succeeds or is refused with a clear error (the list below: 40001, the shard
# moved during the transaction, which Citus reports as XX000 "could not commit transaction for
# shard" when the transaction also wrote the new node; 55000, a complete that reached the new
# node after its reserve on the old one); no acknowledged key lost or claimed twice; exactly one
# business row per completed key and none without one; no prepared transaction left; the
# load ran on the new placement between the moves.
set -euo pipefail
CITUS_NAME=citus-move CITUS_PORT=54520
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
WORK=$(mktemp -d /tmp/idem-citus-move.XXXXXX)
load=
stop_load() {
  touch "$WORK/stop"
  if [[ -n $load ]]; then wait "$load" || fail "the load driver failed ($(tail -n 5 "$WORK/load.err"))"; fi
  load=
}
on_exit stop_load
citus_setup

moved=tenant-6
shard=$(coord -c "SELECT get_shard_id_for_distribution_column('idempotency.keys', '$moved')")
if [[ $(node_of $moved) == w1 ]]; then
  home_port=$W1_PORT away_port=$W2_PORT
else
  home_port=$W2_PORT away_port=$W1_PORT
fi
# One tenant on each worker besides the moved one (on another shard), as a control.
shard_of() { coord -c "SELECT get_shard_id_for_distribution_column('idempotency.keys', '$1')"; }
scopes=("$moved" "$moved" "$moved")
for w in w1 w2; do
  for t in $(seq 0 9); do
    s=tenant-$t
    [[ $s != "$moved" && $(node_of "$s") == "$w" && $(shard_of "$s") != "$shard" ]] || continue
    scopes+=("$s")
    break
  done
done
echo "moving shard $shard ($moved) from port $home_port to $away_port and back; load over ${scopes[*]}"

conninfo="host=$COORD_SOCK port=$COORD_PORT user=postgres dbname=postgres"
/usr/bin/python3 "$IDEM_ROOT/test/citus/lib/move_load.py" "$conninfo" "$WORK/stop" \
  "$WORK/load.json" "${scopes[@]}" --clients 6 2>"$WORK/load.err" &
load=$!
orders_at_least() { [[ $(coord -c "SELECT count(*) FROM orders WHERE tenant = '$moved'") -ge $1 ]]; }
poll 120 "the load is under way on $moved" orders_at_least 30

move() { # move FROM TO: citus_move_shard_placement with Citus's default transfer mode
  coord -c "SELECT citus_move_shard_placement($shard, '127.0.0.1', $1, '127.0.0.1', $2)" \
    >/dev/null 2>"$WORK/move.err" || fail "the move from $1 to $2 failed: $(cat "$WORK/move.err")"
}
placed_on() {
  coord -c "SELECT n.nodeport FROM pg_dist_placement p JOIN pg_dist_node n USING (groupid)
    WHERE p.shardid = $shard"
}
move "$home_port" "$away_port"
expect "moved away under load (default transfer mode)" "$(placed_on)" "$away_port"
n=$(coord -c "SELECT count(*) FROM orders WHERE tenant = '$moved'")
poll 120 "the load goes on with the shard on its new node" orders_at_least $((n + 30))
move "$away_port" "$home_port"
expect "moved back under load" "$(placed_on)" "$home_port"
n=$(coord -c "SELECT count(*) FROM orders WHERE tenant = '$moved'")
poll 120 "the load goes on with the shard back home" orders_at_least $((n + 30))
stop_load

/usr/bin/python3 "$IDEM_ROOT/test/citus/lib/move_load.py" --check "$conninfo" "$WORK/load.json" \
  >"$WORK/check"
read -r _ requests _ acknowledged _ doubled _ lost <"$WORK/check"
echo "$requests requests committed, $acknowledged keys claimed"
grep '^  error ' "$WORK/check" | tee "$WORK/errors" || true
# Each SQLSTATE allowed with the one message that says why (the first message of each is kept).
allowed=(
  "0A000: must run on the node that holds the scope's shard"     # the call reached a node without it
  "40001: moved to another node while this transaction used it"  # the shard moved before the commit
  "40P01: involved in a distributed deadlock"                    # Citus's deadlock detection
  "55000: complete requires a live claim on the key"             # reserve before the move, complete after
  "IK003: idempotency key is in progress"                        # a hot key claimed elsewhere
  "XX000: could not commit transaction for shard"                # Citus's report of a PREPARE refused (40001)
)
while read -r _ state _ message; do
  state=${state%:}
  ok=0
  for a in "${allowed[@]}"; do
    [[ $state == "${a%%:*}" && $message == *"${a#*: }"* ]] && ok=1
  done
  [[ $ok == 1 ]] || fail "a call failed with an error that is not a clear refusal: $state $message"
done <"$WORK/errors"
expect "every call succeeded or was refused with a clear error" ok ok
expect "no acknowledged key claimed twice" "$doubled" 0
expect "no acknowledged key lost" "$lost" 0
[[ $acknowledged -gt 100 ]] || fail "only $acknowledged keys were claimed"
check_books "after the moves"
expect "no claim left processing" \
  "$(coord -c "SELECT count(*) FROM idempotency.keys WHERE state = 'processing'")" 0
expect "no prepared transaction on any node" "$(prepared_xacts)" 0
for n in coord w1 w2; do expect "shell tables empty on $n" "$(shell_bytes "$n")" 0; done
echo "$CHECKS checks passed"
