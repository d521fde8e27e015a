// exactlyOnceProcessor called as BullMQ calls a processor, with job objects (the jobs suite runs
// it under a real BullMQ and Redis, workers killed): the stored value on a rerun, a business
// key, a throwing work rolled back, a poison job failed as UnrecoverableError, the guard, a lost
// connection, and the statements of each round trip (reserve_begin and its fallbacks).
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import pg from 'pg';
import {
  exactlyOnceProcessor, InvalidTransactionTerminationError, KeyInProgressError, lookup,
  PoisonMessageError, reserve, storedResult,
} from '../index.js';
import { FAST_PATH, isConnectionLost } from '../lib/connection.js';
import { EDITION as EDITION_SQL } from '../lib/statements.js';
import { databases, FAST_PATH_ONLY, sentText } from './db.js';
import { extensionOnly, REASONS } from './edition.js';

let database;
let pool;
before(async () => {
  ({ source: database } = await databases('bullmq'));
  pool = new pg.Pool({ database, max: 4 });
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

// ---- round trips: the claim opens the transaction, complete + COMMIT ends it ----
const RB_FAST = FAST_PATH ? extensionOnly(REASONS.reserveBegin) : FAST_PATH_ONLY;

// A pool of one connection whose client records what each round trip sends (sentText), the
// server's edition (asked once per processor) apart; run(id, orderId) runs a job of a processor
// that inserts a charge, and gives its value and what it sent.
function recordingPool(options = {}) {
  const statements = [];
  const recorded = new pg.Pool({ database, max: 1 });
  recorded.on('connect', (client) => {
    const send = client.query.bind(client);
    client.query = (q, ...rest) => {
      if (sentText(q) !== EDITION_SQL) statements.push(sentText(q));
      return send(q, ...rest);
    };
  });
  const processor = exactlyOnceProcessor(recorded, async (j, client) => {
    await client.query('INSERT INTO charges VALUES ($1, 1)', [j.data.orderId]);
    return { charged: j.data.orderId };
  }, options);
  const run = async (id, orderId) => {
    statements.length = 0;
    const value = await processor(job(id, { orderId }));
    return { value, statements: [...statements] };
  };
  // A new job, applied, in `sent` round trips: its id, order and statements.
  const runNew = async (sent) => {
    const id = randomUUID();
    const orderId = randomUUID();
    const { value, statements: texts } = await run(id, orderId);
    assert.deepEqual(value, { charged: orderId });
    assert.equal(texts.length, sent, texts.join(' | '));
    return { id, orderId, statements: texts };
  };
  return { run, runNew, pool: recorded, close: () => recorded.end() };
}

test('a new job: reserve_begin (prepared) opens the transaction, work, complete + COMMIT; a rerun is one statement', RB_FAST, async () => {
  const p = recordingPool();
  try {
    const { id, orderId, statements } = await p.runNew(3);
    assert.match(statements[0], new RegExp('^\\[idempotency_complete_v1\\] SELECT ' +
      'idempotency\\.complete\\(\\$1.* \\(parse only\\); \\[idempotency_reserve_begin_v1\\] ' +
      'SELECT .* FROM idempotency\\.reserve_begin\\(\\$1', 's'));
    assert.doesNotMatch(statements.join(' | '), /BEGIN;/);
    assert.match(statements[1], /^INSERT INTO charges/);
    assert.match(statements[2],
      /^\[idempotency_complete_v1\] SELECT idempotency\.complete\(\$1.*; COMMIT$/s);

    const rerun = await p.run(id, orderId);
    assert.deepEqual(rerun.value, { charged: orderId });
    assert.equal(rerun.statements.length, 1, rerun.statements.join(' | '));
    assert.match(rerun.statements[0], /\[idempotency_reserve_begin_v1\] SELECT/);
    assert.equal(await charges(orderId), 1);

    // the next new job: both statements parsed already
    const next = await p.runNew(3);
    assert.match(next.statements[0], /\[idempotency_reserve_begin_v1\] SELECT/);
  } finally {
    await p.close();
  }
});

test('prepare: false: reserve_begin and complete unnamed, the same round trips', RB_FAST, async () => {
  const p = recordingPool({ prepare: false });
  try {
    const { statements } = await p.runNew(3);
    assert.match(statements[0], /^SELECT .* FROM idempotency\.reserve_begin\(\$1, \$2, /s);
    assert.match(statements[2], /^SELECT idempotency\.complete\(\$1.*; COMMIT$/s);
  } finally {
    await p.close();
  }
});

test('a server that refuses reserve_begin: BEGIN + reserve, complete + COMMIT; a rerun rolls back', RB_FAST, async () => {
  const fn = 'idempotency.reserve_begin(text, text, bytea, interval, interval, interval)';
  const p = recordingPool();
  await p.run(randomUUID(), randomUUID()); // the edition, asked once: it has reserve_begin
  await pool.query(`ALTER FUNCTION ${fn} RENAME TO reserve_begin_hidden`);
  try {
    // the refused reserve_begin, then BEGIN + reserve, the insert, complete + COMMIT
    const { id, orderId, statements } = await p.runNew(4);
    assert.match(statements[1], /^BEGIN; SELECT .* FROM idempotency\.reserve\(/s);
    assert.match(statements[3], /SELECT idempotency\.complete\(\$1.*; COMMIT$/s);
    const rerun = await p.run(id, orderId);
    assert.deepEqual(rerun.value, { charged: orderId });
    assert.deepEqual(rerun.statements.map((t) => t.split(';')[0]),
      ['BEGIN', 'ROLLBACK'], rerun.statements.join(' | '));
    assert.equal(await charges(orderId), 1);
  } finally {
    await pool.query(`ALTER FUNCTION idempotency.reserve_begin_hidden(text, text, bytea,
      interval, interval, interval) RENAME TO reserve_begin`);
    await p.close();
  }
});

test('prepared statements the server connection lost (a pooler, DISCARD ALL): unprepared from then on', RB_FAST, async () => {
  const p = recordingPool();
  try {
    await p.run(randomUUID(), randomUUID());
    const c = await p.pool.connect(); // the pool's one connection, which prepared both
    await c.query('DEALLOCATE ALL');
    c.release();
    // the lost statement (26000), then reserve_begin unnamed, the insert, complete + COMMIT
    const { orderId, statements } = await p.runNew(4);
    assert.match(statements[1], /^SELECT .* FROM idempotency\.reserve_begin\(\$1, \$2, /s);
    assert.match(statements[3], /^SELECT idempotency\.complete\(\$1.*; COMMIT$/s);
    assert.equal(await charges(orderId), 1);
  } finally {
    await p.close();
  }
});

// A job whose first run inserts, then meets interrupt(client) and fails with maxAttempts 1:
// check(err, pool) sees its error; nothing of it was committed, it was not counted (the job is
// not dead), and its retry applies it once.
async function failsOnceThenApplies(interrupt, check) {
  let first = true;
  const own = new pg.Pool({ database, max: 1 });
  own.on('error', () => {}); // a terminated idle connection, if the pool still held it
  const processor = exactlyOnceProcessor(own, async (j, client) => {
    await client.query('INSERT INTO charges VALUES ($1, 1)', [j.data.orderId]);
    if (first) {
      first = false;
      await interrupt(client);
    }
    return 'charged';
  }, { maxAttempts: 1 });
  try {
    const id = randomUUID();
    const orderId = randomUUID();
    const err = await processor(job(id, { orderId })).catch((e) => e);
    assert.ok(!(err instanceof PoisonMessageError), String(err));
    check(err, own);
    assert.equal(await charges(orderId), 0, 'rolled back with the claim');
    assert.equal(await processor(job(id, { orderId })), 'charged');
    assert.equal(await charges(orderId), 1);
  } finally {
    await own.end();
  }
}

test('complete\'s prepared statement lost inside the transaction: nothing committed, not counted, the retry applies it', RB_FAST, async () => {
  await failsOnceThenApplies((client) => client.query('DEALLOCATE idempotency_complete_v1'),
    (err) => assert.equal(err?.code, '26000', String(err)));
});

test('a lost connection during work: thrown as lost, not counted, the connection dropped; the retry applies it', async () => {
  await failsOnceThenApplies(
    (client) => client.query('SELECT pg_terminate_backend(pg_backend_pid())'),
    (err, own) => {
      assert.ok(isConnectionLost(err), String(err));
      assert.equal(own.totalCount, 0, 'the broken connection left the pool');
    });
});

test('a key held by another run past wait: KeyInProgressError, nothing left open', async () => {
  const processor = exactlyOnceProcessor(pool, async () => 'ran', { wait: '0 seconds' });
  const holder = await pool.connect();
  try {
    const id = randomUUID();
    await holder.query('BEGIN');
    await reserve(holder, 'payments', id);
    await assert.rejects(processor(job(id, {})), KeyInProgressError);
    await holder.query('ROLLBACK');
    assert.equal(await processor(job(id, {})), 'ran');
  } finally {
    holder.release();
  }
});
