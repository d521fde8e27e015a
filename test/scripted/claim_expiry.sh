#!/usr/bin/env bash
# A live claim never expires under its holder. With retentions of seconds and the maintenance
# worker dropping 1-second partitions meanwhile: a committed claim whose lease crosses the end
# of its retention, a takeover near the end of the window, and the cross-transaction helpers of
# both clients (Python run_external, Node runExternal) whose external call outlasts the
# retention. Each holder's complete is accepted after the partition that held the key's first
# expiry is gone; each case ends with its side effect recorded once and the answer replayed.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"

cluster_setup test-cluster/claim-expiry 54533
source "$(dirname "${BASH_SOURCE[0]}")/lib/prelude.sh" cluster
cluster_init "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" \
  "idempotency.database = 'postgres'" "idempotency.maintenance_interval = '1s'" \
  "idempotency.partition_width = '1s'" "idempotency.premake = 4" "fsync = off"
cluster_start "$CLUSTER_DATA"
source "$(dirname "${BASH_SOURCE[0]}")/lib/worker.sh"
WORK=$(mktemp -d)

q -c "CREATE EXTENSION idempotency" \
  -c "CREATE TABLE side_effects (scope text, key text, attempt int, at timestamptz DEFAULT clock_timestamp())"
poll 30 "the worker created partitions" sql_true \
  "SELECT count(*) >= 3 FROM idempotency.partitions WHERE NOT is_default"

# past_and_dropped TIME: TIME has passed and the worker has dropped the partition that held
# it: a record expiring at TIME (the rule before this one) would be gone with it.
past_and_dropped() {
  echo "SELECT clock_timestamp() > '$1'::timestamptz AND NOT EXISTS (SELECT FROM idempotency.partitions
      WHERE NOT is_default AND range_start <= '$1'::timestamptz AND '$1'::timestamptz < range_end)"
}
# once SCOPE KEY: the side effect was recorded once and the stored answer is replayed.
once() {
  expect "$1/$2: the side effect ran once" \
    "$(q -c "SELECT count(*) FROM side_effects WHERE scope = '$1' AND key = '$2'")" 1
  expect "$1/$2: the answer is replayed" \
    "$(q -c "SELECT outcome || ' ' || status_code FROM idempotency.reserve('$1', '$2')")" \
    "replay 201"
}

