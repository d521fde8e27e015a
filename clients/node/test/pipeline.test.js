// The statement form on a pool made with pg's `pipeline: true`: concurrent requests' calls of
// execute_once share its connections, each its own transaction, an error confined to its call,
// a lost connection's calls retried on another, and every connection given back when idle.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import express from 'express';
import pg from 'pg';
import { idempotencyMiddleware, lookup } from '../index.js';
import { DEPTH, depthFor, MIN_DEPTH } from '../lib/pipeline.js';
import { connect, databases, serve, until } from './db.js';

const GATE = 4242; // an advisory lock the test holds to keep calls in flight

// The insert waits for the gate (shared, so the calls do not wait for each other) unless the
// body says open, and answers with the backend and the transaction it ran in.
const STATEMENT = `WITH gate AS (SELECT CASE WHEN $4::boolean
    THEN pg_advisory_xact_lock_shared(${GATE})::text END)
  INSERT INTO orders (k, item, qty) SELECT $1, $2, $3::integer FROM gate
  RETURNING id, pg_backend_pid() AS pid, txid_current()::text AS tx`;

let db;
let check;
let pools;
let checkouts = 0;
let arrived = 0;
let closeServer;
let base;

before(async () => {
  ({ source: db } = await databases('pipeline'));
  check = await connect(db);
  await check.query('CREATE TABLE orders (id serial PRIMARY KEY, k text, item text, qty int)');
  // /one: a pool of one connection; /orders: of four
  pools = { one: new pg.Pool({ database: db, max: 1, pipeline: true }),
    orders: new pg.Pool({ database: db, max: 4, pipeline: true }) };
  const connectOf = pools.one.connect.bind(pools.one);
  pools.one.connect = (...args) => {
    checkouts++;
    return connectOf(...args);
  };
  const app = express();
  app.use(express.json({ verify: (req, res, buf) => { req.rawBody = buf; } }));
  app.use((req, res, next) => { arrived++; next(); });
  for (const [path, pool] of Object.entries(pools)) {
    app.post(`/${path}`, idempotencyMiddleware({ pool, scope: 'acct', statement: STATEMENT,
      params: (req) => [req.get('idempotency-key'), req.body.item, req.body.qty,
        req.body.open !== true] }));
  }
  ({ base, close: closeServer } = await serve(app));
});
after(async () => {
  await closeServer?.();
  for (const pool of Object.values(pools ?? {})) await pool.end();
  await check?.end();
});

