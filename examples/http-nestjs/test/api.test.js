// The NestJS example against its running server (ORDERS_URL; test.sh starts it on each adapter)
// and its database (PG*): the rows are counted, so a doubled order cannot pass.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, test } from 'node:test';
import pg from 'pg';

const base = process.env.ORDERS_URL;
const db = new pg.Pool({ max: 2 });
after(() => db.end());

async function order(key, body, token = 'alice-token') {
  const headers = { 'content-type': 'application/json', authorization: `Bearer ${token}` };
  if (key !== undefined) headers['idempotency-key'] = key;
  const res = await fetch(`${base}/orders`, { method: 'POST', headers, body: JSON.stringify(body) });
  return { status: res.status, headers: res.headers, bytes: Buffer.from(await res.arrayBuffer()) };
}
const json = (r) => JSON.parse(r.bytes.toString('utf8'));
const rowsOf = async (key) => (await db.query(
  'SELECT id FROM orders WHERE idempotency_key = $1', [key])).rows.map((r) => Number(r.id));

test('an order, then its retry: the same bytes and Location, one row', async () => {
  const key = randomUUID();
  const first = await order(key, { item: 'widget', quantity: 2, client_sent_at: 1 });
  assert.equal(first.status, 201);
  assert.deepEqual(json(first), { id: json(first).id, item: 'widget', quantity: 2, total_cents: 500 });
  const again = await order(key, { item: 'widget', quantity: 2, client_sent_at: 2 });
  assert.equal(again.status, 201);
  assert.equal(again.headers.get('idempotent-replayed'), 'true');
  assert.deepEqual(again.bytes, first.bytes);
  assert.equal(again.headers.get('location'), `/orders/${json(first).id}`);
  assert.deepEqual(await rowsOf(key), [json(first).id]);
  const read = await fetch(`${base}${again.headers.get('location')}`,
    { headers: { authorization: 'Bearer alice-token' } });
  assert.equal((await read.json()).total_cents, 500);
});

test('the key with another order: 422 problem details, with the documentation link', async () => {
  const key = randomUUID();
  assert.equal((await order(key, { item: 'widget' })).status, 201);
  const reused = await order(key, { item: 'gadget' });
  assert.equal(reused.status, 422);
  assert.equal(reused.headers.get('content-type'), 'application/problem+json');
  assert.equal(json(reused).error, 'idempotency_key_reused');
  assert.match(reused.headers.get('link'), /rel="describedby"$/);
  assert.equal((await rowsOf(key)).length, 1);
});

test('no key: 400; no token: 401 from the guard, before any claim', async () => {
  const missing = await order(undefined, { item: 'widget' });
  assert.equal(missing.status, 400);
  assert.equal(json(missing).error, 'idempotency_key_missing');
  const key = randomUUID();
  assert.equal((await order(key, { item: 'widget' }, 'nobody')).status, 401);
  assert.equal((await order(key, { item: 'widget' })).status, 201); // the key was not taken
});

test('an order the handler refuses (400): nothing stored, the key stays free', async () => {
  const key = randomUUID();
  const refused = await order(key, { item: 'unicorn' });
  assert.equal(refused.status, 400);
  assert.deepEqual(await rowsOf(key), []);
  const fixed = await order(key, { item: 'gizmo' });
  assert.equal(fixed.status, 201);
  assert.equal(fixed.headers.get('idempotent-replayed'), null);
});

test('16 clients with one key: one order, every 201 the same bytes', async () => {
  const key = randomUUID();
  const answers = await Promise.all(Array.from({ length: 16 },
    () => order(key, { item: 'gadget', quantity: 3 })));
  const created = answers.filter((a) => a.status === 201);
  assert.ok(answers.every((a) => a.status === 201 || a.status === 409),
    answers.map((a) => a.status).join(' '));
  assert.ok(created.length >= 1);
  for (const a of created) assert.deepEqual(a.bytes, created[0].bytes);
  assert.deepEqual(await rowsOf(key), [json(created[0]).id]);
});
