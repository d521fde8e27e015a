// The cross-transaction path under failure: a server killed mid-request, and a holder that
// outlives its lease. Uses servers of its own (it kills them) with a short LOCK_TTL.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { OrdersClient, uuidv7 } from '../src/client.js';
import { ALICE, closeDb, keyRecord, ordersOf, postOnce, startServer, waitFor } from './helpers.js';

const env = { LOCK_TTL: '2 seconds' };
const order = { item: 'gizmo', quantity: 1 };
const servers = [];
const start = async (options = {}) => {
  const s = await startServer({ env, ...options });
  servers.push(s);
  return s;
};
after(async () => {
  for (const s of servers) await s.kill();
  await closeDb();
});

test('a server killed mid-request and restarted: 409 until the lease lapses, then one success',
  async () => {
    // A lease long enough that a busy machine cannot let it lapse before the first retry,
    // sent to a second instance that is already up (the restart may take longer).
    const leased = { env: { LOCK_TTL: '10 seconds' } };
    const server = await start(leased);
    const other = await start(leased);
    const key = uuidv7();
    // The claim is committed, then the handler "calls the supplier" for 1 s: kill it then.
    const pending = postOnce(server.url, { token: ALICE.token, key, body: order,
      query: 'external_ms=1000' }).then((r) => ({ r }), (e) => ({ e }));
    const claim = await waitFor(async () => {
      const rec = await keyRecord(ALICE.account, key);
      return rec?.recovery_point === 'supplier_called' ? rec : null;
    }, { what: 'the committed claim' });
    await server.kill('SIGKILL');
    const lost = await pending;
    assert.ok(lost.e, `the request died with the server, got ${lost.r?.status}`);
    assert.equal(claim.state, 'processing');
    assert.equal(claim.attempt, 1);
    const lockedUntil = claim.locked_until.getTime();

    const first = await postOnce(other.url, { token: ALICE.token, key, body: order,
      query: 'external_ms=0' });
    assert.equal(first.status, 409, 'the first retry met the live claim');
    assert.equal(first.body.error, 'idempotency_key_in_use');
    assert.ok(Number(first.headers.get('retry-after')) >= 1, 'Retry-After names the lease');

    const restarted = await start({ ...leased, port: server.port });
    const client = new OrdersClient({ baseUrl: restarted.url, token: ALICE.token });
    const attempts = [];
    const res = await client.createOrder(order, {
      key,
      query: 'external_ms=200',
      maxAttempts: 200,
      baseDelayMs: 100,
      maxDelayMs: 500,
      onAttempt: (a) => attempts.push({ ...a, at: Date.now() }),
    });
    assert.equal(res.status, 201);
    assert.equal(res.replayed, false, 'the retry itself did the work');
    for (const a of attempts.slice(0, -1)) {
      assert.equal(a.status, 409);
      assert.equal(a.response.body.error, 'idempotency_key_in_use');
    }
    assert.ok(attempts.at(-1).at > lockedUntil, 'success only after the lease lapsed');

    const done = await keyRecord(ALICE.account, key);
    assert.equal(done.state, 'completed');
    assert.equal(done.attempt, 2);
    assert.deepEqual(await ordersOf(ALICE.account, key), [res.body.id]);
    const replay = await client.createOrder(order, { key });
    assert.ok(replay.replayed);
    assert.equal(replay.text, res.text);
  });

test('a holder that outlives its lease is fenced off: its complete is refused', async () => {
  const server = await start();
  const key = uuidv7();
  // Attempt 1 takes 3.5 s, longer than the 2 s lease.
  const slow = postOnce(server.url, { token: ALICE.token, key, body: order,
    query: 'external_ms=3500' });
  const claim = await waitFor(() => keyRecord(ALICE.account, key), { what: 'the claim' });
  await waitFor(() => Date.now() > claim.locked_until.getTime() + 100, { what: 'the lease' });
  const takeover = await postOnce(server.url, { token: ALICE.token, key, body: order,
    query: 'external_ms=0' });
  assert.equal(takeover.status, 201);
  assert.equal(takeover.headers.get('idempotent-replayed'), null);
  const late = await slow;
  assert.equal(late.status, 409);
  assert.equal(late.body.error, 'idempotency_key_taken_over');
  const done = await keyRecord(ALICE.account, key);
  assert.equal(done.attempt, 2);
  assert.deepEqual(await ordersOf(ALICE.account, key), [takeover.body.id]);
});
