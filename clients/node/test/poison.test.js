// Poison messages: consumeOnce / applyOnce with maxAttempts count the failures of a message's
// work on its key and, at the last allowed attempt, record it dead and throw
// PoisonMessageError (the consumer dead-letters it) instead of failing for ever.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import {
  applyOnce, claimOnce, ConnectionLostError, consumeOnce, KeyInProgressError, lookup,
  PoisonMessageError, positionKey, PositionBelowWatermarkError, SerializationFailureError,
  watermark,
} from '../index.js';
import { connect, databases } from './db.js';

let db;
let conn;
let other;
before(async () => {
  ({ source: db } = await databases('poison'));
  conn = await connect(db);
  other = await connect(db);
  await conn.query('CREATE TABLE poison_ledger (key text NOT NULL)');
});
after(async () => {
  await conn?.end();
  await other?.end();
});

const poison = (key) => async (c) => {
  await c.query('INSERT INTO poison_ledger VALUES ($1)', [key]); // rolled back
  throw new SyntaxError(`body of ${key} is not JSON`);
};
const good = (key) => async (c) => { await c.query('INSERT INTO poison_ledger VALUES ($1)', [key]); };
const applied = async (key) => Number((await other.query(
  'SELECT count(*) AS n FROM poison_ledger WHERE key = $1', [key])).rows[0].n);
const failedKey = async (scope, key) => (await other.query(
  'SELECT attempt, dead, error FROM idempotency.failed_keys WHERE scope = $1 AND key = $2',
  [scope, key])).rows[0] ?? null;

for (const mode of ['own transaction', 'savepoint']) {
  test(`consumeOnce dead-letters a poison message after maxAttempts (${mode})`, async () => {
    const key = randomUUID();
    // Inside the caller's transaction the helper's is a savepoint and the failure's record is
    // part of the caller's transaction: it counts once that commits.
    const call = async (work) => {
      if (mode === 'own transaction') return consumeOnce(conn, 'q', key, work, { maxAttempts: 3 });
      await conn.query('BEGIN');
      try {
        return await consumeOnce(conn, 'q', key, work, { maxAttempts: 3 });
      } finally {
        await conn.query('COMMIT');
      }
    };
    for (const attempt of [1, 2]) {
      await assert.rejects(call(poison(key)), SyntaxError);
      const row = await failedKey('q', key);
      assert.deepEqual([row.attempt, row.dead], [attempt, false]);
    }
    const err = await call(poison(key)).then(() => null, (e) => e);
    assert.ok(err instanceof PoisonMessageError, String(err));
    assert.ok(err.cause instanceof SyntaxError);
    assert.deepEqual([err.scope, err.key, err.attempt, err.partition], ['q', key, 3, null]);
    assert.equal(err.error.dead, true);
    assert.equal(err.error.type, 'SyntaxError');
    const row = await failedKey('q', key);
    assert.deepEqual([row.attempt, row.dead], [3, true]);
    assert.equal(row.error.error, `body of ${key} is not JSON`);
    assert.ok(row.error.failed_at);
    assert.equal(await applied(key), 0);
    // After a fix, the dead-lettered message is replayed: applied once, then a duplicate.
    assert.equal(await call(good(key)), true);
    assert.equal(await call(good(key)), false);
    assert.equal(await applied(key), 1);
    assert.equal(await failedKey('q', key), null);
    assert.equal((await lookup(conn, 'q', key)).state, 'completed');
  });
}

test('a replay that fails again is dead at once; forget gives it its attempts again', async () => {
  const key = randomUUID();
  await assert.rejects(consumeOnce(conn, 'q', key, poison(key), { maxAttempts: 2 }), SyntaxError);
  await assert.rejects(consumeOnce(conn, 'q', key, poison(key), { maxAttempts: 2 }),
    (e) => e instanceof PoisonMessageError && e.attempt === 2);
  // Replayed before the fix: one more attempt, dead at once.
  await assert.rejects(consumeOnce(conn, 'q', key, poison(key), { maxAttempts: 2 }),
    (e) => e instanceof PoisonMessageError && e.attempt === 3);
  assert.equal((await conn.query("SELECT idempotency.forget('q', $1) AS f", [key])).rows[0].f, true);
  await assert.rejects(consumeOnce(conn, 'q', key, poison(key), { maxAttempts: 2 }), SyntaxError);
  assert.deepEqual([(await failedKey('q', key)).attempt, (await failedKey('q', key)).dead], [1, false]);
});

