// exactlyOnceProcessor called as BullMQ calls a processor, with job objects (the jobs suite runs
// it under a real BullMQ and Redis, workers killed): the stored value on a rerun, a business
// key, a throwing work rolled back, a poison job failed as UnrecoverableError.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import pg from 'pg';
import {
  exactlyOnceProcessor, InvalidTransactionTerminationError, lookup, PoisonMessageError,
  storedResult,
} from '../index.js';
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

for (const end of ['COMMIT', 'end', '/* done */ ROLLBACK', 'release()']) {
  test(`work cannot end the run's transaction: ${end} refused, nothing sent`, async () => {
    // Without the guard the insert would be committed and no answer stored: a rerun runs it.
    const refused = [];
    const processor = exactlyOnceProcessor(pool, async (j, client) => {
      await client.query('INSERT INTO charges VALUES ($1, 1)', [j.data.orderId]);
      try {
        if (end === 'release()') client.release();
        else await client.query(end);
      } catch (err) {
        refused.push(err);
      }
      throw new Error('the worker died here');
    });
    const id = randomUUID();
    const orderId = randomUUID();
    await assert.rejects(processor(job(id, { orderId })), /the worker died here/);
    assert.equal(await charges(orderId), 0);
    const client = await pool.connect();
    try {
      assert.equal(await storedResult(client, 'payments', id), undefined);
    } finally {
      client.release();
    }
    assert.equal(refused.length, 1);
    assert.ok(refused[0] instanceof InvalidTransactionTerminationError, String(refused[0]));
    assert.equal(refused[0].code, '2D000');
  });
}

test('work keeps its savepoints, callbacks and the client\'s own methods', async () => {
  const processor = exactlyOnceProcessor(pool, async (j, client) => {
    await client.query('SAVEPOINT part');
    await client.query("INSERT INTO charges VALUES ('undone', 1)");
    await client.query('ROLLBACK TO SAVEPOINT part');
    await client.query('INSERT INTO charges VALUES ($1, 1)', [j.data.orderId]);
    const viaCallback = await new Promise((resolve) => {
      client.query('COMMIT', (err) => resolve(err));
    });
    assert.ok(viaCallback instanceof InvalidTransactionTerminationError);
    assert.ok(client instanceof pg.Client);
    return client.escapeLiteral("it's");
  });
  const orderId = randomUUID();
  assert.equal(await processor(job(randomUUID(), { orderId })), "'it''s'");
  assert.equal(await charges(orderId), 1);
  assert.equal(await charges('undone'), 0);
});

test('a COMMIT the guard cannot read: the answer is stored, then the job fails; a rerun ' +
  'resolves to it', async () => {
  let runs = 0;
  const processor = exactlyOnceProcessor(pool, async (j, client) => {
    runs++;
    await client.query(`INSERT INTO charges VALUES ('${j.data.orderId}', 1); COMMIT`);
    return 'charged';
  }, { maxAttempts: 3 });
  const id = randomUUID();
  const orderId = randomUUID();
  await assert.rejects(processor(job(id, { orderId })), InvalidTransactionTerminationError);
  assert.equal(await processor(job(id, { orderId })), 'charged');
  assert.equal(runs, 1);
  assert.equal(await charges(orderId), 1);
});

test('a single client is refused: jobs run concurrently', () => {
  assert.throws(() => exactlyOnceProcessor(new pg.Client(), async () => 1), /pg\.Pool/);
  assert.throws(() => exactlyOnceProcessor(pool, async () => 1, { maxAttempts: 0 }), TypeError);
});
