#!/usr/bin/env bash
# The Fastify plugin (clients/node/lib/fastify.js) across a real PostgreSQL crash restart
# (pg_ctl stop -m immediate, then start), on a cluster of its own: a Fastify 5 service with
# the handler form (POST /orders, a pool) and the statement form (POST /statement, a pipelined
# pool), whose pools hold idle connections when the server goes.
#  1. restarted with no request in flight: the service is alive and answers its first request
#     after the restart on each form (201), with no 503 in between;
#  2. down: 503 database_unavailable on both forms, the service alive; back: answered;
#  3. under load: 8 clients that retry each key until answered, on both forms, while the
#     server restarts: every key answered, 0 lost, 0 doubled, 0 answers naming another order.
# idem: same on every major (the Node client's Fastify plugin, not the extension)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"

cluster_setup test-cluster/fastify-restart 54537
source "$(dirname "${BASH_SOURCE[0]}")/lib/prelude.sh" cluster
WORK=$(mktemp -d)
cluster_init "$CLUSTER_DATA" "$CLUSTER_PORT" "$CLUSTER_SOCK"
cluster_start "$CLUSTER_DATA"
q -c "CREATE EXTENSION idempotency" \
  -c "CREATE TABLE orders (id bigserial PRIMARY KEY, k text NOT NULL, item text)"
"$IDEM_ROOT/scripts/npm_ci.sh" "$IDEM_ROOT/clients/node" >/dev/null
restart() { cluster_crash "$CLUSTER_DATA" && cluster_start "$CLUSTER_DATA"; }

# The service: its pools never close idle connections, so that they are there to break.
cat >"$WORK/service.mjs" <<'JS'
import { createRequire } from 'node:module';
const [root, host, port] = process.argv.slice(2);
const require = createRequire(`${root}/clients/node/package.json`);
const Fastify = require('fastify');
const pg = require('pg');
const { idempotencyPlugin } = await import(`${root}/clients/node/lib/fastify.js`);
const connection = { host, port: Number(port), user: 'postgres', database: 'postgres',
  idleTimeoutMillis: 0 };
const pool = new pg.Pool({ ...connection, max: 4 });
const pipelined = new pg.Pool({ ...connection, max: 2, pipeline: true });
const app = Fastify();
await app.register(idempotencyPlugin, { pool, scope: 'restart' });
app.post('/orders', { config: { idempotency: true } }, async (request, reply) => {
  const { client, key } = request.idempotency;
  const { rows } = await client.query('INSERT INTO orders (k, item) VALUES ($1, $2) RETURNING id',
    [key, request.body.item]);
  return reply.code(201).send({ id: rows[0].id });
});
app.post('/statement', { config: { idempotency: { pool: pipelined,
  statement: 'INSERT INTO orders (k, item) VALUES ($1, $2) RETURNING id',
  params: (request) => [request.headers['idempotency-key'], request.body.item] } } }, () => {
  throw new Error('the statement form answers every request');
});
app.get('/alive', async () => ({ pid: process.pid }));
const address = await app.listen({ port: 0, host: '127.0.0.1' });
console.log(`listening ${address}`);
JS

# The clients: node drive.mjs BASE PATH... One request (new key each) per PATH: "PATH
# STATUS error" lines. With LOAD=KEYS: 8 clients retry each key until answered (2xx), new keys
# until KEYS are answered, PATHs in turn, and run FAULT_CMD once a third are answered; then
# per key the orders it got: one JSON line { keys, answered, faults, unavailable, lost,
# doubled, wrong }.
cat >"$WORK/drive.mjs" <<'JS'
import { exec } from 'node:child_process';
import { promisify } from 'node:util';
import { randomUUID } from 'node:crypto';
import { createRequire } from 'node:module';
const [root, base, ...paths] = process.argv.slice(2);
const pg = createRequire(`${root}/clients/node/package.json`)('pg');
const post = async (path, key) => {
  try {
    const res = await fetch(`${base}${path}`, { method: 'POST', body: JSON.stringify({ item: key }),
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      signal: AbortSignal.timeout(30000) });
    const body = await res.json().catch(() => ({}));
    return { status: res.status, body };
  } catch (err) {
    return { status: 0, body: { error: err.message } };
  }
};
if (!process.env.LOAD) {
  for (const path of paths) {
    const r = await post(path, randomUUID());
    console.log(path, r.status, r.body.error ?? '-');
  }
  process.exit(0);
}
const target = Number(process.env.LOAD);
const answers = new Map();
const keys = [];
let faults = 0;
let unavailable = 0;
let faulted = false;
const deadline = Date.now() + 120000;
async function client(n) {
  while (answers.size < target && Date.now() < deadline) {
    const key = randomUUID();
    const path = paths[keys.push(key) % paths.length];
    while (Date.now() < deadline) {
      const r = await post(path, key);
      if (r.status >= 200 && r.status < 300) {
        answers.set(key, r.body.id);
        break;
      }
      if (r.status === 503) unavailable++;
      await new Promise((resolve) => { setTimeout(resolve, 20); });
    }
    if (!faulted && answers.size >= target / 3) {
      faulted = true;
      // the other clients go on meanwhile
      await promisify(exec)(process.env.FAULT_CMD, { shell: '/bin/bash' });
      faults++;
    }
  }
}
await Promise.all(Array.from({ length: 8 }, (_, n) => client(n)));
const [host, port] = process.env.PGLOCATION.split(':');
const db = new pg.Client({ host, port: Number(port), user: 'postgres', database: 'postgres' });
await db.connect();
const { rows } = await db.query(
  'SELECT k, array_agg(id::text) AS ids FROM orders WHERE k = ANY($1) GROUP BY k', [keys]);
