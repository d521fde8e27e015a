// The cases every framework adapter of the middleware passes on a real server and PostgreSQL
// (test/nestjs.test.js, test/fastify.test.js): a replay byte for byte the first answer, 409
// while the first request runs, a burst of one key, the statement form on a pipelined pool, a
// backend terminated mid-request, and every connection cut while new ones are refused (what a
// restart with -m immediate does to the service). And the helpers they share: the answers of
// test/vectors/http_answers.json, a client of the service.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { until } from './db.js';

export const vectors = JSON.parse(readFileSync(
  new URL('../../../test/vectors/http_answers.json', import.meta.url), 'utf8'));
export const DOCUMENTATION = 'https://api.example.com/docs/idempotency';

export const json = (r) => JSON.parse(r.bytes.toString('utf8'));

// The vectors' answer name: problem details, or the legacy body; with Link for documentation.
export function expectAnswer(got, name, { legacy = false, documentation } = {}) {
  const want = (legacy ? vectors.answers : vectors.problems)[name];
  assert.equal(got.status, want.status, name);
  for (const [header, value] of Object.entries(want.headers))
    assert.equal(got.headers.get(header), value, `${name}: ${header}`);
  assert.deepEqual(json(got), want.body, name);
  assert.equal(got.headers.get('link'), documentation ? `<${documentation}>; rel="describedby"` : null);
}

// A POST of JSON to the service at s.base as account "acct" ({ status, headers, bytes }); a
// header given as undefined is left out.
export async function post(s, path, headers, body = '{"item": "book"}') {
  const all = { 'content-type': 'application/json', 'x-account': 'acct', ...headers };
  const res = await fetch(`${s.base}${path}`, { method: 'POST', body,
    headers: Object.fromEntries(Object.entries(all).filter(([, v]) => v !== undefined)) });
  return { status: res.status, headers: res.headers, bytes: Buffer.from(await res.arrayBuffer()) };
}

// The ids of the orders of key k (table orders (id, k, item)).
export const ordersOf = async (s, k) => (await s.check.query(
  'SELECT id FROM orders WHERE k = $1 ORDER BY id', [k])).rows.map((r) => r.id);

// The pid of the service's request (its pool's application_name s.app) once it waits inside
// its transaction.
export async function inTransaction(s) {
  let pid;
  await until('the request in its transaction', async () => {
    ({ pid } = (await s.check.query(`SELECT pid FROM pg_stat_activity WHERE application_name = $1
      AND state = 'idle in transaction'`, [s.app])).rows[0] ?? {});
    return pid !== undefined;
  });
  return pid;
}

// Registers the cases for the service s, whose fields are set before they run: base (its
// address), check (a client of its database), app (its pool's application_name), gates (a Map
// of key => a promise its POST /orders handler waits for, the key in X-Gate), proxy (the Proxy
// its pool connects through). Its routes: POST /orders (the handler form: an order of the
// body's item, 201 with Location), POST /statement (the statement form on a pipelined pool),
// GET /alive.
export function frameworkCases(s) {
  const postTo = (...args) => post(s, ...args);
  const ordersOfKey = (k) => ordersOf(s, k);
  test('201, then a replay byte for byte the first answer; one order', async () => {
    const k = randomUUID();
    const first = await postTo('/orders', { 'idempotency-key': `"${k}"` });
    assert.equal(first.status, 201);
    assert.equal(first.headers.get('idempotent-replayed'), null);
    assert.match(first.headers.get('location'), /^\/orders\/\d+$/);
    const again = await postTo('/orders', { 'idempotency-key': k }, '{"item":"book"}');
    assert.equal(again.status, 201);
    assert.equal(again.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(again.bytes, first.bytes);
    for (const header of ['content-type', 'location', 'content-length'])
      assert.equal(again.headers.get(header), first.headers.get(header), header);
    assert.deepEqual(await ordersOfKey(k), [json(first).id]);
  });

  test('409 with Retry-After while the first request runs; then its answer replays', async () => {
    const k = randomUUID();
    let open;
    s.gates.set(k, new Promise((r) => { open = r; }));
    const first = postTo('/orders', { 'idempotency-key': k, 'x-gate': k });
    await inTransaction(s);
    expectAnswer(await postTo('/orders', { 'idempotency-key': k }), 'idempotency_key_in_use');
    open();
    assert.equal((await first).status, 201);
    const again = await postTo('/orders', { 'idempotency-key': k });
    assert.equal(again.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(await ordersOfKey(k), [json(again).id]);
  });

  test('a burst of one key from 16 clients makes exactly one order', async () => {
    const k = randomUUID();
    const answers = await Promise.all(Array.from({ length: 16 }, () =>
      postTo('/orders', { 'idempotency-key': k })));
    const statuses = answers.map((a) => a.status);
    assert.ok(statuses.every((status) => status === 201 || status === 409), statuses.join(' '));
    const firsts = answers.filter((a) => a.status === 201 && !a.headers.get('idempotent-replayed'));
    assert.equal(firsts.length, 1, statuses.join(' '));
    for (const replay of answers.filter((a) => a.headers.get('idempotent-replayed')))
      assert.deepEqual(replay.bytes, firsts[0].bytes);
    assert.deepEqual(await ordersOfKey(k), [json(firsts[0]).id]);
  });

  test('the statement form on a pipelined pool: one row, its replay the same bytes', async () => {
    const k = randomUUID();
    const first = await postTo('/statement', { 'idempotency-key': k });
    assert.equal(first.status, 201);
    assert.equal(json(first).item, 'book');
    const [again, other] = await Promise.all([postTo('/statement', { 'idempotency-key': k }),
      postTo('/statement', { 'idempotency-key': k }, '{"item": "pen"}')]);
    assert.equal(again.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(again.bytes, first.bytes);
    expectAnswer(other, 'idempotency_key_reused');
    assert.equal((await ordersOfKey(k)).length, 1);
  });

  test('a backend terminated mid-request: 503, nothing committed, the next request served', async () => {
    const k = randomUUID();
    let open;
    s.gates.set(k, new Promise((r) => { open = r; }));
    const pending = postTo('/orders', { 'idempotency-key': k, 'x-gate': k });
    await s.check.query('SELECT pg_terminate_backend($1)', [await inTransaction(s)]);
    open();
    expectAnswer(await pending, 'database_unavailable');
    assert.deepEqual(await ordersOfKey(k), []);
    assert.equal((await s.check.query('SELECT 1 FROM idempotency.keys WHERE key = $1', [k])).rows.length, 0);
    const retry = await postTo('/orders', { 'idempotency-key': k });
    assert.equal(retry.status, 201);
    assert.deepEqual(await ordersOfKey(k), [json(retry).id]);
  });

  test('every connection cut and new ones refused, as in a crash restart: 503, then the first request after is answered', async () => {
    // the pool holds idle connections that the cut breaks
    assert.equal((await postTo('/orders', { 'idempotency-key': randomUUID() })).status, 201);
    s.proxy.refuse(true);
    s.proxy.cut();
    const k = randomUUID();
    try {
      expectAnswer(await postTo('/orders', { 'idempotency-key': k }), 'database_unavailable');
      assert.equal((await fetch(`${s.base}/alive`)).status, 200);
    } finally {
      s.proxy.refuse(false);
    }
    const first = await postTo('/orders', { 'idempotency-key': k });
    assert.equal(first.status, 201);
    assert.deepEqual(await ordersOfKey(k), [json(first).id]);
  });
}
