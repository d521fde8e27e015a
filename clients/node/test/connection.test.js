// The connection layer's dependence on node-postgres: lib/connection.js's fast path uses
// internals of pg that are not in its public API (its header lists them), on the pg releases it
// is tested with only. These tests check that the installed pg is one the suite runs on (the
// oldest of package.json's peer range, or the newest, the lock file's), that the fast path is
// on exactly for the releases it is tested with, and, where it is on, that each internal is
// there with the shape and the behaviour the module relies on, so that a pg that changes one
// of them fails here, naming it, instead of in an application. The public path is
// test/public_path.test.js's (and the whole suite's on the oldest pg).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import { test } from 'node:test';
import pg from 'pg';
import {
  checkUsable, FAST_PATH, fastPathFor, isConnectionLost, PG_FAST_PATH_TESTED, PG_OLDEST_TESTED,
  PG_VERSION, queryStatements, sharedStatement, transactionStatus, writesProtocol,
} from '../lib/connection.js';
import { connect, connected } from './db.js';

const require = createRequire(import.meta.url);
const installed = require('pg/package.json').version;
const ownPackage = JSON.parse(fs.readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
const lock = JSON.parse(fs.readFileSync(new URL('../package-lock.json', import.meta.url), 'utf8'));
const oldestLock = JSON.parse(fs.readFileSync(new URL('./pg-oldest/package-lock.json',
  import.meta.url), 'utf8'));
// The tests of the internals run where the fast path is on (the newest pg's run).
const fast = { skip: FAST_PATH ? false : `the fast path is off on pg ${installed}` };

// What to say when an internal is missing or changed.
const broken = (internal, use) => `node-postgres ${installed}: its internal ${internal} is ` +
  `missing or changed; lib/connection.js uses it ${use}. Adapt lib/connection.js to this pg ` +
  `(or keep the fast path off for it), then add it to PG_FAST_PATH_TESTED.`;

const shared = connected('connection');

test('the installed pg is one the suite runs on; the peer range starts at the oldest', () => {
  assert.equal(ownPackage.peerDependencies.pg, `^${PG_OLDEST_TESTED}`,
    "package.json's peerDependencies.pg is ^ lib/connection.js's PG_OLDEST_TESTED");
  const newest = PG_FAST_PATH_TESTED.at(-1);
  assert.equal(lock.packages['node_modules/pg'].version, newest);
  assert.equal(ownPackage.devDependencies.pg, newest);
  assert.equal(oldestLock.packages['node_modules/pg'].version, PG_OLDEST_TESTED);
  assert.equal(installed, PG_VERSION);
  assert.ok([PG_OLDEST_TESTED, newest].includes(installed), `the installed pg is ${installed}, ` +
    'not one the suite runs on: run the suite on it, then update lib/connection.js');
});

test('the fast path is on for the pg releases it is tested with, and only for them', () => {
  assert.equal(FAST_PATH, fastPathFor(installed));
  for (const version of PG_FAST_PATH_TESTED) {
    assert.equal(fastPathFor(version, undefined), true, version);
    assert.equal(fastPathFor(version, 'off'), false, `${version}, IDEMPOTENCY_PG_FAST_PATH=off`);
  }
  for (const version of [PG_OLDEST_TESTED, '8.23.2', '8.24.0', '9.0.0', null])
    assert.equal(fastPathFor(version, undefined), false, String(version));
});

test('a pg.Client has the protocol connection and the state fields the module reads', fast, () => {
  const { db } = shared;
  const c = new pg.Client({ database: db });
  assert.ok(c.connection instanceof pg.Connection,
    broken('client.connection (a pg.Connection)', 'to write protocol messages'));
  assert.ok(c.connection.parsedStatements !== null &&
    Object.getPrototypeOf(c.connection.parsedStatements) === Object.prototype,
  broken('connection.parsedStatements (a plain object)', 'to know the statements parsed'));
  for (const name of ['parse', 'bind', 'execute', 'sync', 'sendCopyFail', 'on', 'removeListener']) {
    assert.equal(typeof c.connection[name], 'function',
      broken(`connection.${name}()`, 'to send several statements in one write'));
  }
  for (const name of ['cork', 'uncork']) {
    assert.equal(typeof c.connection.stream[name], 'function',
      broken(`connection.stream.${name}()`, 'to put several messages in one write'));
  }
  assert.equal(c._queryable, true, broken('client._queryable', 'to tell a broken client'));
  assert.equal(c._ending, false, broken('client._ending', 'to tell a closed client'));
  assert.equal(c.pipeline, false, broken('client.pipeline', 'to leave pipeline mode alone'));
  assert.equal(new pg.Client({ database: db, pipeline: true }).pipeline, true,
    broken('client.pipeline', 'to leave pipeline mode alone'));
  assert.equal(typeof c.getTransactionStatus, 'function',
    broken('client.getTransactionStatus()', 'to see a failed or open transaction'));
  assert.equal(writesProtocol(c), true, 'writesProtocol sees pg\'s own client');
});

test('getTransactionStatus tells idle, open and failed transactions apart', async () => {
  const { db } = shared;
  const c = await connect(db);
  try {
    await c.query('SELECT 1');
    assert.equal(transactionStatus(c), 'I', broken('client.getTransactionStatus()', 'idle'));
    await c.query('BEGIN');
    assert.equal(transactionStatus(c), 'T', broken('client.getTransactionStatus()', 'open'));
    await assert.rejects(c.query('SELECT 1/0'));
    // pg reads the status from ReadyForQuery, which follows the error: seen once the next
    // statement has been answered
    await assert.rejects(c.query('SELECT 1'), { code: '25P02' });
    assert.equal(transactionStatus(c), 'E', broken('client.getTransactionStatus()', 'failed'));
    await c.query('ROLLBACK');
    assert.equal(transactionStatus(c), 'I', broken('client.getTransactionStatus()', 'idle'));
  } finally {
    await c.end();
  }
});

test('the connection reports ParameterStatus as a parameterStatus event', fast, async () => {
  const { db } = shared;
  const c = await connect(db);
  try {
    const seen = [];
    c.connection.on('parameterStatus', (msg) => seen.push([msg.parameterName, msg.parameterValue]));
    checkUsable(c); // follows the connection's client_encoding from here on
    await c.query("SET client_encoding = 'LATIN1'");
    assert.deepEqual(seen.filter(([name]) => name === 'client_encoding'),
      [['client_encoding', 'LATIN1']],
    broken("the connection's 'parameterStatus' event ({ parameterName, parameterValue })",
      "to follow the session's client_encoding"));
    assert.throws(() => checkUsable(c), { name: 'ClientEncodingError' });
  } finally {
    await c.end();
  }
});

// connection.parse and connection.describe of client counted while during() runs.
async function countingMessages(client, during) {
  const counts = { parse: 0, describe: 0 };
  const originals = {};
  for (const name of Object.keys(counts)) {
    originals[name] = client.connection[name];
    client.connection[name] = function counted(...args) {
      counts[name]++;
      return originals[name].apply(this, args);
    };
  }
  try {
    await during();
  } finally {
    Object.assign(client.connection, originals);
  }
  return counts;
}

test('a submittable is written with parse / bind / execute / sync and reads its rows as text', fast, async () => {
  const { client } = shared;
  const parsing = [];
  const onParsed = () => parsing.push('parseComplete');
  client.connection.on('parseComplete', onParsed);
  const text = 'SELECT $1::text AS a, NULL::text AS b, $2::int + 1 AS c';
  const parseOnly = 'SELECT $1::text AS only_parsed';
  try {
    const rows = await queryStatements(client, [
      { name: 'idempotency_connection_parsed', text: parseOnly },
      { name: 'idempotency_connection_probe', text, values: ['x', 41] },
      { text: 'SELECT 1 WHERE false', values: [] },
    ]);
    assert.deepEqual(rows, [[['x', null, '42']], []],
      broken('the submittable protocol (handleDataRow({ fields }), handleCommandComplete, ' +
        'handleReadyForQuery)', 'to read the rows of several statements'));
  } finally {
    client.connection.removeListener('parseComplete', onParsed);
  }
  assert.equal(parsing.length, 3, // the two named statements and the unnamed one
    broken("the connection's 'parseComplete' event", 'to record the statements it parsed'));
  assert.equal(client.connection.parsedStatements.idempotency_connection_probe, text,
    broken('connection.parsedStatements', 'to record a parsed statement under its name'));
  assert.equal(client.connection.parsedStatements.idempotency_connection_parsed, parseOnly,
    broken('connection.parsedStatements', 'to record a parsed statement under its name'));
  // parsed now: the next round trip sends no Parse for it, and pg's own Query reuses it too
  const ours = await countingMessages(client, async () => {
    assert.deepEqual(await queryStatements(client,
      [{ name: 'idempotency_connection_probe', text, values: ['y', 1] }]), [[['y', null, '2']]]);
  });
  assert.equal(ours.parse, 0, 'a statement parsed on this connection is not parsed again');
  const pgs = await countingMessages(client, async () => {
    const { rows } = await client.query({ name: 'idempotency_connection_probe', text,
      values: ['z', 2] });
    assert.deepEqual(rows, [{ a: 'z', b: null, c: 3 }]);
  });
  assert.equal(pgs.parse, 0, broken('connection.parsedStatements',
    "to share the statements parsed with pg's own prepared statements"));
});

test('a failing statement rejects the submittable and leaves the client usable', fast, async () => {
  const { client } = shared;
  await assert.rejects(queryStatements(client, [{ text: 'SELECT 1/0', values: [] },
    { text: 'SELECT 1', values: [] }]), { code: '22012' },
  broken('the submittable protocol (handleError)', 'to fail a round trip'));
  assert.equal(transactionStatus(client), 'I');
  assert.deepEqual((await client.query('SELECT 2 AS n')).rows, [{ n: 2 }]);
});

test("pg's pipeline mode takes a Query by its prototype and keeps its named statements", fast, () => {
  const { db } = shared;
  assert.equal(typeof pg.Client.Query, 'function',
    broken('Client.Query (the Query class)', 'to run a statement on a pipelined connection'));
  const c = new pg.Client({ database: db, pipeline: true });
  assert.equal(c.constructor.Query, pg.Query,
    broken('client.constructor.Query', 'to run a statement on a pipelined connection'));
  assert.ok(c.connection.submittedNamedStatements !== null &&
    Object.getPrototypeOf(c.connection.submittedNamedStatements) === Object.prototype,
  broken('connection.submittedNamedStatements (a plain object)',
    'to parse a named statement once while calls behind it are in flight'));
});

test('on a pipelined connection, concurrent calls share one Parse and send no Describe', fast,
  async () => {
    const { db } = shared;
    const c = new pg.Client({ database: db, pipeline: true });
    await c.connect();
    const name = 'idempotency_connection_pipelined';
    const text = 'SELECT $1::text AS a, NULL::text AS b, $2::int + 1 AS c';
    try {
      let answers;
      const counts = await countingMessages(c, async () => {
        answers = await Promise.allSettled([
          ...[0, 1, 2].map((i) => sharedStatement(c, { name, text, values: [`x"\\${i}`, i] })),
          sharedStatement(c, { text: 'SELECT 1/0', values: [] }),
          sharedStatement(c, { name, text, values: ['{a,b}', 10] }),
        ]);
      });
      assert.deepEqual(answers.slice(0, 3).map((a) => a.value),
        [0, 1, 2].map((i) => [[`x"\\${i}`, null, String(i + 1)]]),
      broken('the submittable protocol in pipeline mode', 'to read the rows of each call'));
      assert.equal(answers[3].status, 'rejected');
      assert.equal(answers[3].reason.code, '22012', 'an error stays with its call');
      assert.deepEqual(answers[4].value, [['{a,b}', null, '11']]);
      assert.deepEqual(counts, { parse: 2, describe: 0 }, // the named statement, once; 1/0
        broken('connection.submittedNamedStatements',
          'to parse a named statement once while calls behind it are in flight'));
      assert.equal(c.connection.parsedStatements[name], text,
        broken("the client's ParseComplete (by the query's name and text)",
          'to record a statement parsed on a pipelined connection'));
      assert.equal(c.connection.submittedNamedStatements[name], undefined);
      // pg's own prepared query of that name reuses the statement parsed
      const again = await countingMessages(c, async () => {
        assert.deepEqual((await c.query({ name, text, values: ['y', 1] })).rows,
          [{ a: 'y', b: null, c: 2 }]);
      });
      assert.equal(again.parse, 0);
    } finally {
      await c.end();
    }
  });

test('a pipelined client without pg\'s Query class gets the same rows from pg\'s own query', fast,
  async () => {
    const { db } = shared;
    class Wrapped extends pg.Client {}
    Wrapped.Query = undefined;
    const c = new Wrapped({ database: db, pipeline: true });
    await c.connect();
    try {
      const counts = await countingMessages(c, async () => {
        assert.deepEqual(await sharedStatement(c, { name: 'idempotency_connection_wrapped',
          text: 'SELECT $1::text AS a, $2::int AS b', values: ['x', 1] }), [['x', '1']]);
      });
      assert.equal(counts.describe, 1, "pg's own Query describes its portal");
    } finally {
      await c.end();
    }
  });

test('a client that was ended counts as a lost connection', fast, async () => {
  const { db } = shared;
  const c = await connect(db);
  await c.end();
  assert.equal(c._ending, true, broken('client._ending', 'to tell a closed client'));
  assert.equal(isConnectionLost(null, c), true);
});

test('a client whose backend was terminated is not queryable', fast, async () => {
  const { db, client } = shared;
  const c = await connect(db);
  const errored = new Promise((resolve) => { c.on('error', resolve); });
  const { rows: [{ pid }] } = await c.query('SELECT pg_backend_pid() AS pid');
  await client.query('SELECT pg_terminate_backend($1)', [pid]);
  await errored;
  assert.equal(c._queryable, false, broken('client._queryable', 'to tell a broken client'));
  assert.equal(isConnectionLost(null, c), true);
  await c.end().catch(() => {});
});
