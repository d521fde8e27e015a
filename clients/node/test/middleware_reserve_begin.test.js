// The Idempotency-Key middleware on reserve_begin: a replay, a 409 or a 422 in one
// statement, a prepared statement the server lost, and the fallback to BEGIN + reserve on a
// server that refuses reserve_begin. Not in the Citus run (test/citus/clients.sh): there the
// coordinator refuses reserve_begin, and middleware.test.js runs on that fallback.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { idempotencyMiddleware } from '../index.js';
import { FAST_PATH } from '../lib/connection.js';
import { EDITION as EDITION_SQL } from '../lib/statements.js';
import { connect, databases, FAST_PATH_ONLY, sentText } from './db.js';
import { extensionOnly, MANAGED, REASONS } from './edition.js';

const RB = extensionOnly(REASONS.reserveBegin);
// The tests that count the statements of each round trip count the fast path's.
const RB_FAST = FAST_PATH ? RB : FAST_PATH_ONLY;

let database;
let check;

const ordersOf = async (k) =>
  (await check.query('SELECT id FROM orders WHERE k = $1 ORDER BY id', [k])).rows.map((r) => r.id);

before(async () => {
  ({ source: database } = await databases('mw_reserve_begin'));
  check = await connect(database);
  await check.query('CREATE TABLE orders (id serial PRIMARY KEY, k text, item text)');
});
after(async () => {
  await check?.end();
});

// A plain node:http server on the middleware over a pool whose clients record the statements
// they send, in order.
// together: the first that many checkouts wait for each other, so that their requests send
// their first statement in the same turn.
// beforeAnswer(client): run by the handler after its INSERT, on the request's connection.
async function recordingServer({ max = 2, prepare, together = 0, beforeAnswer } = {}) {
  const statements = [];
  const recorded = new pg.Pool({ database, max });
  const waiting = [];
  const checkout = async () => {
    const client = await recorded.connect();
    if (waiting.length < together) {
      await new Promise((resolve) => {
        waiting.push(resolve);
        if (waiting.length === together) waiting.forEach((go) => go());
      });
    }
    return client;
  };
  // the server's edition, which the middleware asks once, is counted apart (editionsAsked)
  let editionsAsked = 0;
  recorded.on('connect', (client) => {
    const send = client.query.bind(client);
    client.query = (query, ...rest) => {
      if (sentText(query) === EDITION_SQL) editionsAsked += 1;
      else statements.push(sentText(query));
      return send(query, ...rest);
    };
  });
  const mw = idempotencyMiddleware({ pool: { connect: checkout }, scope: 'recorded', prepare });
  const srv = http.createServer(async (req, res) => {
    await mw(req, res, async () => {
      const { rows } = await req.idempotency.client.query(
        'INSERT INTO orders (k, item) VALUES ($1, $2) RETURNING id', [req.idempotency.key, 'r']);
      await beforeAnswer?.(req.idempotency.client);
      res.writeHead(201, { 'Content-Type': 'application/json' }).end(`{"id":${rows[0].id}}`);
    });
  });
  await new Promise((r) => { srv.listen(0, '127.0.0.1', r); });
  const url = `http://127.0.0.1:${srv.address().port}`;
  const send = async (key, body = '{"n": 1}') => {
    statements.length = 0;
    const res = await fetch(url, { method: 'POST', body,
      headers: { 'Idempotency-Key': key, 'Content-Type': 'application/json' } });
    return { status: res.status, replayed: res.headers.get('idempotent-replayed'),
      body: await res.json(), statements: [...statements] };
  };
  // Connections of this database, other than check's, that are not idle.
  const busy = async () => (await check.query(`SELECT count(*)::int AS n FROM pg_stat_activity
    WHERE datname = current_database() AND application_name = '' AND state <> 'idle'
      AND pid <> pg_backend_pid()`)).rows[0].n;
  // The same once a ROLLBACK sent after the answer has run (none of them takes longer than
  // 30 s), or the last count; also what a connection that gave its last answer counts as
  // (its server process marks itself idle just after sending ReadyForQuery: on a loaded
  // machine the test's query can come first). A transaction left open stays counted.
  const settled = async () => {
    const deadline = Date.now() + 30000;
    let n = await busy();
    while (n > 0 && Date.now() < deadline) {
      await new Promise((r) => { setImmediate(r); });
      n = await busy();
    }
    return n;
  };
  const close = async () => {
    await new Promise((r) => { srv.close(r); });
    await recorded.end();
  };
  return { send, busy, settled, close, pool: recorded, editionsAsked: () => editionsAsked };
}

