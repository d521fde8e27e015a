#!/usr/bin/env bash
# Through pgbouncer in transaction pooling mode (Debian's package; its own unix socket, port
# CLUSTER_PORT + 1). Pools: `postgres` (8 server connections for the storm's 16 clients),
# `one` and `other` (1 server connection each: two clients of `one` share a backend; `one`
# and `other` never do).
#  1. the storm shape (storm.sh) with 16 clients for 20 s: no client error, exactly one
#     business row per completed key, no claim left processing, no key lock left;
#  2. the cross-transaction path: reserve committed on one backend, complete with the attempt
#     fence on another; a stale attempt is refused there too (IK001);
#  3. nothing of one client's session reaches the next client of the same backend: a claim
#     kept in session memory (rolled back, or its client killed mid-transaction), a stream
#     created and used in a rolled-back transaction (its cache entry), the type descriptors
#     the backend cached before the extension was dropped and created again;
#  4. what does not work in transaction mode, with the error the user sees: protocol-level
#     prepared statements (pgbench -M prepared), and SQL PREPARE / session SET leaking to the
#     next client of the backend;
#  5. a client that disconnects while reserve waits (pgbouncer then closes its server
#     connection): when the wait ends with the key free, reserve finds the client gone and
#     ends the session instead of claiming, so no claim is left (without that check the
#     orphan's autocommitted claim stayed processing until lock_ttl). The server runs without
#     client_connection_check_interval, which would end the backend at once;
#  6. the Node middleware with 16 clients on 8 server connections: its prepared reserve_begin
#     meets 26000 / 42P05, it switches to unnamed statements, and every request is answered;
#  7. the Node consumers (consumeOnce, applyOnce) likewise: their prepared claim_once / accept
#     meets 26000 / 42P05, the message's transaction is sent again unnamed, each applied once;
#  8. the Node statement form (the middleware's and runOnce's) likewise: its prepared
#     execute_once meets 26000 / 42P05, the call is sent again unnamed, each key's statement
#     runs once and its replays get the stored answer.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
cluster_setup test-cluster/pgbouncer 54481
CLIENTS=${CLIENTS:-16}
NKEYS=${NKEYS:-50}
GENERATIONS_PER_SECOND=${GENERATIONS_PER_SECOND:-5}
DURATION=${DURATION:-20}
PGB_PORT=$((CLUSTER_PORT + 1))
PGB_SOCK=/tmp/idempotency-$PGB_PORT
PGB_DIR=$(dirname "$CLUSTER_DATA")/pgbouncer
source "$(dirname "${BASH_SOURCE[0]}")/lib/prelude.sh" cluster
WORK=$(mktemp -d /tmp/idem-pgbouncer.XXXXXX)
chmod 0755 "$WORK"
PGBOUNCER=/usr/sbin/pgbouncer
if [[ ! -x $PGBOUNCER ]]; then
  log "installing pgbouncer"
  apt_install pgbouncer >/dev/null
fi
on_exit 'if [[ -f $PGB_DIR/pgbouncer.pid ]]; then kill "$(cat "$PGB_DIR/pgbouncer.pid")" 2>/dev/null; fi'
on_fail 'echo "--- pgbouncer log"; tail -n 20 "$PGB_DIR/pgbouncer.log"'
expect() { [[ $2 == "$3" ]] || fail "$1: got '$2', want '$3'"; ok "$1 ($2)"; }
# q: straight to the server. pq DB: through pgbouncer's pool DB. Both bounded.
q() { timeout 120 "$PGBIN/psql" -X -v ON_ERROR_STOP=1 -h "$CLUSTER_SOCK" -p "$CLUSTER_PORT" -U postgres -d postgres -At "$@"; }
pq() {
  local db=$1
  shift
  timeout 60 "$PGBIN/psql" -X -v ON_ERROR_STOP=1 -h "$PGB_SOCK" -p "$PGB_PORT" -U postgres -d "$db" -qAt "$@"
}
state_of() { q -c "SELECT coalesce((SELECT state || '/' || attempt FROM idempotency.keys WHERE scope = '$1' AND key = '$2'), 'none')"; }
wait_sql() { poll --try "${2:-60}" sql_true "SELECT $1"; } # wait_sql SQL [seconds, 60 unless given]: until SQL (on the server) returns t
source "$(dirname "${BASH_SOURCE[0]}")/lib/storm_shape.sh"

cluster_init "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK" "max_connections = 60" \
  "deadlock_timeout = 100ms"