const post = async (key, body = { item: 'pen', qty: 1 }, path = '/one') => {
  const res = await fetch(`${base}${path}`, { method: 'POST',
    headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key },
    body: JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
};

// The backends of the test database waiting on the gate.
const waiting = async () => (await check.query(`SELECT pid FROM pg_stat_activity
  WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()`,
)).rows.map((r) => r.pid);

// Sends the requests with the gate closed, waits until every one has made its call (it arrived,
// and one turn of the event loop has passed: the middleware does no I/O before the call) and
// `backends` backends wait on the gate, runs whileHeld, then opens the gate; the answers.
async function gated(bodies, whileHeld = async () => {}, backends = 1) {
  await check.query('SELECT pg_advisory_lock($1)', [GATE]);
  let answers;
  try {
    const from = arrived;
    answers = bodies.map(([key, body, path]) => post(key, body, path));
    await until('every request arrived', () => arrived - from === bodies.length);
    await new Promise((resolve) => { setImmediate(resolve); });
    await until(`${backends} backends waiting on the gate`,
      async () => (await waiting()).length === backends);
    await whileHeld();
  } finally {
    await check.query('SELECT pg_advisory_unlock($1)', [GATE]);
  }
  return Promise.all(answers);
}

const ordersOf = async (k) =>
  (await check.query('SELECT count(*)::int AS n FROM orders WHERE k = $1', [k])).rows[0].n;

test('concurrent calls share one connection, each its own transaction', async () => {
  const keys = Array.from({ length: 6 }, () => randomUUID());
  const before_ = checkouts;
  const answers = await gated(keys.map((k) => [k]), async () => {
    // six calls in flight, on the one connection checked out for them
    assert.equal(checkouts - before_, 1);
    assert.equal(pools.one.totalCount, 1);
  });
  assert.deepEqual(answers.map((a) => a.status), keys.map(() => 201));
  assert.equal(new Set(answers.map((a) => a.body.pid)).size, 1);
  assert.equal(new Set(answers.map((a) => a.body.tx)).size, keys.length);
  for (const k of keys) assert.equal(await ordersOf(k), 1);
  const replay = await post(keys[0]);
  assert.equal(replay.status, 201);
  assert.deepEqual(replay.body, answers[0].body);
});

test('with DEPTH calls in flight on a connection, the next goes on another the pool gives',
  async () => {
    const keys = Array.from({ length: DEPTH }, () => randomUUID());
    const quick = randomUUID();
    const answers = await gated(keys.map((k) => [k, undefined, '/orders']), async () => {
      const [stuck] = await waiting();
      const answer = await post(quick, { item: 'pen', qty: 1, open: true }, '/orders');
      assert.equal(answer.status, 201);
      assert.notEqual(answer.body.pid, stuck);
      assert.deepEqual(await waiting(), [stuck]);
    });
    assert.deepEqual(answers.map((a) => a.status), keys.map(() => 201));
    assert.equal(new Set(answers.map((a) => a.body.pid)).size, 1);
    for (const k of [...keys, quick]) assert.equal(await ordersOf(k), 1);
  });

test('the depth a connection takes falls from DEPTH to MIN_DEPTH as more calls are in flight',
  () => {
    for (let n = 1; n <= DEPTH; n++) assert.equal(depthFor(n), DEPTH);
    for (let n = 2; n <= 4 * DEPTH; n++) assert.ok(depthFor(n) <= depthFor(n - 1));
    assert.ok(depthFor(DEPTH + 1) < DEPTH);
    assert.equal(depthFor(2 * DEPTH), MIN_DEPTH);
    assert.equal(depthFor(100 * DEPTH), MIN_DEPTH);
  });

test('with 2 * DEPTH calls in flight, those after the first DEPTH go MIN_DEPTH a connection',
  async () => {
    const keys = Array.from({ length: 2 * DEPTH }, () => randomUUID());
    const answers = await gated(keys.map((k) => [k, undefined, '/orders']), async () => {}, 3);
    assert.deepEqual(answers.map((a) => a.status), keys.map(() => 201));
    const perBackend = new Map();
    for (const a of answers) perBackend.set(a.body.pid, (perBackend.get(a.body.pid) ?? 0) + 1);
    assert.deepEqual([...perBackend.values()].sort((x, y) => x - y),
      [MIN_DEPTH, MIN_DEPTH, DEPTH]);
    for (const k of keys) assert.equal(await ordersOf(k), 1);
  });

test("an error in one call stays with it: the calls around it commit", async () => {
  const [a, bad, c] = [randomUUID(), randomUUID(), randomUUID()];
  const errors = [];
  const original = console.error;
  console.error = (...args) => { errors.push(args.join(' ')); };
  let answers;
  try {
    answers = await gated([[a], [bad, { item: 'pen', qty: 'many' }], [c]]);
  } finally {
    console.error = original;
  }
  assert.deepEqual(answers.map((x) => x.status), [201, 500, 201]);
  assert.equal(answers[0].body.pid, answers[2].body.pid);
  assert.ok(errors.some((l) => l.includes(bad)), errors.join('\n'));
  assert.equal(await ordersOf(a), 1);
  assert.equal(await ordersOf(bad), 0);
  assert.equal(await lookup(check, 'acct', bad), null);
  assert.equal(await ordersOf(c), 1);
});

test("a connection lost with calls in flight: they run again on another; the process lives",
  async () => {
    const keys = Array.from({ length: 3 }, () => randomUUID());
    let killed;
    const answers = await gated(keys.map((k) => [k]), async () => {
      [killed] = await waiting();
      await check.query('SELECT pg_terminate_backend($1)', [killed]);
      // the calls, sent again on a new connection, wait on the gate there
      await until('the calls waiting on a new backend', async () => {
        const now = await waiting();
        return now.length === 1 && now[0] !== killed;
      });
    });
    assert.deepEqual(answers.map((a) => a.status), [201, 201, 201]);
    for (const a of answers) assert.notEqual(a.body.pid, killed);
    for (const k of keys) assert.equal(await ordersOf(k), 1);
  });

test('parameters that look like SQL or array syntax are stored as they were sent', async () => {
  const items = ["'; DROP TABLE orders; --", 'NULL', '{a,b}', 'a"b', 'back\\slash\\', '$1', ''];
  const keys = items.map(() => randomUUID());
  const answers = await Promise.all(items.map((item, i) => post(keys[i], { item, qty: 1 })));
  assert.deepEqual(answers.map((a) => a.status), items.map(() => 201));
  for (const [i, item] of items.entries()) {
    const { rows } = await check.query('SELECT item FROM orders WHERE k = $1', [keys[i]]);
    assert.deepEqual(rows, [{ item }]);
  }
});

test('each connection goes back to the pool once its calls are answered', async () => {
  const open = { item: 'pen', qty: 1, open: true };
  await Promise.all(Array.from({ length: 8 }, (_, i) =>
    post(randomUUID(), open, i % 2 ? '/one' : '/orders')));
  for (const pool of Object.values(pools)) {
    await until('every connection idle', () => pool.idleCount === pool.totalCount);
    assert.equal(pool.waitingCount, 0);
    assert.ok(pool.totalCount >= 1);
  }
});
