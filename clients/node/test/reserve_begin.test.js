// reserveBegin as a prepared statement on node-postgres's own client: its round trip (with
// complete's statement parsed alongside), what the connection remembers of it, and pg's
// query_timeout around it. Not in the Citus run (test/citus/clients.sh): there the coordinator
// refuses reserve_begin (middleware.test.js runs the fallback).
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { before, test } from 'node:test';
import pg from 'pg';
import { reserveBegin } from '../index.js';
import { FAST_PATH } from '../lib/connection.js';
import { connect, counting, databases, FAST_PATH_ONLY } from './db.js';
import { extensionOnly, REASONS } from './edition.js';

const RB = extensionOnly(REASONS.reserveBegin); // every test here

let db;
before(async () => {
  ({ source: db } = await databases('reserve_begin'));
});

const key = () => `k-${randomUUID()}`;

test('reserveBegin prepared: reserve_begin and complete parsed once per connection, in the claim', FAST_PATH ? RB : FAST_PATH_ONLY, async () => {
  const c = await connect(db);
  try {
    const parsed = [];
    const parse = c.connection.parse.bind(c.connection);
    c.connection.parse = (q) => { parsed.push(q.name); return parse(q); };
    const rt = counting(c);
    assert.equal((await reserveBegin(c, 's', key(), null, { prepare: true })).outcome, 'new');
    rt.stop();
    assert.equal(rt.sent.length, 1);
    assert.deepEqual(parsed, ['idempotency_complete_v1', 'idempotency_reserve_begin_v1']);
    await c.query('ROLLBACK');
    const { rows } = await c.query('SELECT name FROM pg_prepared_statements ORDER BY name');
    assert.deepEqual(rows.map((r) => r.name),
      ['idempotency_complete_v1', 'idempotency_reserve_begin_v1']);
    parsed.length = 0;
    assert.equal((await reserveBegin(c, 's', key(), null, { prepare: true })).outcome, 'new');
    await c.query('ROLLBACK');
    assert.deepEqual(parsed, [], 'bound, not parsed again');
  } finally {
    await c.end();
  }
});

test('a prepared reserve_begin that fails after its Parse stays known: the next call binds it', RB, async () => {
  const c = await connect(db);
  try {
    await assert.rejects(
      reserveBegin(c, 's', key(), null, { prepare: true, lockTtl: 'not an interval' }),
      (err) => err.code === '22007');
    assert.equal(c.getTransactionStatus(), 'I');
    // parsed again, the server would refuse the name (42P05)
    const r = await reserveBegin(c, 's', key(), null, { prepare: true });
    assert.equal(r.outcome, 'new');
    await c.query('ROLLBACK');
  } finally {
    await c.end();
  }
});

test('a claim on a client with query_timeout leaves no timer behind (pg\'s, cleared when it settles)', RB, async () => {
  const c = new pg.Client({ database: db, query_timeout: 3600000 });
  await c.connect();
  try {
    const timers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
    const before = timers();
    assert.equal((await reserveBegin(c, 's', key(), null, { prepare: true })).outcome, 'new');
    await c.query('ROLLBACK');
    assert.equal(timers(), before);
  } finally {
    await c.end();
  }
});

test('a client in pg\'s pipeline mode (which refuses submittables) claims through pg\'s Query', RB, async () => {
  const c = new pg.Client({ database: db, pipeline: true });
  await c.connect();
  try {
    assert.equal((await reserveBegin(c, 's', key(), null, { prepare: true })).outcome, 'new');
    await c.query('ROLLBACK');
  } finally {
    await c.end();
  }
});
