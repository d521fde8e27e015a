# shellcheck shell=bash
# The storm shape, shared by test/scripted/storm.sh (straight to the server) and
# test/scripted/pgbouncer.sh (through a pooler in transaction mode). Source it after defining
# q (psql on the cluster, -At) and fail; it uses WORK, NKEYS, GENERATIONS_PER_SECOND,
# CLIENTS and DURATION.
#   storm_tables                       the business table and the outcome log
#   storm_script                       writes $WORK/storm.pgbench
#   storm_run HOST PORT [pgbench args] runs it; fails on any client error
#   storm_check                        retries failed claims once, then checks every key

storm_tables() {
  q -q -c "CREATE TABLE orders (key text NOT NULL, attempt int NOT NULL) /* no unique index on purpose */" \
    -c "CREATE UNLOGGED TABLE outcomes (path int, o int)"
}

# storm_claim ARGS: a path's claim, reserve() with ARGS after the key, and its outcome logged.
storm_claim() {
cat <<SQL
SELECT (outcome = 'new')::int AS is_new, coalesce(attempt, 0) AS attempt,
       array_position(enum_range(outcome), outcome) AS o
  FROM idempotency.reserve('storm', 'g' || :g || '-k' || :k, $1) \\gset
INSERT INTO outcomes VALUES (:path, :o);
SQL
}

storm_script() {
cat >"$WORK/storm.pgbench" <<SQL
\\set k random(1, $NKEYS)
\\set path random(1, 10)
SELECT (extract(epoch FROM clock_timestamp()) * $GENERATIONS_PER_SECOND)::bigint % 100000000 AS g \\gset
\\if :path <= 7
BEGIN;
$(storm_claim "wait => '20 milliseconds'")
\\if :is_new
INSERT INTO orders VALUES ('g' || :g || '-k' || :k, :attempt);
SELECT idempotency.complete('storm', 'g' || :g || '-k' || :k, 201, jsonb_build_object('order', :k), :attempt);
\\endif
COMMIT;
\\elif :path <= 8
BEGIN;
$(storm_claim "wait => '0'")
\\if :is_new
SELECT idempotency.fail('storm', 'g' || :g || '-k' || :k, '{"error": "transient"}', :attempt);
\\endif
COMMIT;
\\else
$(storm_claim "lock_ttl => '5 minutes', wait => '20 milliseconds'")
\\if :is_new
BEGIN;
INSERT INTO orders VALUES ('g' || :g || '-k' || :k, :attempt);
SELECT idempotency.checkpoint('storm', 'g' || :g || '-k' || :k, 'order inserted', :attempt);
SELECT idempotency.complete('storm', 'g' || :g || '-k' || :k, 201, jsonb_build_object('order', :k), :attempt);
COMMIT;
\\endif
\\endif
SQL
}

storm_run() {
  local host=$1 port=$2 rc=0
  shift 2
  echo "storm: $CLIENTS clients, $NKEYS keys, $DURATION s"
  timeout $((DURATION + 120)) "$PGBIN/pgbench" -n -h "$host" -p "$port" -U postgres \
    -c "$CLIENTS" -j 2 -T "$DURATION" -f "$WORK/storm.pgbench" "$@" postgres \
    >"$WORK/pgbench.log" 2>&1 || rc=$?
  grep -E "^(number of|latency average|tps)" "$WORK/pgbench.log" || true
  if [[ $rc -ne 0 ]] || grep -qE "aborted|ERROR" "$WORK/pgbench.log"; then
    grep -E "aborted|ERROR" "$WORK/pgbench.log" | head -n 20
    fail "pgbench exited $rc: a client got an error"
  fi
}

