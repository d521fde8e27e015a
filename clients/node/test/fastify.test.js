// The Fastify plugin (lib/fastify.js) on a real Fastify server and PostgreSQL: the answers of
// test/vectors/http_answers.json, a replay byte for byte the first answer, a burst of one key,
// the statement form on a pipelined pool, and the faults: a backend terminated mid-request, and
// every connection cut while new ones are refused (what a restart with -m immediate does to the
// service), through the tests' TCP proxy.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, test } from 'node:test';
import Fastify from 'fastify';
import pg from 'pg';
import { idempotencyPlugin } from '../lib/fastify.js';
import { connect, databases } from './db.js';
import { Proxy } from './proxy.js';

const vectors = JSON.parse(readFileSync(
  new URL('../../../test/vectors/http_answers.json', import.meta.url), 'utf8'));
const DOCUMENTATION = 'https://api.example.com/docs/idempotency';
const APP = 'fastify_plugin';

let db;
let check;
let proxy;
let pool;
let pipelined;
let app;
let base;
const gates = new Map(); // key => a promise the handler waits for

before(async () => {
  ({ source: db } = await databases('fastify'));
  check = await connect(db);
  await check.query('CREATE TABLE orders (id serial PRIMARY KEY, k text NOT NULL, item text)');
  proxy = new Proxy();
  const port = await proxy.listen();
  const via = { database: db, host: '127.0.0.1', port, application_name: APP };
  pool = new pg.Pool({ ...via, max: 4, connectionTimeoutMillis: 5000 });
  pool.on('error', () => {});
  pipelined = new pg.Pool({ database: db, max: 2, pipeline: true });
  app = Fastify();
  await app.register(idempotencyPlugin, { pool, scope: (req) => req.headers['x-account'], limit: 64 });
  const order = async (request, reply) => {
    const { client, key } = request.idempotency;
    await gates.get(request.headers['x-gate']);
    const { rows } = await client.query(
      'INSERT INTO orders (k, item) VALUES ($1, $2) RETURNING id', [key, request.body.item]);
    if (request.body.fail) throw new Error('the handler failed');
    return reply.code(201).header('location', `/orders/${rows[0].id}`).send({ id: rows[0].id });
  };
  app.post('/orders', { config: { idempotency: true } }, order);
  app.post('/documented', { config: { idempotency: { documentation: DOCUMENTATION } } }, order);
  app.post('/legacy', { config: { idempotency: { legacyAnswers: true } } }, order);
  app.post('/statement', { config: { idempotency: { pool: pipelined,
    statement: 'INSERT INTO orders (k, item) VALUES ($1, $2) RETURNING id, item',
    params: (req) => [req.headers['idempotency-key'], req.body.item] } } }, () => {
    throw new Error('the statement form never calls the handler');
  });
  app.get('/alive', async () => ({ ok: true }));
  base = await app.listen({ port: 0, host: '127.0.0.1' });
});
after(async () => {
  await app?.close();
  proxy?.close();
  await pool?.end();
  await pipelined?.end();
  await check?.end();
});

async function post(path, headers, body = '{"item": "book"}') {
  const all = { 'content-type': 'application/json', 'x-account': 'acct', ...headers };
  const res = await fetch(`${base}${path}`, { method: 'POST', body,
    headers: Object.fromEntries(Object.entries(all).filter(([, v]) => v !== undefined)) });
  return { status: res.status, headers: res.headers, bytes: Buffer.from(await res.arrayBuffer()) };
}
const json = (r) => JSON.parse(r.bytes.toString('utf8'));
const ordersOf = async (k) =>
  (await check.query('SELECT id FROM orders WHERE k = $1 ORDER BY id', [k])).rows.map((r) => r.id);

