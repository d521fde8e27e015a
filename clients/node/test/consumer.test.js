// The outbox consumer: in order, confirmed only after the target commit, and under SIGKILL at
// every phase and at random moments: 0 lost, 0 applied twice.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, beforeEach, afterEach, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { emit, lsnKeyParts, OutboxConsumer, watermark } from '../index.js';
import { connect, databases } from './db.js';
import { extensionOnly, MANAGED, REASONS } from './edition.js';

const OUTBOX = extensionOnly(REASONS.outbox); // every test here, and its hooks

const PROC = fileURLToPath(new URL('consumer_proc.js', import.meta.url));
let dbs;
let slot;
before(async () => { dbs = await databases('consumer'); });

beforeEach(async () => {
  if (MANAGED) return;
  slot = `node_${randomUUID().replaceAll('-', '').slice(0, 10)}`;
  const s = await connect(dbs.source);
  await s.query("SELECT pg_create_logical_replication_slot($1, 'idempotency')", [slot]);
  await s.end();
  const t = await connect(dbs.target);
  await t.query('DROP TABLE IF EXISTS applied');
  await t.query('CREATE TABLE applied (key uuid, payload_id int)'); // no unique constraint
  await t.end();
});
afterEach(async () => {
  if (MANAGED) return;
  const s = await connect(dbs.source);
  await s.query('SELECT pg_drop_replication_slot($1)', [slot]);
  await s.end();
});

class Producer {
  constructor() { this.nextId = 0; }
  async open() { this.conn = await connect(dbs.source); return this; }
  async produce(transactions, pauseMs = 0) {
    for (let t = 0; t < transactions; t++) {
      await this.conn.query('BEGIN');
      const n = 1 + Math.floor(Math.random() * 3);
      for (let i = 0; i < n; i++) await emit(this.conn, 'orders', { id: ++this.nextId });
      await this.conn.query('COMMIT');
      if (pauseMs) await sleep(pauseMs);
    }
  }
  close() { return this.conn.end(); }
}

function runProc(...args) {
  const child = spawn(process.execPath, [PROC, dbs.source, dbs.target, slot, ...args.map(String)],
    { stdio: ['ignore', 'inherit', 'inherit'] });
  child.done = once(child, 'exit').then(([code, signal]) => ({ code, signal }));
  return child;
}

async function checkExactlyOnce(produced) {
  const t = await connect(dbs.target);
  const { rows: [r] } = await t.query(`SELECT count(*)::int AS total,
      count(DISTINCT payload_id)::int AS ids, count(DISTINCT key)::int AS keys FROM applied`);
  const { rows: ids } = await t.query('SELECT DISTINCT payload_id FROM applied');
  await t.end();
  const got = new Set(ids.map((x) => x.payload_id));
  let lost = 0;
  for (let i = 1; i <= produced; i++) if (!got.has(i)) lost++;
  const doubled = r.total - r.ids;
  console.log(`produced ${produced}, applied rows ${r.total}, lost ${lost}, doubled ${doubled}`);
  assert.deepEqual({ lost, doubled }, { lost: 0, doubled: 0 });
  assert.equal(r.keys, produced);
  assert.equal(r.total, produced);
}

