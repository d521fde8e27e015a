// The Idempotency-Key middleware in a real Express 5 app, and in a plain node:http server.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import { after, before, test } from 'node:test';
import express from 'express';
import pg from 'pg';
import { idempotencyMiddleware, lookup } from '../index.js';
import { assertDatabaseUnavailable, connect, databases, serve } from './db.js';

let pool;
let check;
let closeServer;
let base;
let runs = 0;
// ?hold=1: the handler, once it runs (the key claimed, its transaction open), resolves
// entered and waits for release() (hold(key) sets these up before the request is sent).
const holds = new Map();
function hold(key) {
  const h = {};
  h.entered = new Promise((r) => { h.enter = r; });
  h.released = new Promise((r) => { h.release = r; });
  holds.set(key, h);
  return h;
}

const ordersOf = async (k) =>
  (await check.query('SELECT id FROM orders WHERE k = $1 ORDER BY id', [k])).rows.map((r) => r.id);

before(async () => {
  const { source } = await databases('middleware');
  pool = new pg.Pool({ database: source, max: 8 });
  check = await connect(source);
  await check.query(`CREATE TABLE orders (id serial PRIMARY KEY, k text, item text,
    code text UNIQUE DEFERRABLE INITIALLY DEFERRED)`);

  const app = express();
  app.use(express.json({ verify: (req, res, buf) => { req.rawBody = buf; } }));
  const idempotency = idempotencyMiddleware({
    pool,
    scope: (req) => req.get('x-account') ?? 'anonymous',
    exclude: ['sent_at'],
    lockTtl: '30 seconds',
    keepHeaders: ['ETag'], // beside Content-Type and Location
    replayHeaders: (status, body) => (status === 202 ? { 'X-Replay-Of': String(body.id) } : {}),
  });
  app.post('/orders', idempotency, async (req, res) => {
    runs++;
    const { client, key, attempt } = req.idempotency;
    if (req.query.hold === '1') {
      const h = holds.get(key);
      h.enter();
      await h.released;
    }
    // A body that is not JSON: express.json left it alone, the middleware read it.
    const body = req.is('application/json') ? req.body : { item: req.rawBody.toString() };
    const { rows } = await client.query(
      'INSERT INTO orders (k, item, code) VALUES ($1, $2, $3) RETURNING id', [key, body.item,
        body.code ?? null]);
    if (req.query.forget === '1')
      await client.query('SELECT idempotency.forget($1, $2)', [req.idempotency.scope, key]);
    if (req.query.answer === '503') return res.status(503).json({ error: 'try later' });
    if (req.query.throw === '1') throw new Error('handler failed');
    if (req.query.text === '1') return res.status(202).type('text/plain').send(`order ${rows[0].id} café`);
    if (req.query.accepted === '1') return res.status(202).json({ id: rows[0].id });
    return res.status(201).location(`/orders/${rows[0].id}`)
      .json({ id: rows[0].id, item: body.item, attempt });
  });
  ({ base, close: closeServer } = await serve(app, 'internal_error'));
});
after(async () => {
  await closeServer?.();
  await pool?.end();
  await check?.end();
});