test('one statement a request for a replay, a 422 and a 409: reserve_begin, no BEGIN, no ROLLBACK', RB_FAST, async () => {
  const s = await recordingServer();
  try {
    const key = randomUUID();
    const first = await s.send(key);
    assert.equal(first.status, 201);
    assert.equal(first.statements.length, 3, first.statements.join(' | '));
    // prepared: parsed once per connection, complete's with reserve_begin's
    assert.match(first.statements[0], new RegExp('^\\[idempotency_complete_v1\\] SELECT ' +
      'idempotency\\.complete\\(\\$1.* \\(parse only\\); \\[idempotency_reserve_begin_v1\\] SELECT .* ' +
      'FROM idempotency\\.reserve_begin\\(\\$1', 's'));
    assert.doesNotMatch(first.statements[0], /BEGIN;/);
    assert.match(first.statements[2],
      /^\[idempotency_complete_v1\] SELECT idempotency\.complete\(\$1.*; COMMIT$/s);

    const replay = await s.send(key);
    assert.equal(replay.status, 201);
    assert.equal(replay.replayed, 'true');
    assert.deepEqual(replay.body, first.body);
    assert.equal(replay.statements.length, 1, replay.statements.join(' | '));
    const mismatch = await s.send(key, '{"n": 2}');
    assert.equal(mismatch.status, 422);
    assert.equal(mismatch.statements.length, 1, mismatch.statements.join(' | '));

    // a key held by an open transaction: 409, and this request leaves nothing open either
    const held = await connect(database);
    try {
      const heldKey = randomUUID();
      await held.query("SELECT * FROM idempotency.reserve_begin('recorded', $1)", [heldKey]);
      const conflict = await s.send(heldKey);
      assert.equal(conflict.status, 409);
      assert.equal(conflict.statements.length, 1, conflict.statements.join(' | '));
      await held.query('ROLLBACK');
    } finally {
      await held.end();
    }
    assert.equal(await s.settled(), 0, 'no connection of the pool is left in a transaction');
    assert.deepEqual(await ordersOf(key), [first.body.id]);
  } finally {
    await s.close();
  }
});

// A new key and its replay through s, where the middleware claims with BEGIN + reserve after
// `before` other statements (0: none; 1: a refused reserve_begin): the new key's statements
// are those, BEGIN + reserve, the insert and complete + COMMIT, and no reserve_begin after
// them; the replay starts with BEGIN. Returns the replay's answer.
async function newKeyThenReplay(s, before) {
  const key = randomUUID();
  const first = await s.send(key);
  const sent = first.statements.join(' | ');
  assert.equal(first.status, 201);
  assert.equal(first.statements.length, before + 3, sent);
  assert.match(first.statements[before], /^BEGIN; SELECT .* FROM idempotency\.reserve\(/s);
  assert.ok(first.statements.slice(before).every((t) => !t.includes('reserve_begin')), sent);
  const replay = await s.send(key);
  assert.equal(replay.replayed, 'true');
  assert.match(replay.statements[0], /^BEGIN; /);
  return replay;
}

test('a server that refuses reserve_begin (before 0.3.0): BEGIN + reserve, and ROLLBACK after a replay', RB_FAST, async () => {
  const fn = 'idempotency.reserve_begin(text, text, bytea, interval, interval, interval)';
  const s = await recordingServer();
  await s.send(randomUUID()); // the edition, asked once: it has reserve_begin, renamed below
  await check.query(`ALTER FUNCTION ${fn} RENAME TO reserve_begin_hidden`);
  try {
    // the refused reserve_begin, then BEGIN + reserve, the insert, complete + COMMIT
    const replay = await newKeyThenReplay(s, 1);
    assert.equal(replay.status, 201);
    assert.equal(replay.statements.at(-1), 'ROLLBACK');
    assert.equal(await s.settled(), 0, 'the ROLLBACK after the answer ended the transaction');
  } finally {
    await check.query(`ALTER FUNCTION idempotency.reserve_begin_hidden(text, text, bytea,
      interval, interval, interval) RENAME TO reserve_begin`);
    await s.close();
  }
});

// A new key and its replay once the middleware has met a prepared statement it cannot use
// (26000 or 42P05): that statement, then reserve_begin unnamed (its values bound), the insert,
// complete + COMMIT; the replay in one statement. Returns the first answer.
async function switchesToUnnamed(s) {
  const key = randomUUID();
  const first = await s.send(key);
  assert.equal(first.status, 201);
  assert.equal(first.statements.length, 4, first.statements.join(' | '));
  assert.match(first.statements[1], /^SELECT .* FROM idempotency\.reserve_begin\(\$1, \$2, /s);
  const replay = await s.send(key);
  assert.equal(replay.replayed, 'true');
  assert.equal(replay.statements.length, 1);
  return { key, first };
}

test('a prepared reserve_begin the server lost (a pooler, DISCARD ALL): unprepared from then on', RB_FAST, async () => {
  const s = await recordingServer({ max: 1 });
  try {
    const first = await s.send(randomUUID());
    assert.equal(first.status, 201);
    const c = await s.pool.connect(); // the pool's one connection, which prepared it
    await c.query('DEALLOCATE idempotency_reserve_begin_v1');
    c.release();
    await switchesToUnnamed(s); // the lost statement: 26000
    assert.equal(await s.settled(), 0);
  } finally {
    await s.close();
  }
});

test('a prepared statement of either name already on the server connection (a pooler shares it): unprepared from then on', RB_FAST, async () => {
  // reserve_begin's, or complete's (parsed in the claim's round trip)
  for (const name of ['idempotency_reserve_begin_v1', 'idempotency_complete_v1']) {
    const s = await recordingServer({ max: 1 });
    try {
      // what another client of a transaction-mode pooler leaves on the shared server connection
      const c = await s.pool.connect();
      await c.query(`PREPARE ${name} AS SELECT 1`);
      c.release();
      const { key, first } = await switchesToUnnamed(s); // the refused Parse: 42P05
      assert.match(first.statements[0], new RegExp(`\\[${name}\\]`));
      assert.deepEqual(await ordersOf(key), [first.body.id]);
    } finally {
      await s.close();
    }
  }
});

test('complete\'s prepared statement lost inside the transaction: 500, nothing committed, then unprepared', RB_FAST, async () => {
  let lose = true;
  const s = await recordingServer({ max: 1,
    beforeAnswer: async (client) => {
      if (!lose) return;
      lose = false;
      await client.query('DEALLOCATE idempotency_complete_v1');
    } });
  try {
    const key = randomUUID();
    const lost = await s.send(key);
    assert.equal(lost.status, 500);
    assert.match(lost.statements[3], /^\[idempotency_complete_v1\] SELECT idempotency\.complete\(/);
    assert.deepEqual(await ordersOf(key), [], 'rolled back with the claim');
    const retry = await s.send(key);
    assert.equal(retry.status, 201);
    assert.equal(retry.replayed, null);
    assert.match(retry.statements[0], /^SELECT .* FROM idempotency\.reserve_begin\(\$1, \$2, /s);
    assert.match(retry.statements.at(-1), /^SELECT idempotency\.complete\(\$1.*; COMMIT$/s);
    assert.deepEqual(await ordersOf(key), [retry.body.id]);
    assert.equal(await s.settled(), 0);
  } finally {
    await s.close();
  }
});

test('requests whose prepared statements all meet 42P05 at once: each retries unprepared', RB, async () => {
  const s = await recordingServer({ max: 2, together: 2 });
  try {
    // both pool connections hold the name, as server connections a pooler shares would
    const held = await Promise.all([s.pool.connect(), s.pool.connect()]);
    for (const c of held) await c.query('PREPARE idempotency_reserve_begin_v1 AS SELECT 1');
    held.forEach((c) => c.release());
    const keys = [randomUUID(), randomUUID()];
    const answers = await Promise.all(keys.map((k) => s.send(k)));
    assert.deepEqual(answers.map((a) => a.status), [201, 201]);
    for (const [i, k] of keys.entries()) assert.deepEqual(await ordersOf(k), [answers[i].body.id]);
  } finally {
    await s.close();
  }
});

test('prepare: false sends reserve_begin unnamed with its values bound, never a prepared statement', RB, async () => {
  const s = await recordingServer({ prepare: false });
  try {
    const first = await s.send(randomUUID());
    assert.equal(first.status, 201);
    assert.match(first.statements[0], /^SELECT .* FROM idempotency\.reserve_begin\(\$1, \$2, /s);
    assert.equal(first.statements.filter((t) => t.startsWith('[')).length, 0);
  } finally {
    await s.close();
  }
});

test('a server without reserve_begin (the managed edition; here renamed away on the extension): ' +
  'asked once, then BEGIN + reserve, never a refused call', FAST_PATH_ONLY, async () => {
  const fn = 'idempotency.reserve_begin(text, text, bytea, interval, interval, interval)';
  if (!MANAGED) await check.query(`ALTER FUNCTION ${fn} RENAME TO reserve_begin_hidden`);
  const s = await recordingServer();
  try {
    // BEGIN + reserve, the insert, complete + COMMIT: reserve_begin is never sent
    const replay = await newKeyThenReplay(s, 0);
    assert.equal(s.editionsAsked(), 1);
    assert.equal(await s.settled(), 0);
  } finally {
    if (!MANAGED) {
      await check.query(`ALTER FUNCTION idempotency.reserve_begin_hidden(text, text, bytea,
        interval, interval, interval) RENAME TO reserve_begin`);
    }
    await s.close();
  }
});
