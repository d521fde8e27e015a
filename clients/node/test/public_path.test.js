// The public path: with the fast path off (IDEMPOTENCY_PG_FAST_PATH=off here; on a pg release
// it is not tested with, by itself), the middleware, its statement form on a plain and on a
// pipelined pool, and the key calls touch nothing of a pg client but its public API: each
// client is handed over behind a guard that records any other property read.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import express from 'express';
import pg from 'pg';

// before any module of the package is loaded: it reads the setting once
process.env.IDEMPOTENCY_PG_FAST_PATH = 'off';
const { databases, serve } = await import('./db.js');
const lib = await import('../index.js');
const { FAST_PATH } = await import('../lib/connection.js');

// The public API of a pg.Client that the client package may use.
const PUBLIC = new Set(['query', 'on', 'once', 'off', 'removeListener', 'listeners',
  'listenerCount', 'emit', 'release', 'getTransactionStatus', 'getTypeParser', 'pipeline',
  'then']);
const touched = new Set();

function guarded(client) {
  return new Proxy(client, {
    get(target, name) {
      if (typeof name === 'string' && !PUBLIC.has(name)) touched.add(name);
      const value = Reflect.get(target, name, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

function guardedPool(options) {
  const pool = new pg.Pool(options);
  return {
    options: pool.options,
    on: (...a) => pool.on(...a),
    listenerCount: (...a) => pool.listenerCount(...a),
    connect: async () => guarded(await pool.connect()),
    end: () => pool.end(),
  };
}

let pools;
let base;
let closeServer;

before(async () => {
  const { source } = await databases('public_path');
  pools = { plain: guardedPool({ database: source, max: 4 }),
    pipelined: guardedPool({ database: source, max: 4, pipeline: true }) };
  const admin = await pools.plain.connect();
  await admin.query('CREATE TABLE orders (id serial PRIMARY KEY, k text, item text)');
  admin.release();
  const app = express();
  app.use(express.json({ verify: (req, res, buf) => { req.rawBody = buf; } }));
  app.post('/claim', lib.idempotencyMiddleware({ pool: pools.plain, scope: 'acct' }),
    async (req, res) => {
      const { rows } = await req.idempotency.client.query(
        'INSERT INTO orders (k, item) VALUES ($1, $2) RETURNING id', [req.idempotency.key,
          req.body.item]);
      res.status(201).json({ id: rows[0].id });
    });
  for (const kind of ['plain', 'pipelined']) {
    app.post(`/${kind}`, lib.idempotencyMiddleware({ pool: pools[kind], scope: 'acct',
      statement: 'INSERT INTO orders (k, item) VALUES ($1, $2) RETURNING id, item',
      params: (req) => [req.get('idempotency-key'), req.body.item] }));
  }
  ({ base, close: closeServer } = await serve(app));
});
after(async () => {
  await closeServer?.();
  for (const pool of Object.values(pools ?? {})) await pool.end();
});

const post = async (path, key, item = 'pen') => {
  const res = await fetch(`${base}${path}`, { method: 'POST', body: JSON.stringify({ item }),
    headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key } });
  return { status: res.status, replayed: res.headers.get('idempotent-replayed'),
    body: await res.text() };
};

test('the fast path is off', () => {
  assert.equal(FAST_PATH, false);
});

for (const path of ['/claim', '/plain', '/pipelined']) {
  test(`${path}: a new key, its replays and a reused key, through pg's public API only`,
    async () => {
      touched.clear();
      const key = randomUUID();
      const answers = await Promise.all([1, 2, 3].map(() => post(path, key)));
      const first = answers.find((a) => a.status === 201 && a.replayed === null);
      assert.ok(first, JSON.stringify(answers));
      for (const a of answers)
        assert.ok([201, 409].includes(a.status), JSON.stringify(a));
      const replay = await post(path, key);
      assert.deepEqual([replay.status, replay.replayed, replay.body], [201, 'true', first.body]);
      assert.equal((await post(path, key, 'other')).status, 422);
      assert.deepEqual([...touched], [], 'properties of pg clients read off their public API');
    });
}

test('the key calls and the helpers, through pg\'s public API only', async () => {
  touched.clear();
  const client = await pools.plain.connect();
  try {
    const key = randomUUID();
    const r = await lib.executeOnce(client, 'acct', key,
      'INSERT INTO orders (k, item) VALUES ($1, $2) RETURNING id', [key, 'cup']);
    assert.equal(r.outcome, 'new');
    assert.equal((await lib.executeOnce(client, 'acct', key, 'SELECT 1', [])).outcome, 'replay');
    const other = randomUUID();
    const done = await lib.runOnce(client, { scope: 'acct', key: other },
      async () => ({ statusCode: 201, response: { ok: true } }));
    assert.equal(done.statusCode, 201);
    assert.equal((await lib.lookup(client, 'acct', other)).state, 'completed');
    assert.equal(await lib.forget(client, 'acct', other), true);
    assert.deepEqual([...touched], [], 'properties of pg clients read off their public API');
  } finally {
    client.release();
  }
});
