# shellcheck shell=bash
# Shared by test/citus/*.sh: a coordinator and two workers (scripts/lib.sh), `public.orders`
# distributed by its text tenant column, idempotency.keys distributed with it.
# Source after setting CITUS_NAME and CITUS_PORT; it sources the prelude
# (test/scripted/lib/prelude.sh: fail, on_exit, WORK, the checks, poll; q is coord), and stops
# the three nodes at exit.
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
# shellcheck source=test/scripted/lib/prelude.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripted/lib/prelude.sh" none
citus_cluster_setup "test-cluster/$CITUS_NAME" "$CITUS_PORT"
stop_servers() { citus_cluster_stop; }
on_fail 'for d in "$COORD_DATA" "$W1_DATA" "$W2_DATA"; do
  echo "--- $(basename "$(dirname "$d")") log"
  tail -n 15 "$(dirname "$d")/server.log" 2>/dev/null || true
done'
coord() { citus_node coord -qAt "$@"; }
q() { coord "$@"; }
w1() { citus_node w1 -qAt "$@"; }
w2() { citus_node w2 -qAt "$@"; }
# node_of SCOPE: w1 or w2, the worker that holds the scope's shard of idempotency.keys
# (tenant-0 .. tenant-9 known after map_tenants).
declare -A NODE_OF=()
map_tenants() {
  local t port
  while IFS='|' read -r t port; do
    if [[ $port == "$W1_PORT" ]]; then NODE_OF[$t]=w1; else NODE_OF[$t]=w2; fi
  done < <(coord -c "SELECT s, n.nodeport FROM generate_series(0, 9) g,
    LATERAL (SELECT 'tenant-' || g AS s) x, pg_dist_placement p JOIN pg_dist_node n USING (groupid)
    WHERE p.shardid = get_shard_id_for_distribution_column('idempotency.keys', s)")
}
node_of() {
  local port
  if [[ -z ${NODE_OF[$1]:-} ]]; then
    port=$(coord -c "SELECT n.nodeport FROM pg_dist_placement p JOIN pg_dist_node n USING (groupid)
      WHERE p.shardid = get_shard_id_for_distribution_column('idempotency.keys', '$1')")
    if [[ $port == "$W1_PORT" ]]; then NODE_OF[$1]=w1; else NODE_OF[$1]=w2; fi
  fi
  echo "${NODE_OF[$1]}"
}
# shell_bytes NODE: bytes in the relations of idempotency.keys itself (the shell and its
# partitions' shells) on that node; Citus keeps rows in shards, so this must stay 0.
shell_bytes() {
  citus_node "$1" -qAt -c "SELECT coalesce(sum(pg_relation_size(relid)), 0)
    FROM pg_partition_tree('idempotency.keys')"
}
# prepared_xacts: orphaned prepared transactions on all three nodes.
prepared_xacts() {
  local n total=0 c
  for n in coord w1 w2; do
    c=$(citus_node "$n" -qAt -c "SELECT count(*) FROM pg_prepared_xacts")
    total=$((total + c))
  done
  echo "$total"
}
# check_books WHAT: every completed key has exactly one business row in orders (tenant, key),
# every row a completed key.
check_books() {
  local dup orphan missing
  read -r dup orphan missing <<<"$(coord -F ' ' -c "
    SELECT (SELECT count(*) FROM (SELECT tenant, key FROM orders GROUP BY 1, 2
                                  HAVING count(*) > 1) d),
           (SELECT count(*) FROM orders o LEFT JOIN idempotency.keys k
              ON k.scope = o.tenant AND k.key = o.key AND k.state = 'completed'
              WHERE k.key IS NULL),
           (SELECT count(*) FROM idempotency.keys k LEFT JOIN orders o
              ON o.tenant = k.scope AND o.key = k.key
              WHERE k.state = 'completed' AND o.key IS NULL)")"
  expect "$1: no key with two business rows" "$dup" "0"
  expect "$1: no business row without its completed key" "$orphan" "0"
  expect "$1: no completed key without its business row" "$missing" "0"
}
# citus_setup: the cluster, the business table, partitions, distribute().
citus_setup() {
  citus_cluster_start || fail "the Citus cluster did not start"
  coord >/dev/null <<'SQL' || fail "setup failed"
CREATE TABLE orders (tenant text NOT NULL, id bigserial, key text NOT NULL, amount int,
                     PRIMARY KEY (tenant, id));
SELECT create_distributed_table('orders', 'tenant');
SELECT * FROM idempotency.maintain();
SELECT idempotency.distribute(colocate_with => 'public.orders');
SQL
  map_tenants
}
