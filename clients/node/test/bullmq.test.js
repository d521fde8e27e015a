// exactlyOnceProcessor called as BullMQ calls a processor, with job objects (the jobs suite runs
// it under a real BullMQ and Redis, workers killed): the stored value on a rerun, a business
// key, a throwing work rolled back, a poison job failed as UnrecoverableError.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { exactlyOnceProcessor, lookup, PoisonMessageError, storedResult } from '../index.js';
import { databases } from './db.js';

let pool;
before(async () => {
  const { source } = await databases('bullmq');
  pool = new pg.Pool({ database: source, max: 4 });
  await pool.query('CREATE TABLE charges (order_id text, amount int)');
});
after(() => pool?.end());

const charges = async (orderId) => Number((await pool.query(
  'SELECT count(*) FROM charges WHERE order_id = $1', [orderId])).rows[0].count);
const job = (id, data) => ({ id, queueName: 'payments', data });

test('a rerun of a committed job resolves to the stored value without running work', async () => {
  let runs = 0;
  const processor = exactlyOnceProcessor(pool, async (j, client) => {
    runs++;
    await client.query('INSERT INTO charges VALUES ($1, $2)', [j.data.orderId, j.data.amount]);
    return { charged: j.data.amount };
  });
  const id = randomUUID();
  const orderId = randomUUID();
  assert.deepEqual(await processor(job(id, { orderId, amount: 5 })), { charged: 5 });
  assert.deepEqual(await processor(job(id, { orderId, amount: 5 })), { charged: 5 });
  assert.equal(runs, 1);
  assert.equal(await charges(orderId), 1);
  const client = await pool.connect();
  try {
    assert.deepEqual(await storedResult(client, 'payments', id), { charged: 5 });
  } finally {
    client.release();
  }
});

test('a business key: two job ids, one order, applied once', async () => {
  const processor = exactlyOnceProcessor(pool, async (j, client) => {
    await client.query('INSERT INTO charges VALUES ($1, 1)', [j.data.orderId]);
    return 'charged';
  }, { key: (j) => j.data.orderId, scope: 'orders' });
  const orderId = randomUUID();
  assert.equal(await processor(job('1', { orderId })), 'charged');
  assert.equal(await processor(job('2', { orderId })), 'charged');
  assert.equal(await charges(orderId), 1);
});

test('a work that throws keeps nothing; at maxAttempts the job fails as UnrecoverableError',
  async () => {
    const processor = exactlyOnceProcessor(pool, async (j, client) => {
      await client.query('INSERT INTO charges VALUES ($1, 1)', [j.data.orderId]);
      throw new Error('declined');
    }, { maxAttempts: 2 });
    const id = randomUUID();
    const orderId = randomUUID();
    await assert.rejects(processor(job(id, { orderId })), /declined/);
    const err = await processor(job(id, { orderId })).catch((e) => e);
    assert.ok(err instanceof PoisonMessageError);
    assert.equal(err.name, 'UnrecoverableError'); // what BullMQ fails without retrying
    assert.equal(await charges(orderId), 0);
    const client = await pool.connect();
    try {
      const record = await lookup(client, 'payments', id);
      assert.equal(record.lastError.dead, true);
      assert.equal(record.lastError.attempt, 2);
    } finally {
      client.release();
    }
  });

test('a single client is refused: jobs run concurrently', () => {
  assert.throws(() => exactlyOnceProcessor(new pg.Client(), async () => 1), /pg\.Pool/);
  assert.throws(() => exactlyOnceProcessor(pool, async () => 1, { maxAttempts: 0 }), TypeError);
});