await db.end();
const orders = new Map(rows.map((r) => [r.k, r.ids]));
let lost = 0;
let doubled = 0;
let wrong = 0;
for (const [key, id] of answers) {
  const ids = orders.get(key) ?? [];
  if (ids.length === 0) lost++;
  if (ids.length > 1) doubled++;
  if (!ids.includes(String(id))) wrong++;
}
for (const key of keys) if (!answers.has(key) && (orders.get(key) ?? []).length > 1) doubled++;
console.log(JSON.stringify({ keys: keys.length, answered: answers.size, faults, unavailable, lost,
  doubled, wrong }));
JS

node "$WORK/service.mjs" "$IDEM_ROOT" "$CLUSTER_SOCK" "$CLUSTER_PORT" >"$WORK/service.log" 2>&1 &
SERVICE=$!
BG+=("$SERVICE")
on_fail 'echo "--- service log"; tail -n 30 "$WORK/service.log"'
poll 60 "the service listens" grep -q '^listening' "$WORK/service.log"
BASE=$(sed -n 's/^listening //p' "$WORK/service.log")
drive() { timeout 180 node "$WORK/drive.mjs" "$IDEM_ROOT" "$BASE" "$@"; }
alive() {
  kill -0 "$SERVICE" 2>/dev/null && node -e 'fetch(process.argv[1]).then((r) => process.exit(r.ok ? 0 : 1),
    () => process.exit(1))' "$BASE/alive"
}

echo "--- 1. restarted with no request in flight"
# each pool keeps the connection of its first request idle
out=$(drive /orders /orders /orders /orders /statement /statement /statement /statement)
expect "the first requests are answered" "$(awk '{ print $2 }' <<<"$out" | sort -u)" 201
[[ $(q -c "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'
  AND state = 'idle' AND pid <> pg_backend_pid()") -ge 2 ]] ||
  fail "the service's pools hold no idle connection to break"
passed "the pools hold idle connections"
restart
alive || fail "the service died with the restart"
passed "the service survives the restart"
expect "the first request after the restart, handler form" "$(drive /orders)" "/orders 201 -"
expect "the first request after the restart, statement form" "$(drive /statement)" \
  "/statement 201 -"

echo "--- 2. down: 503, the service alive; back: answered"
cluster_crash "$CLUSTER_DATA"
expect "down: 503 on both forms" "$(drive /orders /statement)" \
  "$(printf '/orders 503 database_unavailable\n/statement 503 database_unavailable')"
alive || fail "the service died while the database was down"
passed "the service is alive while the database is down"
cluster_start "$CLUSTER_DATA"
expect "back: the first requests answered" "$(drive /orders /statement)" \
  "$(printf '/orders 201 -\n/statement 201 -')"

echo "--- 3. under load, 8 clients retrying each key, the server restarted"
export PG_CONFIG IDEM_PORT_OFFSET PGLOCATION=$CLUSTER_SOCK:$CLUSTER_PORT
export FAULT_CMD="source '$IDEM_ROOT/scripts/lib.sh'; cluster_crash '$CLUSTER_DATA';
  cluster_start '$CLUSTER_DATA'"
line=$(LOAD=300 drive /orders /statement) || fail "the clients failed: $line"
echo "$line"
read -r keys answered faults unavailable lost doubled wrong < <(python3 -c 'import json, sys
r = json.loads(sys.argv[1])
print(*(r[k] for k in ("keys", "answered", "faults", "unavailable", "lost", "doubled", "wrong")))' "$line")
expect "one restart under load" "$faults" 1
[[ $answered -ge 300 && $answered -eq $keys ]] || fail "$answered of $keys keys answered"
passed "every key answered ($answered)"
[[ $unavailable -gt 0 ]] || fail "no request met the restart (no 503): nothing was shown"
passed "requests met the restart ($unavailable answers 503, retried)"
expect "lost" "$lost" 0
expect "doubled" "$doubled" 0
expect "wrong" "$wrong" 0
alive || fail "the service died under load"
passed "the service is alive after the load"
echo "fastify_restart: $CHECKS checks passed"
