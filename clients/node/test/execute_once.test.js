// The statement form over idempotency.execute_once: runOnce(client, { statement, params }) and
// the middleware's statement option. The claim, the statement and its answer are one round
// trip for a new key and for a replay; an error of the statement leaves the key new.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import { after, before, test } from 'node:test';
import express from 'express';
import pg from 'pg';
import {
  CardinalityViolationError, ExtensionVersionError, executeOnce,
  InvalidTransactionTerminationError, StatementSyntaxError, idempotencyMiddleware, KeyInProgressError,
  KeyMismatchError, KeyTooOldError, lookup, runOnce, statementParam,
} from '../index.js';
import {
  assertDatabaseUnavailable, connect, counting, databases, parsedDuring, serve,
} from './db.js';
import { extensionOnly, REASONS } from './edition.js';
import { PREPARED } from '../lib/statements.js';

const INSERT = `INSERT INTO orders (k, item, qty) VALUES ($1, $2, $3)
  RETURNING id, item, qty`;

let db;
let client;
let check;
let pool;
let closeServer;
let base;
let handlerRuns = 0;

const ordersOf = async (k) =>
  (await check.query('SELECT id FROM orders WHERE k = $1', [k])).rows.length;

before(async () => {
  ({ source: db } = await databases('execute_once'));
  client = await connect(db);
  check = await connect(db);
  await check.query('CREATE TABLE orders (id serial PRIMARY KEY, k text, item text, qty int)');
  pool = new pg.Pool({ database: db, max: 8 });
  const app = express();
  app.use(express.json({ verify: (req, res, buf) => { req.rawBody = buf; } }));
  app.post('/orders', idempotencyMiddleware({
    pool, scope: (req) => req.get('x-account'), statement: INSERT,
    params: (req) => [req.get('idempotency-key'), req.body.item, req.body.qty], status: 202,
  }), () => { handlerRuns++; });
  app.post('/nothing', idempotencyMiddleware({ pool, scope: 'nothing',
    statement: 'SELECT id FROM orders WHERE false' }), () => { handlerRuns++; });
  ({ base, close: closeServer } = await serve(app, 'handler_error'));
});
after(async () => {
  await closeServer?.();
  await pool?.end();
  await client?.end();
  await check?.end();
});

// console.error's lines while fn runs.
async function logged(fn) {
  const lines = [];
  const original = console.error;
  console.error = (...args) => { lines.push(args.join(' ')); };
  try {
    return { out: await fn(), lines };
  } finally {
    console.error = original;
  }
}

async function post({ key, body = { item: 'widget', qty: 2 }, account = 'acct_1',
  path = '/orders' }) {
  const headers = { 'Content-Type': 'application/json', 'X-Account': account };
  if (key !== undefined) headers['Idempotency-Key'] = key;
  const res = await fetch(`${base}${path}`, { method: 'POST', headers,
    body: JSON.stringify(body) });
  const bytes = Buffer.from(await res.arrayBuffer());
  return { status: res.status, headers: res.headers, bytes,
    body: bytes.length ? JSON.parse(bytes) : null };
}

// ---- runOnce's statement form ----

