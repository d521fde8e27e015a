// Test databases on the cluster of the PG* environment (scripts/test.sh's test cluster). Each
// test file (its own process under node --test) gets databases of its own, created afresh:
// nodeclient_NAME (keys, the outbox's source) and nodeclient_NAME_target (the consumer's).
// With IDEM_TEST_DB_SETUP set (test/citus/clients.sh), that command is then run with each
// database's name (there: it makes the database a Citus one).
import { execFileSync } from 'node:child_process';
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before } from 'node:test';
import pg from 'pg';
import { FAST_PATH, PG_VERSION } from '../lib/connection.js';

export function connect(database) {
  const client = new pg.Client({ database });
  return client.connect().then(() => client);
}

// Creates both databases with the extension; returns their names.
export async function databases(name) {
  const source = `nodeclient_${name}`;
  const target = `${source}_target`;
  const admin = await connect(process.env.PGDATABASE || 'postgres');
  try {
    await admin.query('SET client_min_messages = warning');
    const { rows } = await admin.query(
      'SELECT slot_name FROM pg_replication_slots WHERE database IN ($1, $2)', [source, target]);
    for (const { slot_name: slot } of rows)
      await admin.query('SELECT pg_drop_replication_slot($1)', [slot]);
    for (const db of [source, target]) {
      await admin.query(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`);
      await admin.query(`CREATE DATABASE ${db}`);
    }
  } finally {
    await admin.end();
  }
  for (const db of [source, target]) {
    const c = await connect(db);
    await c.query('CREATE EXTENSION idempotency');
    await c.end();
    if (process.env.IDEM_TEST_DB_SETUP) execFileSync(process.env.IDEM_TEST_DB_SETUP, [db]);
  }
  return { source, target };
}

// Resolves once condition() is true, asking again every 50 ms; fails after 60 s saying what it
// waited for.
export async function until(what, condition) {
  const end = Date.now() + 60_000;
  while (!(await condition())) {
    if (Date.now() > end) assert.fail(`still not ${what} after 60 s`);
    await new Promise((r) => { setTimeout(r, 50); });
  }
}

// For the calling test file: { db, client }, filled in before its tests (db: the source
// database of databases(name); client: connected to it, ended after the tests).
export function connected(name) {
  const shared = {};
  before(async () => {
    ({ source: shared.db } = await databases(name));
    shared.client = await connect(shared.db);
  });
  after(async () => {
    await shared.client?.end();
  });
  return shared;
}

// An HTTP server for app on a free local port: { base, close }. With errorName, an Express
// app answers an error its handlers pass on with a 500 { error: errorName, message }.
export async function serve(app, errorName = undefined) {
  if (errorName !== undefined) {
    app.use((err, req, res, next) => { // eslint-disable-line no-unused-vars
      res.status(500).json({ error: errorName, message: err.message });
    });
  }
  const server = http.createServer(app);
  await new Promise((r) => { server.listen(0, '127.0.0.1', r); });
  return { base: `http://127.0.0.1:${server.address().port}`,
    close: () => new Promise((r) => { server.close(r); }) };
}

// The middleware's answer when the database cannot be reached: 503, Retry-After: 1.
export async function assertDatabaseUnavailable(res) {
  assert.equal(res.status, 503);
  assert.equal(res.headers.get('retry-after'), '1');
  assert.equal((await res.json()).error, 'database_unavailable');
}

export const vectorsPath = new URL('../../../test/vectors/fingerprint.jsonl', import.meta.url);

// What one client.query call sends, as text: a query's text ('[name] ' before a prepared
// statement's), or the client's several statements in one round trip (lib/connection.js's
// Statements), joined by '; ' ('(parse only)' after one that is parsed and not run).
export function sentText(query) {
  if (typeof query === 'string') return query;
  const one = ({ name, text, values }, parseOnly = false) =>
    `${name ? `[${name}] ` : ''}${text}${parseOnly && values === undefined ? ' (parse only)' : ''}`;
  return query.statements ? query.statements.map((s) => one(s, true)).join('; ') : one(query);
}

// Counts the round trips of a client (each query() call is one: pg does not pipeline), with
// what each sends (sentText).
export function counting(client) {
  const sent = [];
  const original = client.query;
  client.query = function counted(...args) {
    sent.push(sentText(args[0]));
    return original.apply(this, args);
  };
  return { sent, stop: () => { client.query = original; } };
}

// The names of the statements c parses (pg's Parse messages; an unnamed one's text) while fn
// runs.
export async function parsedDuring(c, fn) {
  const parsed = [];
  const parse = c.connection.parse;
  c.connection.parse = function spied(q) { parsed.push(q.name || q.text); return parse.call(this, q); };
  try {
    await fn();
  } finally {
    c.connection.parse = parse;
  }
  return parsed;
}

// The options of a test that counts the fast path's statements and round trips (several
// statements in one write, prepared statements parsed with the claim): not run where the fast
// path is off (a pg release it is not tested with: the oldest's run); test/public_path.test.js
// runs the same calls there.
export const FAST_PATH_ONLY = FAST_PATH ? {} : { skip: `the fast path is off on pg ${PG_VERSION}` };