test('applies in order, confirms, and nothing comes again', OUTBOX, async () => {
  const producer = await (await new Producer().open());
  await producer.produce(5);
  const s = await connect(dbs.source);
  const t = await connect(dbs.target);
  const got = [];
  const consumer = new OutboxConsumer(s, t, { slot, consumer: 'inline' });
  assert.equal(await consumer.poll((c, m) => { got.push(m); }), producer.nextId);
  assert.deepEqual(got.map((m) => m.payload.id), Array.from({ length: producer.nextId }, (_, i) => i + 1));
  for (let i = 1; i < got.length; i++) assert.ok(got[i - 1].key < got[i].key, 'keys increase');
  const m = got.at(-1);
  assert.deepEqual(lsnKeyParts(m.key), { commitLsn: m.commitLsn, lsn: m.lsn });
  assert.ok(m.lsn <= m.commitLsn);
  assert.equal(m.topic, 'orders');
  assert.equal(await watermark(t, 'inline', slot), BigInt(`0x${m.key.replaceAll('-', '')}`));
  assert.equal(await consumer.poll(() => assert.fail('confirmed: nothing comes again')), 0);
  const { rows } = await s.query('SELECT count(*)::int AS n FROM pg_logical_slot_peek_changes($1, NULL, NULL)', [slot]);
  assert.equal(rows[0].n, 0);
  // A handler error: the message stays in the slot and is applied on the next poll.
  await producer.produce(1);
  await assert.rejects(consumer.poll(() => { throw new Error('sink down'); }), /sink down/);
  let again = 0;
  await consumer.poll(() => { again++; });
  assert.ok(again >= 1);
  await Promise.all([s.end(), t.end(), producer.close()]);
});

test('run() polls until its signal aborts; createSlot() makes the slot once', OUTBOX, async () => {
  const s = await connect(dbs.source);
  const t = await connect(dbs.target);
  const own = `${slot}_run`;
  const consumer = new OutboxConsumer(s, t, { slot: own, consumer: 'runner' });
  await consumer.createSlot();
  await consumer.createSlot(); // ifMissing: nothing to do
  await assert.rejects(consumer.createSlot({ ifMissing: false }), (err) => err.code === '42710');
  const producer = await new Producer().open();
  await producer.produce(3);
  const controller = new AbortController();
  const seen = [];
  const running = consumer.run((c, m) => {
    seen.push(m.payload.id);
    if (seen.length === producer.nextId) controller.abort();
  }, { idleMs: 50, signal: controller.signal });
  await running;
  assert.deepEqual(seen, Array.from({ length: producer.nextId }, (_, i) => i + 1));
  await s.query('SELECT pg_drop_replication_slot($1)', [own]);
  await Promise.all([s.end(), t.end(), producer.close()]);
});

for (const phase of ['peeked', 'applied_uncommitted', 'committed', 'before_advance', 'advanced']) {
  test(`SIGKILL at ${phase}: 0 lost, 0 doubled`, OUTBOX, async () => {
    const producer = await new Producer().open();
    await producer.produce(8);
    const killed = await runProc('kill', phase, 3).done;
    assert.equal(killed.signal, 'SIGKILL');
    await producer.produce(4);
    assert.equal((await runProc('drain', producer.nextId).done).code, 0);
    await checkExactlyOnce(producer.nextId);
    await producer.close();
  });
}

test('SIGKILL at random moments under load: 0 lost, 0 doubled', OUTBOX, async () => {
  const producer = await new Producer().open();
  let done = false;
  const producing = producer.produce(250, 20).then(() => { done = true; });
  let kills = 0;
  while (!done || kills < 12) {
    const child = runProc('run');
    await sleep(200 + Math.random() * 700);
    child.kill('SIGKILL');
    await child.done;
    kills++;
  }
  await producing;
  assert.equal((await runProc('drain', producer.nextId).done).code, 0);
  console.log(`${kills} SIGKILLs`);
  await checkExactlyOnce(producer.nextId);
  assert.ok(producer.nextId >= 250);
  await producer.close();
});

test('control: a reader that confirms on read and dies before applying loses messages', OUTBOX, async () => {
  const producer = await new Producer().open();
  await producer.produce(5);
  const s = await connect(dbs.source);
  await s.query('SELECT * FROM pg_logical_slot_get_changes($1, NULL, 2)', [slot]);
  await s.end();
  // ... and crashes here, before applying. The reference consumer drains the rest.
  await runProc('drain', 1).done;
  await sleep(500);
  await assert.rejects(checkExactlyOnce(producer.nextId), assert.AssertionError);
  await producer.close();
});