cluster_start "$CLUSTER_DATA"
q -q -c "CREATE EXTENSION idempotency"
storm_tables

rm -rf "$PGB_DIR" "$PGB_SOCK"
mkdir -p "$PGB_DIR" && mkdir -m 0700 "$PGB_SOCK"
server="host=$CLUSTER_SOCK port=$CLUSTER_PORT dbname=postgres"
cat >"$PGB_DIR/pgbouncer.ini" <<EOF
[databases]
postgres = $server pool_size=8
one = $server pool_size=1
other = $server pool_size=1

[pgbouncer]
listen_addr =
listen_port = $PGB_PORT
unix_socket_dir = $PGB_SOCK
auth_type = trust
auth_file = $PGB_DIR/users.txt
pool_mode = transaction
max_client_conn = 100
default_pool_size = 8
reserve_pool_size = 0
admin_users = postgres
logfile = $PGB_DIR/pgbouncer.log
pidfile = $PGB_DIR/pgbouncer.pid
log_connections = 0
log_disconnections = 0
EOF
echo '"postgres" ""' >"$PGB_DIR/users.txt"
is_root && chown -R postgres: "$PGB_DIR" "$PGB_SOCK"
# pgbouncer refuses to run as root: as the cluster's user.
as_pg "$PGBOUNCER" -d "$PGB_DIR/pgbouncer.ini" || fail "pgbouncer did not start"
listens() { [[ -S $PGB_SOCK/.s.PGSQL.$PGB_PORT ]]; }
poll --try 60 listens || fail "pgbouncer does not listen"
expect "pgbouncer answers in transaction mode" \
  "$(pq pgbouncer -c "SHOW CONFIG" | awk -F'|' '$1 == "pool_mode" {print $2}')" "transaction"

echo "--- 1. the storm shape through pgbouncer"
storm_script
storm_run "$PGB_SOCK" "$PGB_PORT"
storm_check
served=$(q -c "SELECT count(DISTINCT pid) FROM pg_stat_activity WHERE datname = 'postgres'")
ok "the storm ran (server backends now: $served, for $CLIENTS clients)"

echo "--- 2. the cross-transaction path on two backends"
read -r pid1 outcome attempt <<<"$(pq one -F ' ' -c "SELECT pg_backend_pid(), outcome, attempt FROM idempotency.reserve('px', 'cross', lock_ttl => '5 minutes')")"
expect "reserve through pool one" "$outcome/$attempt" "new/1"
pid2=$(pq other -c "BEGIN" -c "INSERT INTO orders VALUES ('cross', $attempt)" \
  -c "SELECT idempotency.complete('px', 'cross', 201, '{\"order\": 1}', $attempt)" \
  -c "SELECT pg_backend_pid()" -c "COMMIT" | tail -n 1)
[[ $pid1 != "$pid2" && -n $pid2 ]] || fail "reserve and complete ran on the same backend ($pid1)"
ok "reserve on backend $pid1, complete on backend $pid2"
expect "the key is completed once" "$(state_of px cross)" "completed/1"
read -r pid1 attempt <<<"$(pq one -F ' ' -c "SELECT pg_backend_pid(), attempt FROM idempotency.reserve('px', 'fenced', lock_ttl => '1 second')")"
wait_sql "(SELECT locked_until < clock_timestamp() FROM idempotency.lookup('px', 'fenced'))" ||
  fail "the 1-second lease did not lapse"
read -r outcome attempt2 <<<"$(pq other -F ' ' -c "SELECT outcome, attempt FROM idempotency.reserve('px', 'fenced')")"
expect "a lapsed claim is taken over on the other backend" "$outcome/$attempt2" "new/2"
err=$(pq one -c "\\set VERBOSITY sqlstate" -c "SELECT idempotency.complete('px', 'fenced', 200, '{}', $attempt)" 2>&1 || true)
expect "the first holder's complete is fenced" "$err" "ERROR:  IK001"
pq other -c "SELECT idempotency.complete('px', 'fenced', 200, '{}', $attempt2)" >/dev/null
expect "the second holder completed it" "$(state_of px fenced)" "completed/2"

echo "--- 3. no state from one client reaches the next client of the backend"
backend() { pq one -c "SELECT pg_backend_pid()"; }
b=$(backend)
pq one -c "BEGIN" -c "SELECT outcome FROM idempotency.reserve('leak', 'k1')" -c "ROLLBACK" >/dev/null
[[ $(backend) == "$b" ]] || fail "pool one changed backend"
expect "a rolled-back claim is gone for the next client" \
  "$(pq one -c "SELECT count(*) FROM idempotency.lookup('leak', 'k1')")" "0"
