// A database or network that goes away must never take the application down: an Express 5
// service (service_proc.js, a child process) under the middleware, runOnce and runExternal
// keeps running and answering while its backends are terminated and a TCP proxy between it and
// PostgreSQL cuts every connection or refuses new ones; requests get 503 meanwhile, and clients
// that retry each key until answered end with exactly one order per key. In this process: the
// outbox consumer and runOnce reject with ConnectionLostError (an unhandled 'error' event would
// end this test process).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import {
  ConnectionLostError, consumeOnce, emit, OutboxConsumer, query, runOnce,
} from '../index.js';
import { connect, databases } from './db.js';
import { Proxy } from './proxy.js';
import { extensionOnly, REASONS } from './edition.js';

const SERVICE = fileURLToPath(new URL('service_proc.js', import.meta.url));
const APP = 'faults_service';

let dbs;
let proxy;
let service;
let base;
let check;
let exited = null;

async function waitFor(what, fn, timeoutMs = 30_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

before(async () => {
  dbs = await databases('faults');
  check = await connect(dbs.source);
  await check.query('CREATE TABLE orders (id serial PRIMARY KEY, k text NOT NULL, item text)');
  proxy = new Proxy();
  const port = await proxy.listen();
  service = spawn(process.execPath, [SERVICE, dbs.source], {
    env: { ...process.env, PGHOST: '127.0.0.1', PGPORT: String(port), PGAPPNAME: APP },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  service.on('exit', (code, signal) => { exited = { code, signal }; });
  const [line] = await once(createInterface({ input: service.stdout }), 'line');
  base = `http://127.0.0.1:${JSON.parse(line).port}`;
});
after(async () => {
  service?.kill('SIGKILL');
  proxy?.close();
  await check?.end();
});

async function post(path, key, body, { query = '' } = {}) {
  const r = await fetch(`${base}${path}${query}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key },
    body: JSON.stringify(body),
  });
  return { status: r.status, body: await r.json().catch(() => null) };
}

const ordersOf = async (k) =>
  (await check.query('SELECT id FROM orders WHERE k = $1 ORDER BY id', [k])).rows.map((r) => r.id);

async function assertAlive() {
  assert.equal(exited, null, `the service exited: ${JSON.stringify(exited)}`);
  const r = await fetch(`${base}/alive`);
  assert.equal(r.status, 200);
}

// The service's backends once the request (held by delay_ms) is inside its work: in its
// transaction, or for runExternal after the claim's commit (the pool has one backend then).
const busyBackends = (path) => waitFor('the request\'s work', async () => {
  const { rows } = await check.query(`SELECT pid, state FROM pg_stat_activity
    WHERE application_name = $1`, [APP]);
  const inWork = path === '/external'
    ? rows.length > 0 && (await check.query(`SELECT 1 FROM idempotency.keys
        WHERE state = 'processing'`)).rows.length > 0
    : rows.some((r) => r.state === 'idle in transaction');
  return inWork && rows.map((r) => r.pid);
});

for (const path of ['/orders', '/once', '/external']) {
  test(`${path}: a backend terminated mid-request: 503, and the retry makes the one order`,
    async () => {
    const key = randomUUID();
    const pending = post(path, key, { item: 'book' }, { query: '?delay_ms=400' });
    for (const pid of await busyBackends(path))
      await check.query('SELECT pg_terminate_backend($1)', [pid]);
    const first = await pending;
    assert.equal(first.status, 503, JSON.stringify(first.body));
    await assertAlive();
    // runExternal's claim stays until its lease (1 s here) lapses: 409 until then
    const again = await waitFor('the retry', async () => {
      const r = await post(path, key, { item: 'book' });
      assert.ok([201, 409].includes(r.status), JSON.stringify(r));
      return r.status === 201 && r;
    });
    assert.deepEqual(await ordersOf(key), [again.body.id]);
  });
}

test('the database unreachable: 503 with Retry-After, then 201 once it is back', async () => {
  proxy.refuse(true);
  proxy.cut();
  try {
    for (const path of ['/orders', '/once', '/external']) {
      const r = await fetch(`${base}${path}`, { method: 'POST', body: '{"item":"x"}',
        headers: { 'content-type': 'application/json', 'idempotency-key': randomUUID() } });
      assert.equal(r.status, 503, path);
      if (path === '/orders') assert.equal(r.headers.get('retry-after'), '1');
    }
  } finally {
    proxy.refuse(false);
  }
  await assertAlive();
  const key = randomUUID();
  assert.equal((await post('/orders', key, { item: 'x' })).status, 201);
});

test('connections cut again and again under load: the service stays up, one order per key',
  async () => {
  const paths = ['/orders', '/once', '/external'];
  const keys = Array.from({ length: 60 }, (_, i) => ({ key: randomUUID(), path: paths[i % 3] }));
  const answers = new Map();
  let next = 0;
  let failures = 0;
  const unexpected = [];
  const worker = async () => {
    while (next < keys.length) {
      const { key, path } = keys[next++];
      for (;;) { // a client that retries with the same key until it is answered
        const r = await post(path, key, { item: key.slice(0, 8) }).catch(() => null);
        if (r?.status === 201) { answers.set(key, r.body.id); break; }
        failures++;
        if (r !== null && ![409, 503].includes(r.status)) unexpected.push(r);
        await sleep(10);
      }
    }
  };
  // A bounded number of cuts: on a busy machine a request can take longer than the gap between
  // two cuts, so cutting until every key is answered could go on for ever.
  let cutting = true;
  const cutter = (async () => {
    let round = 0;
    while (cutting && round < 60) {
      await sleep(30 + Math.random() * 60);
      if (++round % 4 === 0) { // down for a moment
        proxy.refuse(true);
        proxy.cut();
        await sleep(50);
        proxy.refuse(false);
      } else {
        proxy.cut();
      }
    }
  })();
  await Promise.all(Array.from({ length: 6 }, worker));
  cutting = false;
  await cutter;
  await assertAlive();
  assert.deepEqual(unexpected, [], 'only 409 and 503 while the connections are cut');
  assert.ok(failures > 0, 'the cuts hit some requests');
  for (const { key } of keys)
    assert.deepEqual(await ordersOf(key), [answers.get(key)], `${key}: one order, the answer's`);
});

test('a backend terminated during a statement: ConnectionLostError, and the close that ' +
  'follows the rejection does not end the process', async () => {
  const client = await connect(dbs.source); // no 'error' listener of the application's
  const { rows: [{ pid }] } = await client.query('SELECT pg_backend_pid() AS pid');
  // handled from here on: it rejects as soon as pg_terminate_backend has run
  const rejected = assert.rejects(query(client, 'SELECT pg_sleep(600)'), ConnectionLostError);
  await waitFor('the statement to run', async () => (await check.query(
    "SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND state = 'active'", [pid])).rows.length);
  await check.query('SELECT pg_terminate_backend($1)', [pid]);
  // the server's 57P01 fails the statement; the socket's close is seen after it, as an 'error'
  // event of the client (unhandled, it would fail this test as an uncaught exception)
  await rejected;
  await waitFor('the close to arrive', () => client._queryable === false);
  await assert.rejects(client.query('SELECT 1'));
});

test('runOnce on a connection terminated during the work: ConnectionLostError', async () => {
  const client = await connect(dbs.source);
  const { rows } = await client.query('SELECT pg_backend_pid() AS pid');
  const key = randomUUID();
  await assert.rejects(runOnce(client, { scope: 'faults', key }, async () => {
    await check.query('SELECT pg_terminate_backend($1)', [rows[0].pid]);
    await waitFor('the error to arrive', () => client._queryable === false);
    return { statusCode: 201, response: {} };
  }), ConnectionLostError);
  await assert.rejects(client.query('SELECT 1')); // not queryable; no unhandled error either
  assert.deepEqual(await ordersOf(key), []);
});

test('consumeOnce on a connection terminated during the work: ConnectionLostError, and the ' +
  'redelivery is applied once', async () => {
  const client = await connect(dbs.source);
  const { rows } = await client.query('SELECT pg_backend_pid() AS pid');
  const key = randomUUID();
  const insert = (c) => c.query('INSERT INTO orders (k) VALUES ($1)', [key]);
  await assert.rejects(consumeOnce(client, 'faults-queue', key, async (c) => {
    await insert(c);
    await check.query('SELECT pg_terminate_backend($1)', [rows[0].pid]);
    await waitFor('the error to arrive', () => client._queryable === false);
  }), ConnectionLostError);
  assert.deepEqual(await ordersOf(key), []); // neither the effect nor the claim was kept
  await assert.rejects(consumeOnce(client, 'faults-queue', key, insert), ConnectionLostError);
  const again = await connect(dbs.source);
  try {
    assert.equal(await consumeOnce(again, 'faults-queue', key, insert), true);
    assert.equal(await consumeOnce(again, 'faults-queue', key, insert), false);
  } finally {
    await again.end();
  }
  assert.equal((await ordersOf(key)).length, 1);
});

test('the outbox consumer\'s target connection terminated: run rejects, ConnectionLostError',
  extensionOnly(REASONS.outbox), async () => {
  const slot = `node_faults_${randomUUID().replaceAll('-', '').slice(0, 8)}`;
  const source = await connect(dbs.source);
  const target = await connect(dbs.target);
  await source.query("SELECT pg_create_logical_replication_slot($1, 'idempotency')", [slot]);
  try {
    const { rows: [{ pid }] } = await target.query('SELECT pg_backend_pid() AS pid');
    const consumer = new OutboxConsumer(source, target, { slot, consumer: 'faults' });
    let applied = 0;
    const running = consumer.run(async () => { applied++; }, { idleMs: 20 });
    // Handled from here on: run may reject before pg_terminate_backend's answer arrives here,
    // and a rejection nobody handles yet fails the test as an unhandledRejection.
    const rejected = assert.rejects(running, ConnectionLostError);
    await emit(check, 'faults', { n: 1 });
    await waitFor('the message to be applied', () => applied === 1);
    await check.query('SELECT pg_terminate_backend($1)', [pid]);
    await rejected;
  } finally {
    await source.query('SELECT pg_drop_replication_slot($1)', [slot]);
    await source.end();
    await target.end().catch(() => {});
  }
});