storm_check() {
  local tx failed retried deadlocks keys completed rows dup orphan missing leftover locks outcomes
  local generations
  tx=$(sed -nE 's/^number of transactions actually processed: ([0-9]+).*/\1/p' "$WORK/pgbench.log")
  failed=$(sed -nE 's/^number of failed transactions: ([0-9]+).*/\1/p' "$WORK/pgbench.log")
  [[ ${failed:-0} -eq 0 ]] || fail "$failed failed transactions"
  [[ ${tx:-0} -gt $NKEYS ]] || fail "only ${tx:-0} transactions ran"

  # Requests whose claim failed last were not retried before the end: retry them once, as a
  # client would, so that every key ends completed.
  retried=$(q -q -c "
  DO \$\$
  DECLARE r record; res idempotency.reservation; n int := 0;
  BEGIN
    FOR r IN SELECT key FROM idempotency.keys WHERE scope = 'storm' AND state = 'failed' LOOP
      res := idempotency.reserve('storm', r.key);
      IF res.outcome <> 'new' THEN RAISE EXCEPTION 'retry of % got %', r.key, res.outcome; END IF;
      INSERT INTO orders VALUES (r.key, res.attempt);
      PERFORM idempotency.complete('storm', r.key, 201,
        jsonb_build_object('order', split_part(r.key, '-k', 2)::int), res.attempt);
      n := n + 1;
    END LOOP;
    RAISE NOTICE 'retried %', n;
  END
  \$\$" 2>&1 | sed -nE 's/.*retried ([0-9]+).*/\1/p')

  read -r deadlocks keys completed rows dup orphan missing leftover locks outcomes <<<"$(q -F ' ' -c "
  SELECT
    (SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()),
    (SELECT count(*) FROM idempotency.keys WHERE scope = 'storm'),
    (SELECT count(*) FROM idempotency.keys WHERE scope = 'storm' AND state = 'completed'),
    (SELECT count(*) FROM orders),
    (SELECT count(*) FROM (SELECT key FROM orders GROUP BY key HAVING count(*) > 1) d),
    (SELECT count(*) FROM orders o WHERE NOT EXISTS (SELECT FROM idempotency.keys k
       WHERE k.scope = 'storm' AND k.key = o.key AND k.state = 'completed' AND k.attempt = o.attempt)),
    (SELECT count(*) FROM idempotency.keys k WHERE k.scope = 'storm' AND k.state = 'completed'
       AND NOT EXISTS (SELECT FROM orders o WHERE o.key = k.key)),
    (SELECT count(*) FROM idempotency.keys WHERE scope = 'storm' AND state = 'processing'),
    (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 478),
    (SELECT string_agg((enum_range(NULL::idempotency.outcome))[o] || '=' || n, ',' ORDER BY o)
       FROM (SELECT o, count(*) n FROM outcomes GROUP BY o) x)")"
  generations=$(q -c "SELECT count(DISTINCT split_part(key, '-', 1)) FROM idempotency.keys WHERE scope = 'storm'")
  echo "outcomes: $outcomes; failed-then-retried keys: $(q -c "SELECT count(*) FROM idempotency.keys WHERE scope = 'storm' AND attempt > 1")"
  echo "checked: $keys keys ($NKEYS per generation, $generations generations), $rows business rows; $retried failed claims retried after the run"
  [[ $deadlocks -eq 0 ]] || fail "$deadlocks deadlocks detected"
  [[ $generations -ge $((DURATION * GENERATIONS_PER_SECOND / 2)) ]] || fail "only $generations generations of keys"
  [[ $keys -le $((generations * NKEYS)) && $completed -eq $keys ]] || fail "$completed of $keys keys completed"
  [[ $dup -eq 0 ]] || fail "$dup keys with more than one business row"
  [[ $orphan -eq 0 ]] || fail "$orphan business rows without a completed key of the same attempt"
  [[ $missing -eq 0 ]] || fail "$missing completed keys without a business row"
  [[ $rows -eq $keys ]] || fail "$rows business rows for $keys keys"
  [[ $leftover -eq 0 ]] || fail "$leftover claims left processing"
  [[ $locks -eq 0 ]] || fail "$locks advisory key locks left"
  [[ $outcomes == *in_progress=* && $outcomes == *replay=* ]] ||
    fail "the storm did not contend (outcomes: $outcomes)"
  echo "storm: $tx transactions, 0 errors, 0 deadlocks, exactly one business row for each of $keys keys"
}