async function post({ key, body = { item: 'widget' }, account = 'acct_1', query = '',
  contentType = 'application/json' }) {
  const headers = { 'Content-Type': contentType, 'X-Account': account };
  if (key !== undefined) headers['Idempotency-Key'] = key;
  const res = await fetch(`${base}/orders${query ? `?${query}` : ''}`, {
    method: 'POST', headers, body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  const json = /json/.test(res.headers.get('content-type') ?? '');
  return { status: res.status, headers: res.headers, text, body: text && json ? JSON.parse(text) : null };
}

test('400 when the key is missing or malformed; nothing runs', async () => {
  const before = runs;
  const missing = await post({});
  assert.equal(missing.status, 400);
  assert.equal(missing.body.error, 'idempotency_key_missing');
  for (const key of ['x'.repeat(256), 'has space', 'caf\u00e9']) {
    const res = await post({ key });
    assert.equal(res.status, 400);
    assert.equal(res.body.error, 'idempotency_key_malformed');
  }
  assert.equal(runs, before);
});

test('a text answer replays as it was; replayHeaders adds to a replay', async () => {
  const key = randomUUID();
  const first = await post({ key, query: 'text=1' });
  assert.equal(first.status, 202);
  const again = await post({ key, query: 'text=1' });
  assert.equal(again.headers.get('idempotent-replayed'), 'true');
  assert.equal(again.status, 202);
  assert.equal(again.text, first.text);
  assert.match(again.text, /^order \d+ café$/);
  assert.equal(again.headers.get('content-type'), first.headers.get('content-type'));
  assert.equal(again.headers.get('content-length'), first.headers.get('content-length'));
  const json = randomUUID();
  const accepted = await post({ key: json, query: 'accepted=1' });
  assert.equal(accepted.headers.get('x-replay-of'), null);
  const replayed = await post({ key: json, query: 'accepted=1' });
  assert.equal(replayed.headers.get('x-replay-of'), String(accepted.body.id));
});

test('201, then the stored answer replayed with Idempotent-Replayed: true', async () => {
  const key = randomUUID();
  const before = runs;
  const first = await post({ key, body: { item: 'widget', sent_at: 1 } });
  assert.equal(first.status, 201);
  assert.equal(first.headers.get('idempotent-replayed'), null);
  assert.equal(first.headers.get('location'), `/orders/${first.body.id}`);
  const again = await post({ key: key.toUpperCase(), body: { item: 'widget', sent_at: 2 } });
  assert.equal(again.status, 201);
  assert.equal(again.headers.get('idempotent-replayed'), 'true');
  assert.deepEqual(again.body, first.body);
  assert.equal(again.headers.get('location'), `/orders/${first.body.id}`);
  assert.equal(runs, before + 1, 'the handler ran once');
  assert.deepEqual(await ordersOf(key), [first.body.id]);
  for (const name of ['content-type', 'location', 'etag'])
    assert.equal(again.headers.get(name), first.headers.get(name), `the replay's ${name}`);
  assert.equal(again.text, first.text);
  const rec = await lookup(check, 'acct_1', key);
  assert.equal(rec.statusCode, 201);
  assert.deepEqual(rec.response, { idempotency_http: 1, body: first.body, headers: {
    'content-type': first.headers.get('content-type'), location: first.headers.get('location'),
    etag: first.headers.get('etag') } });
  // another account with the same key is another request
  const other = await post({ key, account: 'acct_2' });
  assert.equal(other.status, 201);
  assert.notEqual(other.body.id, first.body.id);
});

test('422 when the key is reused with another body', async () => {
  const key = randomUUID();
  assert.equal((await post({ key })).status, 201);
  const res = await post({ key, body: { item: 'gadget' } });
  assert.equal(res.status, 422);
  assert.equal(res.body.error, 'idempotency_key_reused');
  assert.equal((await ordersOf(key)).length, 1);
});

test('a body that is not JSON is fingerprinted by its bytes: another body is a 422, not a replay', async () => {
  const key = randomUUID();
  const first = await post({ key, body: 'plain widget', contentType: 'text/plain' });
  assert.equal(first.status, 201);
  assert.equal(first.body.item, 'plain widget');
  const again = await post({ key, body: 'plain widget', contentType: 'text/plain' });
  assert.equal(again.status, 201);
  assert.equal(again.headers.get('idempotent-replayed'), 'true');
  const other = await post({ key, body: 'plain gadget', contentType: 'text/plain' });
  assert.equal(other.status, 422);
  assert.equal(other.body.error, 'idempotency_key_reused');
  assert.equal((await ordersOf(key)).length, 1);
});

test('a scope over 255 bytes is a 400, not a 500; nothing runs', async () => {
  const before = runs;
  const res = await post({ key: randomUUID(), account: 'a'.repeat(256) });
  assert.equal(res.status, 400);
  assert.equal(res.body.error, 'idempotency_scope_malformed');
  assert.equal(runs, before);
});

test('422 for a UUIDv7 key older than the retention window', async () => {
  const res = await post({ key: '01890a5d-ac96-774b-bcce-b302099a8057' });
  assert.equal(res.status, 422);
  assert.equal(res.body.error, 'idempotency_key_too_old');
});

test('409 with Retry-After while the first request runs; one order', async () => {
  const key = randomUUID();
  const h = hold(key);
  const slow = post({ key, query: 'hold=1' });
  await h.entered; // the first request holds the key: its handler runs
  const dup = await post({ key }).finally(h.release);
  assert.equal(dup.status, 409);
  assert.equal(dup.body.error, 'idempotency_key_in_use');
  assert.match(dup.headers.get('retry-after'), /^[1-9][0-9]*$/);
  assert.equal((await slow).status, 201);
  assert.equal((await ordersOf(key)).length, 1);
});

test('a 5xx answer is sent but not stored: the handler\'s writes roll back, the retry runs', async () => {
  const key = randomUUID();
  const failed = await post({ key, query: 'answer=503' });
  assert.equal(failed.status, 503);
  assert.deepEqual(await ordersOf(key), []);
  assert.equal(await lookup(check, 'acct_1', key), null);
  const retry = await post({ key });
  assert.equal(retry.status, 201);
  assert.equal(retry.headers.get('idempotent-replayed'), null);
});

test('a handler that throws: Express answers 500, nothing is stored', async () => {
  const key = randomUUID();
  const res = await post({ key, query: 'throw=1' });
  assert.equal(res.status, 500);
  assert.deepEqual(await ordersOf(key), []);
  assert.equal(await lookup(check, 'acct_1', key), null);
  assert.equal((await post({ key })).status, 201);
});

test('the answer waits for the commit: a commit that fails turns 201 into 500', async () => {
  const code = `c-${randomUUID()}`;
  assert.equal((await post({ key: randomUUID(), body: { item: 'a', code } })).status, 201);
  const key = randomUUID();
  // The deferred unique constraint fails at COMMIT, after the handler has answered 201.
  const res = await post({ key, body: { item: 'b', code } });
  assert.equal(res.status, 500);
  assert.equal(res.headers.get('location'), null);
  assert.deepEqual(await ordersOf(key), []);
  assert.equal(await lookup(check, 'acct_1', key), null, 'the claim rolled back too');
});

test('a complete that fails turns 201 into 500: the COMMIT is skipped, nothing is stored', async () => {
  const key = randomUUID();
  // The handler forgets its own claim: complete then fails, and the COMMIT sent with it is
  // skipped by the server.
  const res = await post({ key, query: 'forget=1' });
  assert.equal(res.status, 500);
  assert.equal(res.headers.get('location'), null);
  assert.equal(res.body.error, 'internal_error');
  assert.deepEqual(await ordersOf(key), []);
  assert.equal(await lookup(check, 'acct_1', key), null);
  assert.equal((await post({ key })).status, 201, 'the retry starts afresh');
});

test('a key with quotes and backslashes: stored and replayed as it is', async () => {
  const key = `it's\\${randomUUID()}'--`;
  const first = await post({ key });
  assert.equal(first.status, 201);
  const replay = await post({ key });
  assert.equal(replay.headers.get('idempotent-replayed'), 'true');
  assert.deepEqual(replay.body, first.body);
  assert.equal((await lookup(check, 'acct_1', key)).state, 'completed');
  assert.equal((await ordersOf(key)).length, 1);
});

test('503 + Retry-After when the database is unreachable; the app keeps serving', async () => {
  const down = new pg.Pool({ host: '127.0.0.1', port: 1, connectionTimeoutMillis: 2000 });
  const app = express();
  app.post('/orders', idempotencyMiddleware({ pool: down, scope: 'down' }),
    () => assert.fail('the handler ran'));
  const served = await serve(app);
  try {
    for (let i = 0; i < 2; i++) {
      await assertDatabaseUnavailable(await fetch(`${served.base}/orders`, {
        method: 'POST', headers: { 'Idempotency-Key': randomUUID(), 'Content-Type': 'application/json' },
        body: '{"item": "w"}' }));
    }
  } finally {
    await served.close();
    await down.end();
  }
});

test('plain node:http: the middleware composes with an async handler', async () => {
  const mw = idempotencyMiddleware({ pool, scope: 'plain' });
  const handled = [];
  const plain = http.createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    req.rawBody = Buffer.concat(chunks);
    try {
      await mw(req, res, async (err) => {
        if (err) throw err;
        if (req.url === '/fail') throw new Error('handler failed');
        const { rows } = await req.idempotency.client.query(
          'INSERT INTO orders (k, item) VALUES ($1, $2) RETURNING id', [req.idempotency.key, 'p']);
        res.writeHead(201, { 'Content-Type': 'application/json' });
        res.write('{"id":');
        res.end(`${rows[0].id}}`);
      });
      handled.push('ok');
    } catch (err) {
      handled.push(err.message);
      res.writeHead(500).end();
    }
  });
  await new Promise((r) => { plain.listen(0, '127.0.0.1', r); });
  const url = `http://127.0.0.1:${plain.address().port}`;
  const send = (path, key) => fetch(url + path, { method: 'POST', headers: { 'Idempotency-Key': key },
    body: '{"n": 1.10}' });
  try {
    const notJson = await fetch(`${url}/ok`, { method: 'POST', body: '{"n": NaN}',
      headers: { 'Idempotency-Key': randomUUID(), 'Content-Type': 'application/json' } });
    assert.equal(notJson.status, 400);
    assert.equal((await notJson.json()).error, 'invalid_json');
    const key = randomUUID();
    const failed = await send('/fail', key);
    assert.equal(failed.status, 500);
    assert.equal(await lookup(check, 'plain', key), null);
    const first = await send('/ok', key);
    assert.equal(first.status, 201);
    const text = await first.text();
    const replay = await send('/ok', key);
    assert.equal(replay.headers.get('idempotent-replayed'), 'true');
    assert.equal(await replay.text(), text);
    // A replay is sent before its ROLLBACK: the middleware settles once that is over.
    while (handled.length < 4) await new Promise((r) => { setImmediate(r); });
    assert.deepEqual(handled, ['ok', 'handler failed', 'ok', 'ok']); // the 400 is answered by the middleware
    assert.equal((await ordersOf(key)).length, 1);
  } finally {
    await new Promise((r) => { plain.close(r); });
  }
});