expect "the next client gets the key new" \
  "$(pq one -c "SELECT outcome || '/' || attempt FROM idempotency.reserve('leak', 'k1')")" "new/1"
# A client killed inside a transaction holding an unwritten claim.
PGAPPNAME=killed "$PGBIN/psql" -X -h "$PGB_SOCK" -p "$PGB_PORT" -U postgres -d one \
  -c "BEGIN" -c "SELECT idempotency.reserve('leak', 'k2')" -c "SELECT pg_sleep(3)" >/dev/null 2>&1 &
client=$!
BG+=("$client")
wait_sql "EXISTS (SELECT FROM pg_stat_activity WHERE query LIKE '%pg_sleep(3)%' AND pid <> pg_backend_pid())" ||
  fail "the killed client's transaction did not start"
kill -9 "$client"
wait "$client" 2>/dev/null || true
# Its backend notices at the end of the statement (no client_connection_check_interval).
wait_sql "NOT EXISTS (SELECT FROM pg_stat_activity WHERE query LIKE '%pg_sleep(3)%' AND pid <> pg_backend_pid())" 30 ||
  fail "the killed client's backend outlived its statement"
expect "the killed client's claim is not written" \
  "$(pq one -c "SELECT count(*) FROM idempotency.lookup('leak', 'k2')")" "0"
expect "and its key is free" \
  "$(pq one -c "SELECT outcome || '/' || attempt FROM idempotency.reserve('leak', 'k2')")" "new/1"
# A stream created and used in a rolled-back transaction: nothing of it in the backend.
b=$(backend)
expect "a stream used in a rolled-back transaction" \
  "$(pq one -c "BEGIN" -c "SELECT idempotency.create_stream('tx-only', 10)" \
     -c "SELECT idempotency.next_key('tx-only')" -c "ROLLBACK" | tail -n 1)" "1"
[[ $(backend) == "$b" ]] || fail "pool one changed backend"
err=$(pq one -c "\\set VERBOSITY sqlstate" -c "SELECT idempotency.next_key('tx-only')" 2>&1 || true)
expect "is unknown to the next client of the backend" "$err" "ERROR:  42704"
pq one -c "SELECT idempotency.create_stream('shared', 10)" >/dev/null
values=$( (for _ in $(seq 8); do pq one -c "SELECT idempotency.next_key('shared')"; pq other -c "SELECT idempotency.next_key('shared')"; done) | sort -n | uniq | wc -l)
expect "next_key alternating between two backends hands out distinct values" "$values" "16"

echo "--- 4. what transaction mode does not carry"
# 16 clients on pool postgres's 8 backends: a client's next transaction may run on a backend
# that never saw its Parse (or another client's statement of that name is already there).
cat >"$WORK/prepared.pgbench" <<'SQL'
\set k random(1, 1000000)
SELECT outcome FROM idempotency.reserve('prep', 'k' || :k);
SQL
rc=0
timeout 60 "$PGBIN/pgbench" -n -M prepared -h "$PGB_SOCK" -p "$PGB_PORT" -U postgres -c 16 -j 2 \
  -t 50 -f "$WORK/prepared.pgbench" postgres >"$WORK/prepared.log" 2>&1 || rc=$?
grep -qE 'prepared statement "P_[0-9]+" (does not exist|already exists)' "$WORK/prepared.log" ||
  fail "pgbench -M prepared through pgbouncer did not fail as docs/replication.md says (rc $rc): $(tail -n 5 "$WORK/prepared.log")"
ok "protocol-level prepared statements fail: $(grep -oE 'prepared statement "P_[0-9]+" (does not exist|already exists)' "$WORK/prepared.log" | head -n 1)"
timeout 60 "$PGBIN/pgbench" -n -M extended -h "$PGB_SOCK" -p "$PGB_PORT" -U postgres -c 16 -j 2 \
  -t 50 -f "$WORK/prepared.pgbench" postgres >"$WORK/extended.log" 2>&1 ||
  fail "pgbench -M extended (unnamed statements) failed: $(tail -n 5 "$WORK/extended.log")"
ok "the extended protocol with unnamed statements works"
pq one -c "PREPARE leaked AS SELECT outcome FROM idempotency.reserve('prep', 'sql-prepare')" >/dev/null
expect "a SQL PREPARE is visible to the next client of the backend" \
  "$(pq one -c "EXECUTE leaked")" "new"
