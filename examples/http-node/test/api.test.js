// Status codes of POST /orders and GET /orders/by-key/:key, over real HTTP.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, test } from 'node:test';
import { uuidv7 } from '../src/client.js';
import {
  ALICE, BOB, closeDb, countOrders, keyRecord, ordersOf, postOnce, suiteServer,
} from './helpers.js';

let server;
before(async () => { server = await suiteServer(); });
after(async () => { await server.kill('SIGTERM'); await closeDb(); });

const order = { item: 'widget', quantity: 3, note: 'api test' };
const post = (options) => postOnce(server.url, { token: ALICE.token, body: order, ...options });

test('401 without a known bearer token', async () => {
  const key = uuidv7();
  const none = await post({ token: undefined, key });
  assert.equal(none.status, 401);
  assert.equal(none.headers.get('www-authenticate'), 'Bearer');
  assert.equal((await post({ token: 'nobody', key })).status, 401);
  assert.equal(await countOrders(ALICE.account, key), 0);
});

test('400 when the Idempotency-Key is missing or malformed', async () => {
  const missing = await post({});
  assert.equal(missing.status, 400);
  assert.equal(missing.body.error, 'idempotency_key_missing');
  for (const key of ['x'.repeat(256), 'has space', 'caf\u00e9', '""']) {
    const res = await post({ key });
    assert.equal(res.status, 400, `key ${JSON.stringify(key)}`);
    assert.equal(res.body.error, 'idempotency_key_malformed');
  }
  assert.equal((await post({ key: 'x'.repeat(255) })).status, 201); // the longest token
});

test('400 for a body that is not a valid order, and nothing is stored', async () => {
  const key = uuidv7();
  assert.equal((await post({ key, body: '{not json' })).status, 400);
  const bad = await post({ key, body: { item: 'widget', quantity: 0 } });
  assert.equal(bad.status, 400);
  assert.equal(bad.body.error, 'invalid_order');
  assert.equal(await keyRecord(ALICE.account, key), undefined);
  // The key is still free for a valid request.
  assert.equal((await post({ key })).status, 201);
});

test('201, then the stored response replayed byte for byte', async () => {
  const key = uuidv7();
  const first = await post({ key, body: { ...order, client_sent_at: '2030-01-01T00:00:00Z' } });
  assert.equal(first.status, 201);
  assert.equal(first.headers.get('idempotent-replayed'), null);
  assert.equal(first.body.idempotency_key, key);
  assert.equal(first.body.total_cents, 750);
  assert.equal(first.headers.get('location'), `/orders/${first.body.id}`);
  // client_sent_at is left out of the fingerprint: a retry that sets it anew is the same request
  const again = await post({ key, body: { ...order, client_sent_at: '2030-01-01T00:00:09Z' } });
  assert.equal(again.status, 201);
  assert.equal(again.headers.get('idempotent-replayed'), 'true');
  assert.equal(again.text, first.text);
  assert.deepEqual(await ordersOf(ALICE.account, key), [first.body.id]);
});

test('a UUID key is case-insensitive; the quoted form of the draft is accepted', async () => {
  const key = uuidv7();
  const first = await post({ key: key.toUpperCase() });
  assert.equal(first.status, 201);
  const quoted = await post({ key: `"${key}"` });
  assert.equal(quoted.headers.get('idempotent-replayed'), 'true');
  assert.equal(quoted.text, first.text);
  assert.equal(await countOrders(ALICE.account, key), 1);
});

test('422 when the key is reused with another body', async () => {
  const key = uuidv7();
  assert.equal((await post({ key })).status, 201);
  const other = await post({ key, body: { ...order, quantity: 4 } });
  assert.equal(other.status, 422);
  assert.equal(other.body.error, 'idempotency_key_reused');
  assert.equal(await countOrders(ALICE.account, key), 1);
});

test('two accounts using the same key get two orders', async () => {
  const key = uuidv7();
  const alice = await post({ key });
  const bob = await post({ key, token: BOB.token });
  assert.equal(alice.status, 201);
  assert.equal(bob.status, 201);
  assert.equal(bob.headers.get('idempotent-replayed'), null);
  assert.notEqual(alice.body.id, bob.body.id);
  assert.equal(bob.body.account, BOB.account);
  assert.deepEqual(await ordersOf(ALICE.account, key), [alice.body.id]);
  assert.deepEqual(await ordersOf(BOB.account, key), [bob.body.id]);
});

test('422 for a UUIDv7 key older than the retention window', async () => {
  const key = uuidv7(Date.now() - 3 * 24 * 3600 * 1000);
  const res = await post({ key });
  assert.equal(res.status, 422);
  assert.equal(res.body.error, 'idempotency_key_too_old');
  assert.equal(await countOrders(ALICE.account, key), 0);
});

test('GET /orders/by-key/:key shows the record of the caller\'s account only', async () => {
  const key = `order-${uuidv7()}`;
  const created = await post({ key });
  const get = (token, k = key) => fetch(`${server.url}/orders/by-key/${encodeURIComponent(k)}`,
    { headers: { Authorization: `Bearer ${token}` } });
  const res = await get(ALICE.token);
  assert.equal(res.status, 200);
  const record = await res.json();
  assert.equal(record.key, key);
  assert.equal(record.state, 'completed');
  assert.equal(record.status_code, 201);
  assert.deepEqual(record.response, created.body);
  assert.equal(record.response_headers.location, created.headers.get('location'));
  assert.equal(record.attempt, 1);
  assert.match(record.request_hash, /^[0-9a-f]{64}$/);
  assert.deepEqual(record.order_ids, [created.body.id]);
  assert.equal((await get(BOB.token)).status, 404);
  assert.equal((await get(ALICE.token, uuidv7())).status, 404);
  assert.equal((await fetch(`${server.url}/orders/by-key/${key}`)).status, 401);
});

test('502 from a failed external call releases the key with fail; the retry succeeds', async () => {
  const key = uuidv7();
  const failed = await post({ key, query: 'external_ms=0&external_error=1' });
  assert.equal(failed.status, 502);
  assert.equal(failed.headers.get('retry-after'), '1');
  const released = await keyRecord(ALICE.account, key);
  assert.equal(released.state, 'failed');
  assert.deepEqual(released.last_error, { error: 'supplier_unavailable' });
  assert.equal(await countOrders(ALICE.account, key), 0);

  const retry = await post({ key, query: 'external_ms=0' });
  assert.equal(retry.status, 201);
  assert.equal(retry.headers.get('idempotent-replayed'), null);
  const done = await keyRecord(ALICE.account, key);
  assert.equal(done.state, 'completed');
  assert.equal(done.attempt, 2);
  assert.equal(done.recovery_point, 'supplier_called');
  assert.deepEqual(await ordersOf(ALICE.account, key), [retry.body.id]);
  const replay = await post({ key });
  assert.equal(replay.headers.get('idempotent-replayed'), 'true');
  assert.equal(replay.text, retry.text);
});

test('the order page and the helper it imports are served as they are', async () => {
  const page = await fetch(`${server.url}/`);
  assert.equal(page.status, 200);
  assert.match(page.headers.get('content-type'), /^text\/html/);
  assert.match(await page.text(), /import \{ IdempotentAction, [^}]*\} from '\.\/action\.js'/);
  const helper = await fetch(`${server.url}/action.js`);
  assert.match(helper.headers.get('content-type'), /^text\/javascript/);
  assert.equal(await helper.text(),
    fs.readFileSync(new URL('../../../clients/node/lib/action.js', import.meta.url), 'utf8'));
  assert.equal((await fetch(`${server.url}/action.js`, { method: 'POST' })).status, 405);
});
