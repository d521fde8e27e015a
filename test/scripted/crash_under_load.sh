#!/usr/bin/env bash
# Crash under load. pgbench (8 clients) and RECORDERS honest clients run
#   BEGIN; reserve; if new: INSERT a business row + complete; COMMIT
# over a key space with many duplicates (hot keys repeat, new keys keep coming). The server is killed with `pg_ctl stop -m immediate` mid-run,
# restarted, and the load runs again for a while. The honest clients are bash loops of one psql
# per request that write the key to a local file only after psql reported the COMMIT (exit 0),
# so the file lists exactly the acknowledged completions. The checker then proves:
#   - every acknowledged key is `completed` with its response (status 201, {"order": n});
#   - exactly one business row per completed key (the business table has no unique index);
#   - no business row without its completed key; no claim left `processing` or `failed`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
cluster_setup test-cluster/crash-under-load 54442
NKEYS=${NKEYS:-100000}  # pgbench: exponential over 1..NKEYS (hot keys repeat, the tail is new)
HOT=${HOT:-20000}       # recorders: uniform over 1..HOT
RECORDERS=${RECORDERS:-4}
BEFORE_CRASH=${BEFORE_CRASH:-200} # acknowledged requests of the honest clients before the crash
AFTER_CRASH=${AFTER_CRASH:-4}      # seconds of load after the restart
source "$(dirname "${BASH_SOURCE[0]}")/lib/prelude.sh" cluster
WORK=$(mktemp -d /tmp/idem-crash-load.XXXXXX)
chmod 755 "$WORK"
on_exit 'touch "$WORK/stop"'

cluster_init "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" "max_connections = 60"
cluster_start "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK"
q -q -c "CREATE EXTENSION idempotency" \
  -c "CREATE TABLE orders (key text NOT NULL, amount int NOT NULL) /* no unique index on purpose */"

# One request, for pgbench (:k from \set) and for psql (-v k=...).
request_sql="BEGIN;
SELECT outcome, (outcome = 'new')::int AS is_new
  FROM idempotency.reserve('load', 'k' || :k, wait => '50 milliseconds') \\gset
\\if :is_new
INSERT INTO orders VALUES ('k' || :k, :k);
SELECT idempotency.complete('load', 'k' || :k, 201, jsonb_build_object('order', :k));
\\endif
COMMIT;"
printf '\\set k random_exponential(1, %d, 5)\n%s\n' "$NKEYS" "$request_sql" >"$WORK/load.pgbench"
printf '%s\n\\echo ACK :outcome\n' "$request_sql" >"$WORK/request.sql"

# An honest client: records "k<n> <outcome>" only once psql exited 0 after its COMMIT.
recorder() {
  local i=$1 k out
  while [[ ! -e $WORK/stop ]]; do
    k=$((RANDOM % HOT + 1))
    if out=$(cluster_psql "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" -d postgres -At -q \
      -v k="$k" -f "$WORK/request.sql" 2>/dev/null); then
      case $out in
        *"ACK new"* | *"ACK replay"*) echo "$k ${out##*ACK }" >>"$WORK/acked.$i" ;;
      esac
    else
      sleep 0.05 # server down: retry later
    fi
  done
}

run_pgbench() { # SECONDS LOG
  "$PGBIN/pgbench" -n -h "$CLUSTER_SOCK" -p "$CLUSTER_PORT" -U postgres -c 8 -j 2 -T "$1" \
    -f "$WORK/load.pgbench" postgres >"$2" 2>&1
}

for i in $(seq "$RECORDERS"); do
  recorder "$i" &
  BG+=($!)