pq one -c "DEALLOCATE leaked" >/dev/null
pq one -c "SET lock_timeout = '1234ms'" >/dev/null
expect "a session SET reaches the next client of the backend" "$(pq one -c "SHOW lock_timeout")" "1234ms"
pq one -c "RESET lock_timeout" >/dev/null

echo "--- 5. a pooled client disconnects while reserve waits"
PGAPPNAME=holder "$PGBIN/psql" -X -h "$CLUSTER_SOCK" -p "$CLUSTER_PORT" -U postgres -d postgres \
  -c "BEGIN" -c "SELECT idempotency.reserve('dc', 'k')" -c "SELECT pg_sleep(300)" -c "ROLLBACK" >/dev/null 2>&1 &
holder=$!
BG+=("$holder")
wait_sql "EXISTS (SELECT FROM pg_locks l JOIN pg_stat_activity a USING (pid)
          WHERE a.application_name = 'holder' AND l.locktype = 'advisory' AND l.objsubid = 478)" ||
  fail "the holder did not get the key lock"
"$PGBIN/psql" -X -h "$PGB_SOCK" -p "$PGB_PORT" -U postgres -d postgres \
  -c "SELECT idempotency.reserve('dc', 'k', lock_ttl => '1 hour', wait => '20 seconds')" >/dev/null 2>&1 &
client=$!
BG+=("$client")
wait_sql "EXISTS (SELECT FROM pg_stat_activity WHERE state = 'active'
          AND query LIKE '%reserve(''dc'', ''k'', lock_ttl%' AND pid <> pg_backend_pid())" ||
  fail "the pooled reserve is not waiting"
waiter=$(q -c "SELECT pid FROM pg_stat_activity WHERE query LIKE '%reserve(''dc'', ''k'', lock_ttl%' AND pid <> pg_backend_pid()")
wait_sql "EXISTS (SELECT FROM pg_locks WHERE pid = $waiter AND locktype = 'advisory'
          AND objsubid = 478 AND NOT granted)" || fail "the pooled reserve does not wait for the key lock"
kill -9 "$client"
wait "$client" 2>/dev/null || true
# The holder rolls back (its session ends) while the orphan still waits.
q -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'holder'" >/dev/null
wait "$holder" 2>/dev/null || true
wait_sql "NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $waiter)" 30 ||
  fail "the waiting backend $waiter outlived the holder by 30 s"
ok "the orphan backend ended once the holder let the key go"
grep -q "FATAL:  connection to client lost" "$CLUSTER_LOG" ||
  fail "no 'connection to client lost' in the server log"
ok "it ended with FATAL: connection to client lost"
expect "no claim left behind" "$(state_of dc k)" "none"
expect "the key is free" "$(pq postgres -c "SELECT outcome FROM idempotency.reserve('dc', 'k')")" "new"

echo "--- 3b. type descriptors cached before the extension was dropped and created again"
b=$(backend)
pq one -c "SELECT outcome FROM idempotency.reserve('tc', 'before')" >/dev/null
q -q -c "DROP EXTENSION idempotency CASCADE" -c "CREATE EXTENSION idempotency" 2>/dev/null
[[ $(backend) == "$b" ]] || fail "pool one changed backend"
expect "reserve on the same backend after the extension came back" \
  "$(pq one -F ' ' -c "SELECT outcome, attempt FROM idempotency.reserve('tc', 'after')")" "new 1"
expect "lookup there" "$(pq one -F ' ' -c "SELECT state, attempt FROM idempotency.lookup('tc', 'after')")" "processing 1"

