// The connection layer's dependence on node-postgres: lib/connection.js uses internals of pg that
// are not in its public API (its header lists them). These tests check that the installed pg is
// one of the versions the module says it is tested with (PG_TESTED, package.json's peer range),
// and that each internal is there with the shape and the behaviour the module relies on, so
// that an upgrade of pg that changes one of them fails here, naming it, instead of in an
// application. The path for clients without them (pg-native, a wrapper) is tested in
// requests.test.js.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import { test } from 'node:test';
import pg from 'pg';
import {
  checkUsable, isConnectionLost, PG_TESTED, queryStatements, sharedStatement, transactionStatus,
  writesProtocol,
} from '../lib/connection.js';
import { connect, connected } from './db.js';

const require = createRequire(import.meta.url);
const installed = require('pg/package.json').version;
const ownPackage = JSON.parse(fs.readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
const lock = JSON.parse(fs.readFileSync(new URL('../package-lock.json', import.meta.url), 'utf8'));

// What to say when an internal is missing or changed.
const broken = (internal, use) => `node-postgres ${installed}: its internal ${internal} is ` +
  `missing or changed; lib/connection.js uses it ${use}. Adapt lib/connection.js to this pg ` +
  `(or keep pg within ${PG_TESTED}), then update PG_TESTED and package.json's peer range.`;

// Whether version (x.y.z) is within a range written '~x.y.z' (npm's: the same x.y, z or later).
function withinTilde(version, range) {
  const m = /^~(\d+)\.(\d+)\.(\d+)$/.exec(range);
  assert.ok(m, `PG_TESTED is written ~x.y.z, not ${range}`);
  const v = version.split('.').map(Number);
  return v[0] === Number(m[1]) && v[1] === Number(m[2]) && v[2] >= Number(m[3]);
}

const shared = connected('connection');

test('the installed pg, and the lock file\'s, are among the versions the module is tested with', () => {
  assert.equal(ownPackage.peerDependencies.pg, PG_TESTED,
    "package.json's peerDependencies.pg is lib/connection.js's PG_TESTED");
  assert.ok(withinTilde(installed, PG_TESTED), `the installed pg is ${installed}, outside ` +
    `${PG_TESTED}, the versions lib/connection.js is tested with: run the suite on it, then ` +
    'update PG_TESTED and package.json');
  const locked = lock.packages['node_modules/pg'].version;
  assert.ok(withinTilde(locked, PG_TESTED), `package-lock.json has pg ${locked}, outside ` +
    PG_TESTED);
  assert.ok(withinTilde(ownPackage.devDependencies.pg, PG_TESTED),
    `devDependencies.pg ${ownPackage.devDependencies.pg} is outside ${PG_TESTED}`);
});

test('a pg.Client has the protocol connection and the state fields the module reads', () => {
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

test('the connection reports ParameterStatus as a parameterStatus event', async () => {
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

test('a submittable is written with parse / bind / execute / sync and reads its rows as text', async () => {
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

test('a failing statement rejects the submittable and leaves the client usable', async () => {
  const { client } = shared;
  await assert.rejects(queryStatements(client, [{ text: 'SELECT 1/0', values: [] },
    { text: 'SELECT 1', values: [] }]), { code: '22012' },
  broken('the submittable protocol (handleError)', 'to fail a round trip'));
  assert.equal(transactionStatus(client), 'I');
  assert.deepEqual((await client.query('SELECT 2 AS n')).rows, [{ n: 2 }]);
});

test("pg's pipeline mode takes a Query by its prototype and keeps its named statements", () => {
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

test('on a pipelined connection, concurrent calls share one Parse and send no Describe',
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

test('a pipelined client without pg\'s Query class gets the same rows from pg\'s own query',
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

test('a client that was ended counts as a lost connection', async () => {
  const { db } = shared;
  const c = await connect(db);
  await c.end();
  assert.equal(c._ending, true, broken('client._ending', 'to tell a closed client'));
  assert.equal(isConnectionLost(null, c), true);
});

test('a client whose backend was terminated is not queryable', async () => {
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