test('a new key and its replay: one round trip each, one row', async () => {
  const key = randomUUID();
  const options = { scope: 'acct_1', key, request: { item: 'pen', qty: 3 }, statement: INSERT,
    params: [key, 'pen', 3] };
  const c = counting(client);
  let first;
  let again;
  try {
    first = await runOnce(client, options);
    assert.equal(c.sent.length, 1, c.sent.join('\n'));
    again = await runOnce(client, options);
    assert.equal(c.sent.length, 2, c.sent.join('\n'));
  } finally {
    c.stop();
  }
  assert.match(c.sent[0], /idempotency\.execute_once\(/);
  assert.equal(first.statusCode, 201);
  assert.equal(first.replayed, false);
  assert.equal(first.attempt, 1);
  assert.deepEqual(first.response, { id: first.response.id, item: 'pen', qty: 3 });
  assert.equal(again.replayed, true);
  assert.deepEqual(again.response, first.response);
  assert.equal(await ordersOf(key), 1);
  assert.equal((await lookup(check, 'acct_1', key)).state, 'completed');
});

test('the status option is stored and replayed', async () => {
  const key = randomUUID();
  const options = { scope: 'acct_1', key, statement: INSERT, params: [key, 'cup', 1],
    status: 202 };
  assert.equal((await runOnce(client, options)).statusCode, 202);
  const again = await runOnce(client, options);
  assert.equal(again.statusCode, 202);
  assert.equal(again.replayed, true);
});

test("inside the caller's transaction it commits or rolls back with it", async () => {
  const key = randomUUID();
  await client.query('BEGIN');
  const c = counting(client);
  try {
    const r = await runOnce(client, { scope: 'acct_1', key, statement: INSERT,
      params: [key, 'tx', 1] });
    assert.equal(r.replayed, false);
  } finally {
    c.stop();
    await client.query('ROLLBACK');
  }
  assert.equal(c.sent.length, 1, c.sent.join('\n'));
  assert.equal(await ordersOf(key), 0);
  assert.equal(await lookup(check, 'acct_1', key), null);
});

test('params go as text in one text[]: each type as the server reads it', async () => {
  const when = new Date('2020-01-02T03:04:05.678Z');
  const params = [null, undefined, 41, 1.5, 2n ** 62n, true, 'café', when,
    Buffer.from([1, 2, 255]), { a: [1, 'x'] }, [1, 2], "'); DROP TABLE orders; --"];
  assert.deepEqual(params.map(statementParam), [null, null, '41', '1.5',
    '4611686018427387904', 'true', 'café', '2020-01-02T03:04:05.678Z', '\\x0102ff',
    '{"a":[1,"x"]}', '[1,2]', "'); DROP TABLE orders; --"]);
  const r = await runOnce(client, { scope: 'acct_1', key: randomUUID(), statement: `SELECT
      $1::text IS NULL AS n1, $2::text IS NULL AS n2, $3::int + 1 AS i, $4::float8 * 2 AS f,
      $5::bigint::text AS big, NOT $6::boolean AS b, $7::text AS s,
      $8::timestamptz = '2020-01-02T03:04:05.678Z'::timestamptz AS d, $9::bytea AS bytes,
      $10::jsonb AS j, $11::jsonb AS a, $12::text AS evil`, params });
  assert.deepEqual(r.response, { n1: true, n2: true, i: 42, f: 3, big: '4611686018427387904',
    b: false, s: 'café', d: true, bytes: '\\x0102ff', j: { a: [1, 'x'] }, a: [1, 2],
    evil: "'); DROP TABLE orders; --" });
  assert.equal(statementParam(Number.NaN), 'NaN');
  assert.equal(statementParam(-Infinity), '-Infinity');
  assert.throws(() => statementParam(() => 1), TypeError);
  assert.throws(() => statementParam(Symbol('s')), TypeError);
  assert.throws(() => statementParam(new Date('no date')), TypeError);
});

test('a parameter without a text form, or no statement, is a TypeError; nothing is sent',
  async () => {
    const c = counting(client);
    try {
      await assert.rejects(runOnce(client, { scope: 'acct_1', key: 'k-fn', statement: INSERT,
        params: [() => 1] }), TypeError);
      await assert.rejects(runOnce(client, { scope: 'acct_1', key: 'k-both',
        statement: INSERT }, () => [201, null]), TypeError);
      await assert.rejects(runOnce(client, { scope: 'acct_1', key: 'k-none' }), TypeError);
      await assert.rejects(runOnce(client, { scope: 'acct_1', key: 'k-empty',
        statement: '  ' }), TypeError);
    } finally {
      c.stop();
    }
    assert.deepEqual(c.sent, []);
  });

test('the outcomes: mismatch, in_progress and too_old throw as runOnce does', async () => {
  const key = randomUUID();
  const options = { scope: 'acct_1', key, request: { n: 1 }, statement: INSERT,
    params: [key, 'a', 1] };
  await runOnce(client, options);
  await assert.rejects(runOnce(client, { ...options, request: { n: 2 } }), KeyMismatchError);

  const held = randomUUID();
  const holder = await connect(db);
  try {
    await holder.query('BEGIN');
    await holder.query("SELECT idempotency.reserve('acct_1', $1)", [held]);
    await assert.rejects(runOnce(client, { scope: 'acct_1', key: held, statement: INSERT,
      params: [held, 'b', 1] }), KeyInProgressError);
    await holder.query('ROLLBACK');
  } finally {
    await holder.end();
  }
  assert.equal(await ordersOf(held), 0);

  await assert.rejects(runOnce(client, { scope: 'acct_1',
    key: '01890a5d-ac96-774b-bcce-b302099a8057', statement: INSERT, params: ['old', 'c', 1] }),
  KeyTooOldError);
  assert.equal(await ordersOf('old'), 0);
});

test('an error in the statement is thrown and leaves the key new: the retry runs it', async () => {
  const key = randomUUID();
  const options = { scope: 'acct_1', key, statement: INSERT, params: [key, 'x', 'not a number'] };
  await assert.rejects(runOnce(client, options), (err) => err.code === '22P02');
  assert.equal(await lookup(check, 'acct_1', key), null);
  assert.equal(await ordersOf(key), 0);
  const r = await runOnce(client, { ...options, params: [key, 'x', 5] });
  assert.equal(r.replayed, false);
  assert.equal(r.response.qty, 5);
  assert.equal(await ordersOf(key), 1);
});

test("execute_once's refusals come typed, and nothing is claimed", async () => {
  for (const [statement, Expected] of [
    ['SELECT 1 AS a; SELECT 2 AS b', StatementSyntaxError],
    ['SELEC 1', StatementSyntaxError],
    ['COMMIT', InvalidTransactionTerminationError],
    ['SELECT n FROM generate_series(1, 2) AS n', CardinalityViolationError],
  ]) {
    const key = randomUUID();
    await assert.rejects(runOnce(client, { scope: 'acct_1', key, statement }), Expected,
      statement);
    assert.equal(await lookup(check, 'acct_1', key), null, statement);
  }
});

test('executeOnce gives the reservation, with the statement as its response', async () => {
  const key = randomUUID();
  const r = await executeOnce(client, 'acct_1', key, INSERT, [key, 'e', 7], null,
    { statusCode: 200 });
  assert.equal(r.outcome, 'new');
  assert.equal(r.statusCode, 200);
  assert.equal(r.response.qty, 7);
  assert.ok(r.expiresAt instanceof Date);
});

test('a server before 0.3.0: ExtensionVersionError naming execute_once and 0.3.0',
  extensionOnly(REASONS.versions), async () => {
  const name = 'nodeclient_execute_once_020';
  const admin = await connect(process.env.PGDATABASE || 'postgres');
  try {
    await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await admin.query(`CREATE DATABASE ${name}`);
  } finally {
    await admin.end();
  }
  const old = await connect(name);
  try {
    await old.query("CREATE EXTENSION idempotency VERSION '0.2.0'");
    await assert.rejects(runOnce(old, { scope: 's', key: 'k', statement: 'SELECT 1 AS one' }),
      (err) => err instanceof ExtensionVersionError && /idempotency\.execute_once/.test(err.message) &&
        err.needed === '0.3.0' && /0\.3\.0/.test(err.message));
    const oldPool = new pg.Pool({ database: name, max: 1 });
    const app = express();
    app.post('/x', idempotencyMiddleware({ pool: oldPool, scope: 's',
      statement: 'SELECT 1 AS one' }), () => assert.fail('the handler ran'));
    const srv = http.createServer(app);
    await new Promise((r) => { srv.listen(0, '127.0.0.1', r); });
    try {
      const { out: res, lines } = await logged(() => fetch(
        `http://127.0.0.1:${srv.address().port}/x`, { method: 'POST',
          headers: { 'Idempotency-Key': 'k1', 'Content-Type': 'application/json' }, body: '{}' }));
      assert.equal(res.status, 500);
      assert.equal((await res.json()).error, 'internal_error');
      assert.ok(lines.some((l) => /idempotency\.execute_once/.test(l) && /0\.3\.0/.test(l)),
        lines.join('\n'));
    } finally {
      await new Promise((r) => { srv.close(r); });
      await oldPool.end();
    }
  } finally {
    await old.end();
  }
});

// ---- execute_once as a prepared statement ----

const NAME = 'idempotency_execute_once_v1';
const named = (sent) => sent.map((text) => text.startsWith(`[${NAME}] `));
// The client's own prepared statements on c's session (the managed edition's execute_once
// prepares the statement it runs under a name of its own).
const CLIENT_NAMES = Object.values(PREPARED).map(({ name }) => name);
const preparedOn = async (c) => (await c.query(
  'SELECT name FROM pg_prepared_statements WHERE name = ANY ($1) ORDER BY name',
  [CLIENT_NAMES])).rows.map((r) => r.name);

test('prepared once per connection: new keys and replays bound to it, one round trip a call',
  async () => {
    const c = await connect(db);
    try {
      const keys = [randomUUID(), randomUUID()];
      const call = (k) => runOnce(c, { scope: 'acct_1', key: k, statement: INSERT,
        params: [k, 'prep', 1] });
      const rt = counting(c);
      let outcomes;
      const parsed = await parsedDuring(c, async () => {
        outcomes = [await call(keys[0]), await call(keys[0]), await call(keys[1])];
        const r = await executeOnce(c, 'acct_1', keys[1], INSERT, [keys[1], 'prep', 1]);
        outcomes.push({ replayed: r.outcome === 'replay' });
      });
      rt.stop();
      assert.deepEqual(outcomes.map((o) => o.replayed), [false, true, false, true]);
      assert.deepEqual(named(rt.sent), [true, true, true, true], rt.sent.join('\n'));
      assert.deepEqual(parsed, [NAME], 'parsed by the first call only');
      assert.deepEqual(await preparedOn(c), [NAME]);
      for (const k of keys) assert.equal(await ordersOf(k), 1);
    } finally {
      await c.end();
    }
  });

test("prepared: the statement's parameters bound as one text[], array syntax in them as it is",
  async () => {
    const texts = ['NULL', null, '', ' lead', 'a,b', '{x}', 'back\\slash', 'quo"te', '\\"',
      'new\nline', 'café'];
    const c = await connect(db);
    try {
      const rt = counting(c);
      const r = await runOnce(c, { scope: 'acct_1', key: randomUUID(),
        statement: 'SELECT pg_catalog.to_jsonb(ARRAY[' +
          texts.map((_, i) => `$${i + 1}::text`).join(', ') + '])', params: texts });
      rt.stop();
      assert.deepEqual(named(rt.sent), [true], rt.sent.join('\n'));
      assert.deepEqual(r.response, texts);
    } finally {
      await c.end();
    }
  });

test('a prepared execute_once the server connection lost (26000) or holds already (42P05): ' +
  'applied once, unnamed from then on', async () => {
  const lost = await connect(db); // a pooler moved it, or DISCARD ALL
  const held = await connect(db); // another client of a pooler prepared the name there first
  try {
    const first = await parsedDuring(lost, () => runOnce(lost, { scope: 'acct_1',
      key: randomUUID(), statement: 'SELECT 1 AS one' }));
    assert.deepEqual(first, [NAME]);
    await lost.query(`DEALLOCATE ${NAME}`);
    await held.query(`PREPARE ${NAME} AS SELECT false`);
    for (const c of [lost, held]) {
      const k = randomUUID();
      const options = { scope: 'acct_1', key: k, statement: INSERT, params: [k, 'moved', 2] };
      const rt = counting(c);
      let r;
      const parsed = await parsedDuring(c, async () => { r = await runOnce(c, options); });
      rt.stop();
      assert.equal(r.replayed, false);
      assert.equal(c.getTransactionStatus(), 'I');
      assert.equal(await ordersOf(k), 1, 'the statement ran once');
      // refused at Bind (26000) or Parse (42P05), then sent unnamed
      assert.deepEqual(named(rt.sent), [true, false], rt.sent.join('\n'));
      assert.deepEqual(parsed.map((t) => t === NAME), c === held ? [true, false] : [false],
        parsed.join(' | '));
      const again = counting(c);
      assert.equal((await runOnce(c, options)).replayed, true);
      await runOnce(c, { ...options, key: randomUUID(), params: [randomUUID(), 'next', 1] });
      again.stop();
      assert.deepEqual(named(again.sent), [false, false], again.sent.join('\n'));
      assert.equal(await ordersOf(k), 1);
    }
  } finally {
    await lost.end();
    await held.end();
  }
});

test("named outside a transaction, unnamed inside the caller's (even where the server lost " +
  'the name): the caller\'s transaction is never failed by a Parse', async () => {
  const c = await connect(db);
  try {
    const call = (k) => runOnce(c, { scope: 'acct_1', key: k, statement: INSERT,
      params: [k, 'tx', 1] });
    const rt = counting(c);
    await call(randomUUID());
    rt.stop();
    assert.deepEqual(named(rt.sent), [true]);
    await c.query(`DEALLOCATE ${NAME}`); // pg still takes it for parsed on this connection
    const k = randomUUID();
    await c.query('BEGIN');
    const inside = counting(c);
    try {
      assert.equal((await call(k)).replayed, false);
      assert.equal((await executeOnce(c, 'acct_1', k, INSERT, [k, 'tx', 1])).outcome, 'replay');
    } finally {
      inside.stop();
    }
    assert.equal(c.getTransactionStatus(), 'T');
    await c.query('COMMIT');
    assert.deepEqual(named(inside.sent), [false, false], inside.sent.join('\n'));
    assert.equal(await ordersOf(k), 1);
  } finally {
    await c.end();
  }
});

test('executeOnce with prepare: false, and the middleware with prepare: false, never name it',
  async () => {
    const c = await connect(db);
    const onePool = new pg.Pool({ database: db, max: 1 });
    const app = express();
    app.use(express.json());
    for (const [path, prepare] of [['/named', undefined], ['/unnamed', false]]) {
      app.post(path, idempotencyMiddleware({ pool: onePool, scope: `prep${path}`, prepare,
        statement: 'SELECT $1::text AS k', params: (req) => [req.get('idempotency-key')] }),
      () => assert.fail('the handler ran'));
    }
    const srv = await serve(app);
    const postTo = async (path, k) => {
      const res = await fetch(`${srv.base}${path}`, { method: 'POST', body: '{}',
        headers: { 'Idempotency-Key': k, 'Content-Type': 'application/json' } });
      return [res.status, (await res.json()).k, res.headers.get('idempotent-replayed')];
    };
    const pooledPrepared = async () => {
      const pooled = await onePool.connect();
      try {
        return await preparedOn(pooled);
      } finally {
        pooled.release();
      }
    };
    try {
      const k = randomUUID();
      const r = await executeOnce(c, 'acct_1', k, 'SELECT 1 AS one', [], null,
        { prepare: false });
      assert.equal(r.outcome, 'new');
      assert.deepEqual(await preparedOn(c), []);
      assert.deepEqual(await postTo('/unnamed', k), [201, k, null]);
      assert.deepEqual(await postTo('/unnamed', k), [201, k, 'true']);
      assert.deepEqual(await pooledPrepared(), [], 'prepare: false');
      assert.deepEqual(await postTo('/named', k), [201, k, null]);
      assert.deepEqual(await pooledPrepared(), [NAME], 'the default: prepared');
      assert.deepEqual(await postTo('/unnamed', randomUUID()).then(([s]) => s), 201);
    } finally {
      await srv.close();
      await onePool.end();
      await c.end();
    }
  });

// ---- the middleware's statement option ----

test('middleware: a new key answered by the statement, its replay with the same bytes',
  async () => {
    const key = randomUUID();
    const before = handlerRuns;
    const first = await post({ key, body: { item: 'lamp', qty: 4 } });
    assert.equal(first.status, 202);
    assert.match(first.headers.get('content-type'), /^application\/json/);
    assert.equal(first.headers.get('idempotent-replayed'), null);
    assert.deepEqual(first.body, { id: first.body.id, item: 'lamp', qty: 4 });
    const again = await post({ key, body: { item: 'lamp', qty: 4 } });
    assert.equal(again.status, 202);
    assert.equal(again.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(again.bytes, first.bytes);
    assert.equal(handlerRuns, before);
    assert.equal(await ordersOf(key), 1);
  });

test('middleware: one round trip per new key and per replay', async () => {
  const key = randomUUID();
  const counts = [];
  const original = pg.Client.prototype.query;
  let n = 0;
  pg.Client.prototype.query = function counted(...args) {
    n++;
    return original.apply(this, args);
  };
  try {
    for (let i = 0; i < 2; i++) {
      n = 0;
      assert.equal((await post({ key })).status, 202);
      counts.push(n);
    }
  } finally {
    pg.Client.prototype.query = original;
  }
  assert.deepEqual(counts, [1, 1]);
});

test('middleware: 400, 422 and 409 as the general form; a statement without a row', async () => {
  assert.equal((await post({})).status, 400);
  const key = randomUUID();
  assert.equal((await post({ key })).status, 202);
  const other = await post({ key, body: { item: 'other', qty: 1 } });
  assert.equal(other.status, 422);
  assert.equal(other.body.error, 'idempotency_key_reused');

  const held = randomUUID();
  const holder = await connect(db);
  try {
    await holder.query('BEGIN');
    await holder.query("SELECT idempotency.reserve('acct_1', $1)", [held]);
    const busy = await post({ key: held });
    assert.equal(busy.status, 409);
    assert.equal(busy.body.error, 'idempotency_key_in_use');
    assert.match(busy.headers.get('retry-after'), /^[1-9][0-9]*$/);
    await holder.query('ROLLBACK');
  } finally {
    await holder.end();
  }
  assert.equal(await ordersOf(held), 0);

  const none = randomUUID();
  const empty = await post({ key: none, path: '/nothing' });
  assert.equal(empty.status, 201);
  assert.equal(empty.bytes.length, 0);
  const emptyAgain = await post({ key: none, path: '/nothing' });
  assert.equal(emptyAgain.headers.get('idempotent-replayed'), 'true');
  assert.deepEqual(emptyAgain.bytes, empty.bytes);
});

test('middleware: an error in the statement is a 500 with a log line; nothing is stored',
  async () => {
    const key = randomUUID();
    const { out: res, lines } = await logged(() => post({ key, body: { item: 'x', qty: 'many' } }));
    assert.equal(res.status, 500);
    assert.equal(res.body.error, 'internal_error');
    assert.ok(lines.some((l) => l.includes(key) && /nothing is stored/.test(l)), lines.join('\n'));
    assert.equal(await lookup(check, 'acct_1', key), null);
    assert.equal(await ordersOf(key), 0);
  });

test('middleware: a burst of one key from 8 concurrent requests makes one row', async () => {
  const key = randomUUID();
  const answers = await Promise.all(Array.from({ length: 8 }, () => post({ key })));
  assert.equal(await ordersOf(key), 1);
  const ok = answers.filter((a) => a.status === 202);
  assert.ok(ok.length >= 1);
  assert.ok(answers.every((a) => a.status === 202 || a.status === 409),
    answers.map((a) => a.status).join(' '));
  for (const a of ok) assert.deepEqual(a.bytes, ok[0].bytes);
  assert.equal(ok.filter((a) => a.headers.get('idempotent-replayed') === null).length, 1);
  const replay = await post({ key });
  assert.equal(replay.headers.get('idempotent-replayed'), 'true');
  assert.deepEqual(replay.bytes, ok[0].bytes);
});

test('middleware: 503 + Retry-After when the database is unreachable', async () => {
  const down = new pg.Pool({ host: '127.0.0.1', port: 1, connectionTimeoutMillis: 2000 });
  const app = express();
  app.post('/x', idempotencyMiddleware({ pool: down, scope: 'down', statement: 'SELECT 1 AS one' }),
    () => assert.fail('the handler ran'));
  const served = await serve(app);
  try {
    await assertDatabaseUnavailable(await fetch(`${served.base}/x`, { method: 'POST',
      headers: { 'Idempotency-Key': randomUUID(), 'Content-Type': 'application/json' },
      body: '{}' }));
  } finally {
    await served.close();
    await down.end();
  }
});