echo "--- 1. a committed claim whose lease (8 s) outlasts its retention (2 s)"
IFS='|' read -r attempt window_end < <(q -c "SELECT attempt, first_seen_at + interval '2 seconds'
  FROM idempotency.reserve('sql', 'lease', lock_ttl => '8 seconds', retention => '2 seconds')")
expect "sql/lease: claimed" "$attempt" 1
poll 60 "the retention ended and the worker dropped its partition" sql_true "$(past_and_dropped "$window_end")"
expect "sql/lease: the record is still there under its live claim" \
  "$(q -c "SELECT state FROM idempotency.lookup('sql', 'lease')")" processing
q -c "INSERT INTO side_effects VALUES ('sql', 'lease', 1)"
q -c "SELECT idempotency.complete('sql', 'lease', 201, '{\"charged\": 1}', attempt => 1)" >/dev/null ||
  fail "sql/lease: the holder's complete was refused"
passed "sql/lease: the holder's complete was accepted"
expect "sql/lease: kept for the retention after complete" \
  "$(q -c "SELECT expires_at >= completed_at + interval '2 seconds' FROM idempotency.lookup('sql', 'lease')")" t
once sql lease

echo "--- 2. a takeover near the end of the window, its lease crossing it"
# The first holder claims with a 1-second lease and never comes back. Its record expires at
# locked_until + 6 s; the takeover comes when 3 s of that remain, with a lease of 6 s.
IFS='|' read -r first_seen expires < <(q -c "SELECT first_seen_at, expires_at
  FROM idempotency.reserve('sql', 'takeover', lock_ttl => '1 second', retention => '6 seconds')")
poll 30 "the first holder's lease lapsed, 3 s of its window left" sql_true \
  "SELECT clock_timestamp() > '$expires'::timestamptz - interval '3 seconds'"
expect "sql/takeover: taken over with attempt 2" \
  "$(q -c "SELECT outcome || ' ' || attempt || ' ' || (expires_at > locked_until) FROM
      idempotency.reserve('sql', 'takeover', lock_ttl => '6 seconds', retention => '6 seconds')")" \
  "new 2 true"
poll 60 "the first expiry passed and the worker dropped its partition" sql_true "$(past_and_dropped "$expires")"
q -c "INSERT INTO side_effects VALUES ('sql', 'takeover', 2)"
q -c "SELECT idempotency.complete('sql', 'takeover', 201, '{\"charged\": 2}', attempt => 2)" >/dev/null ||
  fail "sql/takeover: the new holder's complete was refused"
passed "sql/takeover: the new holder's complete was accepted"
expect "sql/takeover: the stale holder is fenced off" \
  "$(q -c "SELECT idempotency.complete('sql', 'takeover', 201, '{}', attempt => 1)" 2>&1 |
      grep -o 'attempt is stale' || true)" "attempt is stale"
once sql takeover
[[ $(q -c "SELECT first_seen_at = '$first_seen' FROM idempotency.lookup('sql', 'takeover')") == t ]] ||
  fail "sql/takeover: first_seen_at changed"

echo "--- 3. Python: run_external whose external call outlasts the retention"
cat >"$WORK/external.py" <<'PY'
import sys
import psycopg
root, host, port = sys.argv[1:4]
sys.path.insert(0, f"{root}/clients/python")
from pg_idempotency import run_external  # noqa: E402

dsn = dict(host=host, port=port, user="postgres", dbname="postgres")
side = psycopg.connect(**dsn, autocommit=True)
calls = []

def wait_until(sql, args=()):
    # The condition, polled; bounded so a broken server ends the test.
    for _ in range(600):
        if side.execute(sql, args).fetchone()[0]:
            return
        side.execute("SELECT pg_sleep(0.1)")
    raise SystemExit(f"not within 60 s: {sql}")

def charge(attempt):
    calls.append(attempt.attempt)
    end = side.execute("SELECT first_seen_at + interval '2 seconds'"
                       " FROM idempotency.lookup('py', 'pay-1')").fetchone()[0]
    # The external call takes longer than the retention: it returns once that window ended
    # and the worker dropped the partition that held its end.
    wait_until("SELECT clock_timestamp() > %(t)s AND NOT EXISTS (SELECT FROM idempotency.partitions"
               " WHERE NOT is_default AND range_start <= %(t)s AND %(t)s < range_end)", {"t": end})
    side.execute("INSERT INTO side_effects VALUES ('py', 'pay-1', %s)", (attempt.attempt,))
    return 201, {"charged": attempt.attempt}

with psycopg.connect(**dsn) as conn:
    first = run_external(conn, "py", "pay-1", charge, {"amount": 5},
                         lock_ttl="10 seconds", retention="2 seconds")
    again = run_external(conn, "py", "pay-1", charge, {"amount": 5},
                         lock_ttl="10 seconds", retention="2 seconds")
print(first.status_code, first.replayed, again.status_code, again.replayed, len(calls))
PY
out=$(timeout 120 /usr/bin/python3 "$WORK/external.py" "$IDEM_ROOT" "$CLUSTER_SOCK" "$CLUSTER_PORT" 2>"$WORK/py.err") ||
  fail "Python run_external: $(tail -n 5 "$WORK/py.err")"
expect "Python: completed, then replayed, the work called once" "$out" "201 False 201 True 1"
once py pay-1

echo "--- 4. Node: runExternal whose external call outlasts the retention"
"$IDEM_ROOT/scripts/npm_ci.sh" "$IDEM_ROOT/clients/node" >/dev/null
cat >"$WORK/external.mjs" <<'JS'
import { createRequire } from 'node:module';
const [root, host, port] = process.argv.slice(2);
const pg = createRequire(`${root}/clients/node/package.json`)('pg');
const { runExternal } = await import(`${root}/clients/node/index.js`);
const connect = async () => {
  const c = new pg.Client({ host, port: Number(port), user: 'postgres', database: 'postgres' });
  await c.connect();
  return c;
};
const [conn, side] = [await connect(), await connect()];
const calls = [];
const waitUntil = async (sql, args) => { // the condition, polled; bounded
  for (let i = 0; i < 600; i++) {
    if ((await side.query(sql, args)).rows[0].ok) return;
    await side.query('SELECT pg_sleep(0.1)');
  }
  throw new Error(`not within 60 s: ${sql}`);
};
const charge = async (attempt) => {
  calls.push(attempt.attempt);
  const { end } = (await side.query(`SELECT first_seen_at + interval '2 seconds' AS end
    FROM idempotency.lookup('node', 'pay-1')`)).rows[0];
  await waitUntil(`SELECT clock_timestamp() > $1 AND NOT EXISTS (SELECT FROM idempotency.partitions
    WHERE NOT is_default AND range_start <= $1 AND $1 < range_end) AS ok`, [end]);
  await side.query("INSERT INTO side_effects VALUES ('node', 'pay-1', $1)", [attempt.attempt]);
  return { statusCode: 201, response: { charged: attempt.attempt } };
};
const options = { scope: 'node', key: 'pay-1', request: { amount: 5 }, lockTtl: '10 seconds',
  retention: '2 seconds' };
const first = await runExternal(conn, options, charge);
const again = await runExternal(conn, options, charge);
console.log(first.statusCode, first.replayed, again.statusCode, again.replayed, calls.length);
await conn.end();
await side.end();
JS
out=$(timeout 120 node "$WORK/external.mjs" "$IDEM_ROOT" "$CLUSTER_SOCK" "$CLUSTER_PORT" 2>"$WORK/node.err") ||
  fail "Node runExternal: $(tail -n 5 "$WORK/node.err")"
expect "Node: completed, then replayed, the work called once" "$out" "201 false 201 true 1"
once node pay-1

in_log() { grep -q "idempotency: dropped partition" "$CLUSTER_LOG"; }
in_log || fail "the worker dropped no partition meanwhile"
passed "the worker dropped partitions meanwhile"
echo "claim_expiry: $CHECKS checks passed"
