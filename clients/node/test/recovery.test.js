// After the database comes back, the first request through the middleware succeeds, and a pool
// given without an 'error' listener does not end the process when its idle connections break.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import http from 'node:http';
import { after, before, test } from 'node:test';
import express from 'express';
import pg from 'pg';
import { idempotencyMiddleware } from '../index.js';
import { connect, databases, until } from './db.js';

const APP = 'recovery_pool';
let source;
let check;

before(async () => {
  ({ source } = await databases('recovery'));
  check = await connect(source);
  await check.query('CREATE TABLE orders (id serial PRIMARY KEY, k text, item text)');
});
after(async () => { await check?.end(); });

// An Express app with the middleware on `pool`; returns its base URL and a close function.
async function serve(pool) {
  const app = express();
  app.use(express.json());
  app.post('/orders', idempotencyMiddleware({ pool, scope: 'acct_1' }), async (req, res) => {
    const { rows } = await req.idempotency.client.query(
      'INSERT INTO orders (k, item) VALUES ($1, $2) RETURNING id', [req.idempotency.key, req.body.item]);
    res.status(201).json({ id: rows[0].id });
  });
  const server = http.createServer(app);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    post: (key) => fetch(`http://127.0.0.1:${server.address().port}/orders`, {
      method: 'POST', body: JSON.stringify({ item: 'widget' }),
      headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key },
    }),
    close: () => new Promise((r) => { server.close(r); }),
  };
}

const backends = async () => (await check.query(
  'SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1', [APP])).rows[0].n;

test('a pool without an error listener gets one: its idle connections breaking end nothing', async () => {
  const pool = new pg.Pool({ database: source, max: 4, application_name: APP });
  assert.equal(pool.listenerCount('error'), 0);
  const app = await serve(pool);
  assert.equal(pool.listenerCount('error'), 1, 'the middleware listens on the pool');
  const logged = [];
  const consoleError = console.error;
  console.error = (...args) => { logged.push(args.join(' ')); };
  try {
    const answers = await Promise.all([1, 2, 3, 4].map(() => app.post(randomUUID())));
    assert.deepEqual(answers.map((r) => r.status), [201, 201, 201, 201]);
    await until('all released', async () => pool.totalCount > 0 && pool.idleCount === pool.totalCount);
    const idle = pool.idleCount;
    // The server ends the idle connections (as a restart does): each one's 'error' reaches the
    // pool, which re-emits it; without a listener the process would end here.
    await check.query(
      'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1', [APP]);
    await until('dropped by the pool', async () => pool.totalCount === 0);
    await until('gone from the server', async () => (await backends()) === 0);
    assert.equal(logged.filter((l) => /idle connection of the pool failed/.test(l)).length, idle);
    // and the next request is served, on a new connection
    assert.equal((await app.post(randomUUID())).status, 201);
  } finally {
    console.error = consoleError;
    await app.close();
    await pool.end();
  }
});

test("the application's own error listener is left alone", async () => {
  const pool = new pg.Pool({ database: source, max: 1 });
  const mine = () => {};
  pool.on('error', mine);
  const app = await serve(pool);
  assert.deepEqual(pool.listeners('error'), [mine]);
  await app.close();
  await pool.end();
});

test('a connection that died unnoticed fails the claim: the request is tried on another', async () => {
  const pool = new pg.Pool({ database: source, max: 2, application_name: APP });
  let stale = 0;
  // A pool whose next connection has died since it was last used (its socket is gone, which
  // its client has not seen yet): what a pool holds after the server restarted.
  const wrapper = {
    connect: async () => {
      const client = await pool.connect();
      if (stale > 0) {
        stale--;
        client.connection.stream.destroy();
      }
      return client;
    },
    on: (...args) => pool.on(...args),
    listenerCount: (name) => pool.listenerCount(name),
  };
  const app = await serve(wrapper);
  try {
    stale = 1;
    const key = randomUUID();
    const first = await app.post(key);
    assert.equal(first.status, 201, await first.text());
    assert.equal(stale, 0, 'the first connection was the dead one');
    const { rows } = await check.query('SELECT count(*)::int AS n FROM orders WHERE k = $1', [key]);
    assert.equal(rows[0].n, 1);
    // Two in a row: tried once more, not for ever; the answer is 503, and the app still serves.
    stale = 2;
    const twice = await app.post(randomUUID());
    assert.equal(twice.status, 503);
    assert.equal(twice.headers.get('retry-after'), '1');
    assert.equal((await app.post(randomUUID())).status, 201);
  } finally {
    await app.close();
    await pool.end();
  }
});
