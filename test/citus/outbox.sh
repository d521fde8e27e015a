#!/usr/bin/env bash
# The outbox on Citus: a tenant's request (reserve, business insert, emit, complete) runs on
# the tenant's worker as one delegated function, so emit writes its logical message into that
# worker's WAL in the tenant's transaction. Each worker's slot (plugin idempotency) gives
# strictly increasing keys; across workers the keys are not ordered (two WALs). A consumer
# dedups with accept(consumer, partition => worker, key): a redelivered message is refused.
set -euo pipefail
CITUS_NAME=citus-outbox CITUS_PORT=54466
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
citus_setup
for n in w1 w2; do
  citus_node "$n" -qAt -c "SELECT 'slot' FROM pg_create_logical_replication_slot('outbox', 'idempotency')" \
    >/dev/null
done
coord >/dev/null <<'SQL'
CREATE FUNCTION place_order(tenant text, key text, amount int) RETURNS idempotency.outcome
LANGUAGE plpgsql AS $$
DECLARE r idempotency.reservation;
BEGIN
    r := idempotency.reserve(tenant, key);
    IF r.outcome = 'new' THEN
        INSERT INTO orders (tenant, key, amount) VALUES (tenant, key, amount);
        PERFORM idempotency.emit('orders', jsonb_build_object('tenant', tenant, 'key', key));
        PERFORM idempotency.complete(tenant, key, 201, jsonb_build_object('amount', amount));
    END IF;
    RETURN r.outcome;
END $$;
SELECT create_distributed_function('place_order(text, text, int)', '$1',
                                   colocate_with => 'orders', force_delegation => true);
SQL
# 40 requests over the 10 tenants, each once and then retried (the retry replays: no emit).
for i in $(seq 1 40); do
  t="tenant-$((i % 10))"
  o=$(coord -c "SELECT place_order('$t', 'o-$i', $i)")
  [[ $o == new ]] || fail "request $i: $o"
  o=$(coord -c "BEGIN" -c "SELECT place_order('$t', 'o-$i', $i)" -c "COMMIT" | head -n 1)
  [[ $o == replay ]] || fail "retry of request $i: $o"
done
expect "40 requests, 40 business rows" "$(coord -c "SELECT count(*) FROM orders")" "40"
for n in coord w1 w2; do expect "shell tables empty on $n" "$(shell_bytes "$n")" "0"; done

# Each worker's slot: one message per request of its tenants, keys strictly increasing.
total=0
for n in w1 w2; do
  citus_node "$n" -qAt -c "SELECT data::jsonb->>'key' FROM pg_logical_slot_peek_changes('outbox', NULL, NULL)
                           WHERE data::jsonb ? 'key'" >"/tmp/idem-citus-outbox-$n.$$"
  msgs=$(wc -l <"/tmp/idem-citus-outbox-$n.$$")
  mine=0 own=()
  for i in $(seq 1 40); do [[ $(node_of "tenant-$((i % 10))") == "$n" ]] && mine=$((mine + 1)); done
  for t in $(seq 0 9); do [[ $(node_of "tenant-$t") == "$n" ]] && own+=("'tenant-$t'"); done
  expect "$n: one message per request of its tenants" "$msgs" "$mine"
  expect "$n: keys strictly increasing" "$(citus_node "$n" -qAt -c "
    SELECT bool_and(k > prev) FROM (
      SELECT (data::jsonb->>'key')::uuid AS k,
             lag((data::jsonb->>'key')::uuid) OVER (ORDER BY ord) AS prev
      FROM pg_logical_slot_peek_changes('outbox', NULL, NULL) WITH ORDINALITY AS c(lsn, xid, data, ord)
      WHERE data::jsonb ? 'key') s WHERE prev IS NOT NULL")" "t"
  expect "$n: messages only of its own tenants" "$(citus_node "$n" -qAt -c "
    SELECT count(*) FROM pg_logical_slot_peek_changes('outbox', NULL, NULL)
    WHERE data::jsonb ? 'key'
      AND data::jsonb->'payload'->>'tenant' NOT IN ($(IFS=,; echo "${own[*]}"))")" "0"
  total=$((total + msgs))
done
expect "every request emitted once, on its tenant's worker" "$total" "40"

# The consumer: accept(consumer, partition => worker, key) on the coordinator; the whole feed
# delivered twice, only the first delivery is accepted.
accepted=0
for pass in 1 2; do
  for n in w1 w2; do
    while read -r key; do
      a=$(coord -c "SELECT idempotency.accept('orders-consumer', '$n', '$key'::uuid)")
      if [[ $pass == 1 ]]; then
        [[ $a == t ]] || fail "first delivery of $key from $n refused"
        accepted=$((accepted + 1))
      else
        [[ $a == f ]] || fail "redelivery of $key from $n accepted"
      fi
    done <"/tmp/idem-citus-outbox-$n.$$"
  done
done
rm -f /tmp/idem-citus-outbox-w1.$$ /tmp/idem-citus-outbox-w2.$$
expect "consumer accepted each message once, refused every redelivery" "$accepted" "40"
expect "one watermark per worker" \
  "$(coord -c "SELECT count(*) FROM idempotency.watermarks WHERE consumer = 'orders-consumer'")" "2"
echo "$CHECKS checks passed"