echo "--- 6. the Node middleware: its prepared reserve_begin across pooled server connections"
# 16 pg clients on pool postgres's 8 server connections: a client's prepared statement is on
# one server connection and not the next (26000), or another client's is there first (42P05).
# The middleware must answer every request and switch to unnamed statements; one order per key.
"$IDEM_ROOT/scripts/npm_ci.sh" "$IDEM_ROOT/clients/node" >/dev/null
q -q -c "CREATE TABLE mw_orders (k text NOT NULL)"
cat >"$WORK/middleware.mjs" <<'JS'
import { createRequire } from 'node:module';
import http from 'node:http';
const [root, host, port] = process.argv.slice(2);
const pg = createRequire(`${root}/clients/node/package.json`)('pg');
const { idempotencyMiddleware } = await import(`${root}/clients/node/index.js`);
const pool = new pg.Pool({ host, port: Number(port), user: 'postgres', database: 'postgres', max: 16 });
pool.on('error', () => {});
const mw = idempotencyMiddleware({ pool, scope: 'pgb' });
const server = http.createServer((req, res) => mw(req, res, async () => {
  await req.idempotency.client.query('INSERT INTO mw_orders VALUES ($1)', [req.idempotency.key]);
  res.writeHead(201, { 'Content-Type': 'application/json' }).end('{"ok":true}');
}));
await new Promise((r) => { server.listen(0, '127.0.0.1', r); });
const url = `http://127.0.0.1:${server.address().port}/`;
const answers = {};
const post = async (key) => {
  const res = await fetch(url, { method: 'POST', body: '{"n": 1}',
    headers: { 'Idempotency-Key': key, 'Content-Type': 'application/json' } });
  const what = `${res.status}${res.headers.get('idempotent-replayed') ? ' replay' : ''}`;
  answers[what] = (answers[what] ?? 0) + 1;
  await res.arrayBuffer();
};
const keys = Array.from({ length: 160 }, (_, i) => `k-${i}`);
for (const round of [keys, keys]) { // new keys, then each once more
  for (let i = 0; i < round.length; i += 16) await Promise.all(round.slice(i, i + 16).map(post));
}
console.log(Object.entries(answers).sort(([a], [b]) => a.localeCompare(b)).map(([k, v]) => `${k}:${v}`).join(' '));
server.close();
await pool.end();
JS
answers=$(timeout 120 node "$WORK/middleware.mjs" "$IDEM_ROOT" "$PGB_SOCK" "$PGB_PORT" 2>"$WORK/middleware.err") ||
  fail "the middleware through pgbouncer: $(tail -n 5 "$WORK/middleware.err")"
expect "every request answered: 160 new, 160 replays" "$answers" "201:160 201 replay:160"
expect "one order per key" \
  "$(q -c "SELECT count(*) || '/' || count(DISTINCT k) FROM mw_orders")" "160/160"
expect "every key completed" "$(q -c "SELECT count(*) FILTER (WHERE state = 'completed') || '/' || count(*) FROM idempotency.keys WHERE scope = 'pgb'")" "160/160"

echo "--- 7. the Node consumers: their prepared claim and accept across pooled server connections"
# consumeOnce and applyOnce prepare their statement on the connection they use; through the
# pooler that meets 26000 and 42P05 as the middleware's does. Every message applied once.
q -q -c "CREATE TABLE consumed (k text NOT NULL)"
cat >"$WORK/consumers.mjs" <<'JS'
import { createRequire } from 'node:module';
const [root, host, port] = process.argv.slice(2);
const pg = createRequire(`${root}/clients/node/package.json`)('pg');
const { applyOnce, consumeOnce } = await import(`${root}/clients/node/index.js`);
const pool = new pg.Pool({ host, port: Number(port), user: 'postgres', database: 'postgres', max: 16 });
pool.on('error', () => {});
const outcomes = {};
const count = (what) => { outcomes[what] = (outcomes[what] ?? 0) + 1; };
const insert = (c, k) => c.query('INSERT INTO consumed VALUES ($1)', [k]);
const deliver = async (i) => {
  const c = await pool.connect();
  try {
    count(`queue ${await consumeOnce(c, 'pgb-queue', `m-${i}`, (w) => insert(w, `m-${i}`))}`);
    // a batch's 16 messages on 16 partitions: each partition's positions in order
    count(`stream ${await applyOnce(c, 'pgb-stream', `p-${i % 16}`, 1 + Math.floor(i / 16),
      (w) => insert(w, `s-${i}`))}`);
  } finally {
    c.release();
  }
};
for (const round of [0, 1]) { // each message, then its redelivery
  for (let i = 0; i < 160; i += 16)
    await Promise.all(Array.from({ length: 16 }, (_, j) => deliver(i + j)));
}
console.log(Object.entries(outcomes).sort(([a], [b]) => a.localeCompare(b)).map(([k, v]) => `${k}:${v}`).join(' '));
await pool.end();
JS
answers=$(timeout 120 node "$WORK/consumers.mjs" "$IDEM_ROOT" "$PGB_SOCK" "$PGB_PORT" 2>"$WORK/consumers.err") ||
  fail "the consumers through pgbouncer: $(tail -n 5 "$WORK/consumers.err")"
expect "every message applied, every redelivery refused" "$answers" \
  "queue false:160 queue true:160 stream false:160 stream true:160"
expect "each message's work once" \
  "$(q -c "SELECT count(*) || '/' || count(DISTINCT k) FROM consumed")" "320/320"