async function waitFor(what, fn, timeoutMs = 30_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

// The vectors' answer name: problem details, or the legacy body; with Link for documentation.
function expectAnswer(got, name, { legacy = false, documentation } = {}) {
  const want = (legacy ? vectors.answers : vectors.problems)[name];
  assert.equal(got.status, want.status, name);
  for (const [header, value] of Object.entries(want.headers))
    assert.equal(got.headers.get(header), value, `${name}: ${header}`);
  assert.deepEqual(json(got), want.body, name);
  assert.equal(got.headers.get('link'), documentation ? `<${documentation}>; rel="describedby"` : null);
}

test('the answers of its own are those of http_answers.json, in every style', async () => {
  for (const [path, style] of [['/orders', {}], ['/documented', { documentation: DOCUMENTATION }],
    ['/legacy', { legacy: true }]]) {
    expectAnswer(await post(path, {}), 'idempotency_key_missing', style);
    expectAnswer(await post(path, { 'idempotency-key': 'a b' }), 'idempotency_key_malformed', style);
    expectAnswer(await post(path, { 'idempotency-key': randomUUID(), 'x-account': undefined }),
      'idempotency_scope_missing', style);
    expectAnswer(await post(path, { 'idempotency-key': randomUUID() }, '{"item": '), 'invalid_json', style);
    expectAnswer(await post(path, { 'idempotency-key': randomUUID() },
      JSON.stringify({ item: 'x'.repeat(100) })), 'body_too_large', style);
    const k = randomUUID();
    assert.equal((await post(path, { 'idempotency-key': k })).status, 201);
    expectAnswer(await post(path, { 'idempotency-key': k }, '{"item": "pen"}'),
      'idempotency_key_reused', style);
  }
});

test('201, then a replay byte for byte the first answer; one order', async () => {
  const k = randomUUID();
  const first = await post('/orders', { 'idempotency-key': k });
  assert.equal(first.status, 201);
  assert.equal(first.headers.get('idempotent-replayed'), null);
  const again = await post('/orders', { 'idempotency-key': k }, '{"item":"book"}');
  assert.equal(again.status, 201);
  assert.equal(again.headers.get('idempotent-replayed'), 'true');
  assert.deepEqual(again.bytes, first.bytes);
  for (const header of ['content-type', 'location', 'content-length'])
    assert.equal(again.headers.get(header), first.headers.get(header), header);
  assert.deepEqual(await ordersOf(k), [json(first).id]);
});

test('409 with Retry-After while the first request runs; then its answer replays', async () => {
  const k = randomUUID();
  let open;
  gates.set(k, new Promise((r) => { open = r; }));
  const first = post('/orders', { 'idempotency-key': k, 'x-gate': k });
  await waitFor('the first request in its transaction', async () => (await check.query(
    `SELECT 1 FROM pg_stat_activity WHERE application_name = $1
       AND state = 'idle in transaction'`, [APP])).rows.length > 0);
  expectAnswer(await post('/orders', { 'idempotency-key': k }), 'idempotency_key_in_use');
  open();
  assert.equal((await first).status, 201);
  assert.equal((await post('/orders', { 'idempotency-key': k })).headers.get('idempotent-replayed'), 'true');
});

test('a handler that throws: Fastify answers 500, nothing is stored, the retry runs', async () => {
  const k = randomUUID();
  assert.equal((await post('/orders', { 'idempotency-key': k }, '{"item": "x", "fail": true}')).status, 500);
  assert.deepEqual(await ordersOf(k), []);
  assert.equal((await post('/orders', { 'idempotency-key': k }, '{"item": "x", "fail": false}')).status, 201);
  assert.equal((await ordersOf(k)).length, 1);
});

test('a burst of one key from 16 clients makes exactly one order', async () => {
  const k = randomUUID();
  const answers = await Promise.all(Array.from({ length: 16 }, () =>
    post('/orders', { 'idempotency-key': k })));
  const statuses = answers.map((a) => a.status);
  assert.ok(statuses.every((s) => s === 201 || s === 409), statuses.join(' '));
  const firsts = answers.filter((a) => a.status === 201 && !a.headers.get('idempotent-replayed'));
  assert.equal(firsts.length, 1, statuses.join(' '));
  assert.deepEqual(await ordersOf(k), [json(firsts[0]).id]);
});

test('the statement form on a pipelined pool: one row, its replay the same bytes', async () => {
  const k = randomUUID();
  const first = await post('/statement', { 'idempotency-key': k });
  assert.equal(first.status, 201);
  assert.equal(json(first).item, 'book');
  const [again, other] = await Promise.all([post('/statement', { 'idempotency-key': k }),
    post('/statement', { 'idempotency-key': k }, '{"item": "pen"}')]);
  assert.equal(again.headers.get('idempotent-replayed'), 'true');
  assert.deepEqual(again.bytes, first.bytes);
  expectAnswer(other, 'idempotency_key_reused');
  assert.equal((await ordersOf(k)).length, 1);
});

test('a backend terminated mid-request: 503, nothing committed, the next request served', async () => {
  const k = randomUUID();
  let open;
  gates.set(k, new Promise((r) => { open = r; }));
  const pending = post('/orders', { 'idempotency-key': k, 'x-gate': k });
  const pid = await waitFor('the request in its transaction', async () => (await check.query(
    `SELECT pid FROM pg_stat_activity WHERE application_name = $1
       AND state = 'idle in transaction'`, [APP])).rows[0]?.pid);
  await check.query('SELECT pg_terminate_backend($1)', [pid]);
  open();
  expectAnswer(await pending, 'database_unavailable');
  assert.deepEqual(await ordersOf(k), []);
  assert.equal((await check.query('SELECT 1 FROM idempotency.keys WHERE key = $1', [k])).rows.length, 0);
  const retry = await post('/orders', { 'idempotency-key': k });
  assert.equal(retry.status, 201);
  assert.deepEqual(await ordersOf(k), [json(retry).id]);
});

test('every connection cut and new ones refused, as in a crash restart: 503, then the first request after is answered', async () => {
  // the pool holds idle connections that the cut breaks
  assert.equal((await post('/orders', { 'idempotency-key': randomUUID() })).status, 201);
  proxy.refuse(true);
  proxy.cut();
  const k = randomUUID();
  expectAnswer(await post('/orders', { 'idempotency-key': k }), 'database_unavailable');
  assert.equal((await fetch(`${base}/alive`)).status, 200);
  proxy.refuse(false);
  const first = await post('/orders', { 'idempotency-key': k });
  assert.equal(first.status, 201);
  assert.deepEqual(await ordersOf(k), [json(first).id]);
});