done
run_pgbench 900 "$WORK/pgbench-1.log" & # until the crash
bench=$!
BG+=("$bench")
acks() { cat "$WORK"/acked.* 2>/dev/null | wc -l; }
load_running() {
  [[ $(acks) -ge $BEFORE_CRASH ]] &&
    [[ $(q -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgbench'") == 8 ]]
}
poll --try 300 load_running || fail "the load did not get going ($(acks) acks)"
acked_before=$(acks)
inflight=$(q -c "SELECT count(*) FROM pg_stat_activity WHERE state LIKE '%transaction%' OR query LIKE '%reserve%'" || echo "?")
echo "crashing the server (pg_ctl stop -m immediate) with $inflight sessions busy, $acked_before acks recorded"
cluster_crash "$CLUSTER_DATA"
rc=0
wait "$bench" || rc=$?
[[ $rc -ne 0 ]] || fail "pgbench finished normally: the crash did not interrupt it"
tx_before=$(sed -nE 's/^number of transactions actually processed: ([0-9]+).*/\1/p' "$WORK/pgbench-1.log")
grep -q "aborted" "$WORK/pgbench-1.log" || fail "pgbench clients were not cut off: $(tail -n 5 "$WORK/pgbench-1.log")"

cluster_start "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK"
grep -q "database system was interrupted" "$CLUSTER_LOG" || fail "no crash recovery in the log"
if ! run_pgbench "$AFTER_CRASH" "$WORK/pgbench-2.log"; then
  cat "$WORK/pgbench-2.log"
  fail "pgbench after the restart failed"
fi
tx_after=$(sed -nE 's/^number of transactions actually processed: ([0-9]+).*/\1/p' "$WORK/pgbench-2.log")
touch "$WORK/stop"
for p in "${BG[@]}"; do wait "$p" || true; done
BG=()

cat "$WORK"/acked.* >"$WORK/acked" 2>/dev/null || true
acked=$(wc -l <"$WORK/acked")
[[ $acked -ge 50 ]] || fail "only $acked acknowledged requests: the honest clients did not run"

result=$(q -F ' ' <<SQL
CREATE TEMP TABLE acked (n int, outcome text);
\\copy acked FROM '$WORK/acked' WITH (FORMAT text, DELIMITER ' ')
CREATE TEMP TABLE k AS SELECT key, state, status_code, response FROM idempotency.keys WHERE scope = 'load';
SELECT
  (SELECT count(*) FROM acked a LEFT JOIN k ON k.key = 'k' || a.n
    WHERE k.state IS DISTINCT FROM 'completed' OR k.status_code IS DISTINCT FROM 201
       OR k.response IS DISTINCT FROM jsonb_build_object('order', a.n)),
  (SELECT count(*) FROM (SELECT key FROM orders GROUP BY key HAVING count(*) > 1) d),
  (SELECT count(*) FROM orders o WHERE NOT EXISTS
    (SELECT FROM k WHERE k.key = o.key AND k.state = 'completed')),
  (SELECT count(*) FROM k WHERE k.state = 'completed' AND NOT EXISTS
    (SELECT FROM orders o WHERE o.key = k.key)),
  (SELECT count(*) FROM k WHERE k.state <> 'completed'),
  (SELECT count(*) FROM orders o WHERE o.amount <> substr(o.key, 2)::int),
  (SELECT count(DISTINCT n) FROM acked),
  (SELECT count(*) FROM k),
  (SELECT count(*) FROM orders);
SQL
)
read -r lost dup orphan missing unfinished wrong distinct_acked keys orders <<<"$result"
echo "pgbench: $tx_before transactions before the crash, $tx_after after; honest clients: $acked acknowledged requests ($distinct_acked distinct keys)"
echo "checked: $keys key records, $orders business rows; $((tx_before + tx_after + acked - keys)) of $((tx_before + tx_after + acked)) requests were duplicates"
[[ $lost -eq 0 ]] || fail "$lost acknowledged requests whose key is not completed with its response"
[[ $dup -eq 0 ]] || fail "$dup keys with more than one business row"
[[ $orphan -eq 0 ]] || fail "$orphan business rows without a completed key"
[[ $missing -eq 0 ]] || fail "$missing completed keys without a business row"
[[ $unfinished -eq 0 ]] || fail "$unfinished claims left processing or failed"
[[ $wrong -eq 0 ]] || fail "$wrong business rows with a wrong amount"
echo "crash_under_load: 8 pgbench clients + $RECORDERS recorders, $NKEYS keys, 1 immediate stop; all invariants hold"