echo "--- 8. the Node statement form: its prepared execute_once across pooled server connections"
# The middleware's statement form and runOnce's send execute_once named with no transaction
# open; through the pooler that meets 26000 and 42P05 before anything ran, and the call goes
# again unnamed. Every request answered, each key's statement once.
q -q -c "CREATE TABLE so_orders (k text NOT NULL, via text NOT NULL)"
cat >"$WORK/statement_form.mjs" <<'JS'
import { createRequire } from 'node:module';
import http from 'node:http';
const [root, host, port] = process.argv.slice(2);
const pg = createRequire(`${root}/clients/node/package.json`)('pg');
const { idempotencyMiddleware, runOnce } = await import(`${root}/clients/node/index.js`);
// the Parse messages of execute_once: named (prepared) and unnamed
const parses = { named: 0, unnamed: 0 };
const parse = pg.Connection.prototype.parse;
pg.Connection.prototype.parse = function counted(msg) {
  if (msg.name === 'idempotency_execute_once_v1') parses.named++;
  else if (/idempotency\.execute_once\(/.test(msg.text)) parses.unnamed++;
  return parse.call(this, msg);
};
const pool = new pg.Pool({ host, port: Number(port), user: 'postgres', database: 'postgres', max: 16 });
pool.on('error', () => {});
const INSERT = 'INSERT INTO so_orders (k, via) VALUES ($1, $2) RETURNING k';
const mw = idempotencyMiddleware({ pool, scope: 'pgb-statement', statement: INSERT,
  params: (req) => [req.headers['idempotency-key'], 'middleware'] });
const server = http.createServer((req, res) => mw(req, res, () => res.writeHead(500).end()));
await new Promise((r) => { server.listen(0, '127.0.0.1', r); });
const url = `http://127.0.0.1:${server.address().port}/`;
const outcomes = {};
const count = (what) => { outcomes[what] = (outcomes[what] ?? 0) + 1; };
const post = async (key) => {
  const res = await fetch(url, { method: 'POST', body: '{"n": 1}',
    headers: { 'Idempotency-Key': key, 'Content-Type': 'application/json' } });
  const body = await res.json();
  count(`http ${res.status}${res.headers.get('idempotent-replayed') ? ' replay' : ''}` +
    `${body.k === key ? '' : ' wrong'}`);
};
const run = async (key) => {
  const c = await pool.connect();
  try {
    const r = await runOnce(c, { scope: 'pgb-statement', key,
      statement: INSERT, params: [key, 'runOnce'] });
    count(`runOnce ${r.replayed ? 'replay' : 'new'}${r.response.k === key ? '' : ' wrong'}`);
  } finally {
    c.release();
  }
};
for (const [send, prefix] of [[post, 'h'], [run, 'r']]) {
  const keys = Array.from({ length: 160 }, (_, i) => `${prefix}-${i}`);
  for (const round of [keys, keys]) { // new keys, then each once more
    for (let i = 0; i < round.length; i += 16) await Promise.all(round.slice(i, i + 16).map(send));
  }
}
console.log(Object.entries(outcomes).sort(([a], [b]) => a.localeCompare(b)).map(([k, v]) => `${k}:${v}`).join(' '));
console.log(`named ${parses.named > 0 ? 'sent' : 'never sent'}, unnamed after a refusal ${parses.unnamed > 0 ? 'sent' : 'never sent'}`);
server.close();
await pool.end();
JS
answers=$(timeout 120 node "$WORK/statement_form.mjs" "$IDEM_ROOT" "$PGB_SOCK" "$PGB_PORT" 2>"$WORK/statement_form.err") ||
  fail "the statement form through pgbouncer: $(tail -n 5 "$WORK/statement_form.err")"
expect "every request answered with its own row: 160 new, 160 replays, each way" \
  "$(head -n 1 <<<"$answers")" "http 201:160 http 201 replay:160 runOnce new:160 runOnce replay:160"
expect "execute_once prepared, and unnamed once the pooler refused it" \
  "$(tail -n 1 <<<"$answers")" "named sent, unnamed after a refusal sent"
expect "each key's statement once" \
  "$(q -c "SELECT count(*) || '/' || count(DISTINCT k) FROM so_orders")" "320/320"
expect "every key completed" "$(q -c "SELECT count(*) FILTER (WHERE state = 'completed') || '/' || count(*) FROM idempotency.keys WHERE scope = 'pgb-statement'")" "320/320"

echo "$CHECKS checks passed"
echo "PASS"