test('maxAttempts: a good message is unchanged, 1 dead-letters at once, bad values are refused', async () => {
  const key = randomUUID();
  assert.equal(await consumeOnce(conn, 'q', key, good(key), { maxAttempts: 1 }), true);
  assert.equal((await lookup(conn, 'q', key)).attempt, 1);
  const key2 = randomUUID();
  await assert.rejects(consumeOnce(conn, 'q', key2, poison(key2), { maxAttempts: 1 }),
    PoisonMessageError);
  for (const bad of [0, -1, 1.5, '3', true])
    await assert.rejects(consumeOnce(conn, 'q', randomUUID(), good(key), { maxAttempts: bad }),
      /maxAttempts/);
});

test('failures that are not the message\'s are not counted', async () => {
  const key = randomUUID();
  const transient = async (c) => {
    await c.query("DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END $$");
  };
  await assert.rejects(consumeOnce(conn, 'q', key, transient, { maxAttempts: 1 }),
    SerializationFailureError);
  assert.equal(await lookup(conn, 'q', key), null);

  // The connection dies inside the work: ConnectionLostError, nothing recorded.
  const victim = await connect(db);
  victim.on('error', () => {});
  const pid = (await victim.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
  await assert.rejects(consumeOnce(victim, 'q', key, async (c) => {
    await other.query('SELECT pg_terminate_backend($1)', [pid]);
    await c.query('SELECT 1');
  }, { maxAttempts: 1 }), ConnectionLostError);
  await victim.end().catch(() => {});
  assert.equal(await lookup(conn, 'q', key), null);

  // Another consumer's open transaction holds the key: refused before the work runs.
  await other.query('BEGIN');
  assert.equal(await claimOnce(other, 'q', key), true);
  await assert.rejects(consumeOnce(conn, 'q', key, poison(key), { maxAttempts: 1 }),
    KeyInProgressError);
  await other.query('ROLLBACK');
  assert.equal(await lookup(conn, 'q', key), null);
});

test('the stored error is bounded and holds any text', async () => {
  const key = randomUUID();
  const err = await consumeOnce(conn, 'q', key, async () => {
    throw new Error(`nul\0 quote' backslash\\ ${'x'.repeat(5000)}`);
  }, { maxAttempts: 1 }).then(() => null, (e) => e);
  assert.ok(err instanceof PoisonMessageError);
  const { error } = await failedKey('q', key);
  assert.deepEqual(error, { ...err.error, failed_at: error.failed_at });
  assert.ok(error.error.startsWith("nul\ufffd quote' backslash\\ x"));
  assert.ok(error.error.endsWith('...'));
  assert.equal(error.error.length, 2003);
});

test('applyOnce moves the watermark past a poison position', async () => {
  const group = `stream-${randomUUID()}`;
  assert.equal(await applyOnce(conn, group, 'events', 6, good('s6'), { maxAttempts: 2 }), true);
  await assert.rejects(applyOnce(conn, group, 'events', 7, poison('s7'), { maxAttempts: 2 }),
    SyntaxError);
  assert.equal(await watermark(conn, group, 'events'), 6n); // not moved: 7 comes again
  assert.equal((await failedKey(group, 'events@7')).dead, false);
  const err = await applyOnce(conn, group, 'events', 7, poison('s7'), { maxAttempts: 2 })
    .then(() => null, (e) => e);
  assert.ok(err instanceof PoisonMessageError, String(err));
  assert.deepEqual([err.scope, err.key, err.partition, err.position, err.attempt],
    [group, 'events@7', 'events', 7, 2]);
  assert.equal(await watermark(conn, group, 'events'), 7n); // moved past it, with the record
  const row = await failedKey(group, 'events@7');
  assert.deepEqual([row.attempt, row.dead, row.error.position, row.error.partition],
    [2, true, '7', 'events']);
  assert.equal(await applyOnce(conn, group, 'events', 7, good('s7'), { maxAttempts: 2 }), false);
  assert.equal(await applyOnce(conn, group, 'events', 8, good('s8'), { maxAttempts: 2 }), true);
  assert.equal(await applied('s7'), 0);
  assert.equal(await applied('s8'), 1);
  await assert.rejects(applyOnce(conn, group, 'events', 5, good('s5'),
    { strict: true, maxAttempts: 2 }), PositionBelowWatermarkError);
  assert.equal(await failedKey(group, 'events@5'), null);
});

test('positionKey stays a valid key', () => {
  assert.equal(positionKey('events', 7), 'events@7');
  const long = positionKey('p'.repeat(300), 7n);
  assert.ok(long.length <= 255 && long.endsWith('@7'));
});
