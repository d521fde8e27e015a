// The browser-safe helper (lib/action.js): one key per action, retries with backoff under a
// budget, Retry-After, final answers, replays. Against scripted fetch answers and a real
// node:http server (timeouts, connections reset).
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, test } from 'node:test';
import {
  backoffDelay, IdempotentAction, idempotentFetch, IdempotentFetchError, isRetryableStatus,
  retryAfterMs, uuidv7, uuidv7Time,
} from '../lib/action.js';
import * as fromIndex from '../index.js';

// A fetch that plays `script` (one entry per call: a Response init, or an Error to throw) and
// records every request it was given.
function scripted(script) {
  const calls = [];
  const fetch = async (url, init) => {
    calls.push({ url, method: init.method, headers: new Headers(init.headers), body: init.body });
    const step = script[Math.min(calls.length, script.length) - 1];
    if (step instanceof Error) throw step;
    return new Response(step.body ?? '{}', {
      status: step.status,
      headers: { 'Content-Type': 'application/json', ...step.headers },
    });
  };
  return { fetch, calls };
}
const fast = { baseDelayMs: 1, maxDelayMs: 5 };

test('uuidv7: version 7, variant 10, the time read back; unique', () => {
  const at = Date.UTC(2026, 0, 2, 3, 4, 5, 678);
  const key = uuidv7(at);
  assert.match(key, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  assert.equal(uuidv7Time(key), at);
  assert.equal(uuidv7Time(key.toUpperCase()), at);
  assert.equal(uuidv7Time(crypto.randomUUID()), null, 'a UUIDv4 has no time');
  assert.equal(uuidv7Time('order-1'), null);
  assert.equal(new Set(Array.from({ length: 1000 }, () => uuidv7())).size, 1000);
  assert.throws(() => uuidv7(-1), RangeError);
  assert.throws(() => uuidv7(2 ** 48), RangeError);
  assert.equal(fromIndex.uuidv7, uuidv7, 'the package entry exports the same helper');
});

test('an action makes its key once; toJSON and from keep key and creation time', () => {
  const before = Date.now();
  const action = new IdempotentAction();
  assert.ok(action.createdAt >= before && action.createdAt <= Date.now());
  assert.equal(uuidv7Time(action.key), action.createdAt);
  const restored = IdempotentAction.from(JSON.stringify(action));
  assert.equal(restored.key, action.key);
  assert.equal(restored.createdAt, action.createdAt);
  assert.notEqual(new IdempotentAction().key, action.key, 'a second action, a second key');
  const custom = new IdempotentAction({ key: 'order-17' });
  assert.ok(custom.createdAt >= before, 'a key without a time: made now');
  assert.throws(() => new IdempotentAction({ key: '' }), TypeError);
});

test('network errors and 5xx are retried with the same key; a replay is reported', async () => {
  const { fetch, calls } = scripted([
    new TypeError('fetch failed'),
    { status: 503, body: '{"error":"unavailable"}' },
    { status: 502 },
    { status: 201, body: '{"id":7}', headers: { 'Idempotent-Replayed': 'true' } },
  ]);
  const action = new IdempotentAction();
  const attempts = [];
  const r = await action.fetch('http://orders.test/orders', {
    fetch, ...fast, body: (n) => ({ item: 'widget', attempt: n }),
    onAttempt: (a) => attempts.push(a),
  });
  assert.equal(r.status, 201);
  assert.deepEqual(r.body, { id: 7 });
  assert.equal(r.replayed, true);
  assert.equal(r.attempts, 4);
  assert.equal(r.key, action.key);
  assert.deepEqual(calls.map((c) => c.headers.get('idempotency-key')), Array(4).fill(action.key));
  assert.deepEqual(calls.map((c) => JSON.parse(c.body).attempt), [1, 2, 3, 4]);
  assert.ok(calls.every((c) => c.method === 'POST' &&
    c.headers.get('content-type') === 'application/json'));
  assert.ok(attempts[0].error instanceof TypeError);
  assert.deepEqual(attempts.map((a) => [a.status, a.final]),
    [[undefined, false], [503, false], [502, false], [201, true]]);
  assert.ok(attempts.slice(0, 3).every((a) => a.delayMs >= 0 && a.delayMs <= fast.maxDelayMs));
});

test('422 and other 4xx are final: one attempt', async () => {
  for (const status of [422, 400, 401, 404]) {
    const { fetch, calls } = scripted([{ status, body: '{"error":"idempotency_key_reused"}' }]);
    const r = await idempotentFetch('http://orders.test/orders', { fetch, body: 'x', ...fast });
    assert.equal(r.status, status);
    assert.equal(r.ok, false);
    assert.equal(r.attempts, 1);
    assert.equal(calls.length, 1);
    assert.equal(calls[0].body, 'x', 'a string body is sent as it is');
  }
});

test('409 with Retry-After is waited for; 409 without it is final', async () => {
  const { fetch, calls } = scripted([
    { status: 409, headers: { 'Retry-After': '1' }, body: '{"error":"idempotency_key_in_use"}' },
    { status: 201, body: '{"id":1}' },
  ]);
  const attempts = [];
  const started = Date.now();
  const r = await idempotentFetch('http://orders.test/orders', {
    fetch, ...fast, onAttempt: (a) => attempts.push(a),
  });
  assert.equal(r.status, 201);
  assert.equal(r.replayed, false);
  assert.equal(calls.length, 2);
  assert.equal(attempts[0].retryAfterMs, 1000);
  assert.equal(attempts[0].delayMs, 1000, 'Retry-After wins over the (shorter) backoff');
  assert.ok(Date.now() - started >= 1000, 'the retry came after Retry-After');

  const conflict = scripted([{ status: 409, body: '{"error":"conflict"}' }]);
  const c = await idempotentFetch('http://orders.test/orders', { fetch: conflict.fetch, ...fast });
  assert.equal(c.status, 409);
  assert.equal(conflict.calls.length, 1);
});

test('the budget ends the retries: IdempotentFetchError with the last answer', async () => {
  const { fetch, calls } = scripted([{ status: 503 }]);
  const err = await idempotentFetch('http://orders.test/orders', {
    fetch, budgetMs: 300, baseDelayMs: 20, maxDelayMs: 40,
  }).then(() => null, (e) => e);
  assert.ok(err instanceof IdempotentFetchError);
  assert.equal(err.reason, 'budget_exhausted');
  assert.equal(err.lastResponse.status, 503);
  assert.ok(calls.length >= 2, `${calls.length} attempts`);
  assert.equal(err.attempts, calls.length);

  const never = scripted([{ status: 503, headers: { 'Retry-After': '120' } }]);
  const late = await idempotentFetch('http://orders.test/orders', {
    fetch: never.fetch, budgetMs: 5000,
  }).then(() => null, (e) => e);
  assert.equal(late.reason, 'budget_exhausted', 'a Retry-After past the budget: give up now');
  assert.equal(never.calls.length, 1);
});

test('maxAttempts ends the retries; the last network error is the cause', async () => {
  const failure = new TypeError('fetch failed');
  const { fetch, calls } = scripted([failure]);
  const err = await idempotentFetch('http://orders.test/orders', { fetch, ...fast,
    maxAttempts: 3 }).then(() => null, (e) => e);
  assert.equal(err.reason, 'max_attempts');
  assert.equal(err.cause, failure);
  assert.equal(err.lastResponse, undefined);
  assert.equal(calls.length, 3);
});

test('a key older than the retention is not sent; the budget must be below it', async () => {
  const { fetch, calls } = scripted([{ status: 201 }]);
  const old = new IdempotentAction({ key: uuidv7(Date.now() - 2 * 24 * 3600 * 1000) });
  const err = await old.fetch('http://orders.test/orders', { fetch }).then(() => null, (e) => e);
  assert.equal(err.reason, 'key_expired');
  assert.equal(calls.length, 0);
  await assert.rejects(idempotentFetch('http://orders.test/orders',
    { fetch, budgetMs: 1000, retentionMs: 1000 }), RangeError);
  const ok = await idempotentFetch('http://orders.test/orders', { fetch, retentionMs: 3600e3,
    budgetMs: 1000, action: new IdempotentAction({ key: uuidv7(Date.now() - 1800e3) }) });
  assert.equal(ok.status, 201, 'a key half the retention old is still sent');
});

test('an abort by the caller stops at once, with its reason', async () => {
  const { fetch, calls } = scripted([{ status: 503 }]);
  const controller = new AbortController();
  const reason = new Error('the user left');
  const pending = idempotentFetch('http://orders.test/orders', {
    fetch, baseDelayMs: 60_000, maxDelayMs: 60_000, budgetMs: 120_000,
    signal: controller.signal,
    onAttempt: () => controller.abort(reason), // while waiting for the next attempt
  });
  await assert.rejects(pending, (e) => e === reason);
  assert.equal(calls.length, 1);
});

test('backoff: exponential, capped, jittered over the upper half', () => {
  const o = { baseDelayMs: 100, maxDelayMs: 1000 };
  assert.deepEqual([1, 2, 3, 4, 5, 9].map((n) => backoffDelay(n, { ...o, random: () => 0 })),
    [50, 100, 200, 400, 500, 500]);
  assert.deepEqual([1, 2, 5].map((n) => backoffDelay(n, { ...o, random: () => 0.999999 })
    .toFixed(0)), ['100', '200', '1000']);
  for (let i = 0; i < 100; i++) {
    const d = backoffDelay(3, o);
    assert.ok(d >= 200 && d < 400, `${d}`);
  }
});

test('Retry-After: seconds or an HTTP date; retryable statuses', () => {
  const now = Date.UTC(2026, 0, 1, 0, 0, 0);
  assert.equal(retryAfterMs('2', now), 2000);
  assert.equal(retryAfterMs(' 0 ', now), 0);
  assert.equal(retryAfterMs(new Date(now + 5000).toUTCString(), now), 5000);
  assert.equal(retryAfterMs(new Date(now - 5000).toUTCString(), now), 0);
  assert.equal(retryAfterMs('soon', now), null);
  assert.equal(retryAfterMs(null, now), null);
  const h = (retryAfter) => new Headers(retryAfter ? { 'Retry-After': retryAfter } : {});
  assert.deepEqual([408, 429, 500, 502, 503, 504].map((s) => isRetryableStatus(s, h())),
    Array(6).fill(true));
  assert.deepEqual([200, 201, 400, 404, 409, 413, 422, 501].map((s) => isRetryableStatus(s, h())),
    Array(8).fill(false));
  assert.equal(isRetryableStatus(409, h('1')), true);
});

// --- against a real server: a timeout, a connection reset ------------------------------------

let server;
let url;
const seen = [];
before(async () => {
  server = http.createServer((req, res) => {
    seen.push({ path: req.url, key: req.headers['idempotency-key'] });
    const n = seen.filter((s) => s.path === req.url).length;
    if (req.url === '/slow' && n === 1) return; // never answers: the client times out
    if (req.url === '/reset' && n === 1) return req.socket.destroy();
    res.writeHead(201, { 'Content-Type': 'application/json', 'Idempotent-Replayed': 'true' });
    res.end(JSON.stringify({ n }));
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${server.address().port}`;
});
after(() => { server.closeAllConnections(); server.close(); });

for (const path of ['/slow', '/reset']) {
  test(`a real ${path.slice(1)} is retried with the same key`, async () => {
    const action = new IdempotentAction();
    const attempts = [];
    const r = await action.fetch(`${url}${path}`, { timeoutMs: 300, ...fast,
      onAttempt: (a) => attempts.push(a) });
    assert.equal(r.status, 201);
    assert.deepEqual(r.body, { n: 2 });
    assert.equal(r.replayed, true);
    assert.ok(attempts[0].error, 'the first attempt got no answer');
    assert.deepEqual(seen.filter((s) => s.path === path).map((s) => s.key),
      [action.key, action.key]);
  });
}
