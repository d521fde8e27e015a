// Retries and duplicates: the client helper against a slow handler, and a burst of the same
// request.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { replayOf } from '@idempotency/client';
import { OrdersClient, uuidv7 } from '../src/client.js';
import { ALICE, closeDb, keyRecord, ordersOf, postOnce, suiteServer } from './helpers.js';

let server;
before(async () => { server = await suiteServer(); });
after(async () => { await server.kill('SIGTERM'); await closeDb(); });

const order = { item: 'gadget', quantity: 2 };

test('a retry after a client-side timeout gets the original response; one order', async () => {
  const client = new OrdersClient({ baseUrl: server.url, token: ALICE.token });
  const attempts = [];
  // The handler holds its transaction for 1.5 s; the client gives up after 0.5 s.
  const res = await client.createOrder(order, {
    query: 'delay_ms=1500',
    timeoutMs: 500,
    maxAttempts: 10,
    baseDelayMs: 100,
    onAttempt: (a) => attempts.push(a),
  });
  assert.ok(attempts[0].error, 'the first attempt timed out');
  assert.ok(attempts.some((a) => a.status === 409), 'a retry met the request in progress');
  assert.equal(res.status, 201);
  assert.equal(res.replayed, true);
  const stored = await keyRecord(ALICE.account, res.key);
  assert.equal(stored.attempt, 1);
  // the response the first attempt produced (stored with its headers by the middleware)
  assert.deepEqual(res.body, replayOf(stored.response).value);
  assert.deepEqual(await ordersOf(ALICE.account, res.key), [res.body.id]);
});

test('20 concurrent duplicates: one order; the others get 409 or the replay', async () => {
  const key = uuidv7();
  const send = (i) => postOnce(server.url, {
    token: ALICE.token,
    key,
    query: 'delay_ms=300',
    body: { ...order, client_sent_at: new Date(Date.now() + i).toISOString() },
  });
  const results = await Promise.all(Array.from({ length: 20 }, (_, i) => send(i)));
  const replayed = (r) => r.headers.get('idempotent-replayed') === 'true';
  const created = results.filter((r) => r.status === 201 && !replayed(r));
  assert.equal(created.length, 1, `statuses: ${results.map((r) => r.status)}`);
  let conflicts = 0;
  for (const r of results) {
    if (r === created[0]) continue;
    if (r.status === 409) {
      conflicts++;
      assert.equal(r.body.error, 'idempotency_key_in_use');
      assert.match(r.headers.get('retry-after'), /^[1-9][0-9]*$/);
    } else {
      assert.equal(r.status, 201);
      assert.ok(replayed(r));
      assert.equal(r.text, created[0].text);
    }
  }
  assert.ok(conflicts > 0, 'the handler is slow enough for some duplicates to meet it');
  assert.deepEqual(await ordersOf(ALICE.account, key), [created[0].body.id]);

  // Everyone who was told to come back gets the same answer with the client helper.
  const client = new OrdersClient({ baseUrl: server.url, token: ALICE.token, baseDelayMs: 50 });
  const retries = await Promise.all(Array.from({ length: conflicts },
    () => client.createOrder(order, { key })));
  for (const r of retries) {
    assert.equal(r.status, 201);
    assert.ok(r.replayed);
    assert.equal(r.text, created[0].text);
  }
  assert.deepEqual(await ordersOf(ALICE.account, key), [created[0].body.id]);
});

test('the client helper stops at a final answer: 422 is not retried', async () => {
  const client = new OrdersClient({ baseUrl: server.url, token: ALICE.token });
  const first = await client.createOrder(order);
  assert.equal(first.status, 201);
  assert.equal(first.attempts, 1);
  const reused = await client.createOrder({ ...order, quantity: 5 }, { key: first.key });
  assert.equal(reused.status, 422);
  assert.equal(reused.attempts, 1);
  assert.deepEqual(await ordersOf(ALICE.account, first.key), [first.body.id]);
});
