// The extension versions the client declares, and what it says when the server's is missing
// or older: an ExtensionVersionError naming both versions, not an undefined function. Against
// databases of their own: one with the extension at 0.2.0 (the oldest supported, without
// claim_once), one without it.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, test } from 'node:test';
import {
  checkExtension, claimOnce, CLIENT_VERSION, Edition, EXTENSION_VERSIONS, ExtensionVersionError,
  serverEdition,
} from '../index.js';
import { connect, counting, databases } from './db.js';
import { EDITION, extensionOnly, MANAGED, REASONS } from './edition.js';

const OLD_DB = 'nodeclient_versions_old';
const NONE_DB = 'nodeclient_versions_none';
const SCRIPT_DB = 'nodeclient_versions_script';
const DBS = [OLD_DB, NONE_DB, SCRIPT_DB];
let current;

async function admin(statements) {
  const c = await connect(process.env.PGDATABASE || 'postgres');
  try {
    await c.query('SET client_min_messages = warning');
    for (const sql of statements) await c.query(sql);
  } finally {
    await c.end();
  }
}

before(async () => {
  ({ source: current } = await databases('versions'));
  await admin(DBS.flatMap((db) => [`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`,
    `CREATE DATABASE ${db}`]));
  // the extension at its oldest supported version (the managed edition has no 0.2.0)
  if (!MANAGED) await on(OLD_DB, (c) => c.query("CREATE EXTENSION idempotency VERSION '0.2.0'"));
  // the managed edition as a plain script (psql -f), which runs on any server
  const script = fs.readFileSync(new URL('../../../editions/managed/idempotency--0.4.0.sql',
    import.meta.url), 'utf8');
  await on(SCRIPT_DB, (c) => c.query(script));
});
after(() => admin(DBS.map((db) => `DROP DATABASE IF EXISTS ${db} WITH (FORCE)`)));

async function on(database, fn) {
  const c = await connect(database);
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

test('the declared versions: the package version, the oldest and newest extension', () => {
  const pkg = JSON.parse(fs.readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
  assert.equal(CLIENT_VERSION, pkg.version);
  assert.deepEqual([...EXTENSION_VERSIONS], ['0.2.0', CLIENT_VERSION]);
});

test('a current server passes the check', () =>
  on(current, async (c) => assert.equal(await checkExtension(c), EXTENSION_VERSIONS[1])));

test('an older server is named with both versions', extensionOnly(REASONS.versions), () => on(OLD_DB, async (c) => {
  assert.equal(await checkExtension(c), '0.2.0'); // the oldest supported passes by default
  await assert.rejects(checkExtension(c, '0.3.0'), (err) => {
    assert.ok(err instanceof ExtensionVersionError);
    assert.equal(err.serverVersion, '0.2.0');
    assert.equal(err.needed, '0.3.0');
    assert.match(err.message, /version 0\.2\.0, older than 0\.3\.0/);
    assert.match(err.hint, /ALTER EXTENSION idempotency UPDATE/);
    return true;
  });
}));

test('a missing function says which extension version it needs', extensionOnly(REASONS.versions),
  () => on(OLD_DB, async (c) => {
  await assert.rejects(claimOnce(c, 'acct', 'k-1'), (err) => {
    assert.ok(err instanceof ExtensionVersionError, String(err));
    assert.equal(err.code, '42883');
    assert.equal(err.needed, '0.3.0');
    assert.match(err.message, /idempotency\.claim_once does not exist on this server/);
    assert.match(err.message, /needs extension version 0\.3\.0 or later/);
    assert.equal(err.cause?.code, '42883');
    return true;
  });
}));

test('a database without the extension', () => on(NONE_DB, async (c) => {
  await assert.rejects(checkExtension(c), (err) => {
    assert.ok(err instanceof ExtensionVersionError);
    assert.equal(err.serverVersion, null);
    assert.match(err.message, /not installed in this database/);
    assert.match(err.hint, /CREATE EXTENSION idempotency/);
    return true;
  });
  await assert.rejects(claimOnce(c, 'acct', 'k-1'), (err) => {
    assert.ok(err instanceof ExtensionVersionError, String(err));
    assert.equal(err.code, '3F000');
    return true;
  });
}));

test("the edition of the suite's database: asked once, then cached", () => on(current, async (c) => {
  const count = counting(c);
  try {
    const e = await serverEdition(c);
    assert.ok(e instanceof Edition);
    assert.deepEqual([e.name, e.version, e.installedAs], [EDITION, CLIENT_VERSION, 'extension']);
    assert.ok(e.offers('reserve') && e.offers('claim_once') && e.offers('fingerprint'));
    assert.equal(e.offers('no_such_function'), false);
    assert.equal(e.offers('reserve_begin'), !MANAGED);
    assert.equal(await serverEdition(c), e);
    assert.equal(count.sent.length, 1);
    assert.notEqual(await serverEdition(c, { refresh: true }), e);
    assert.equal(count.sent.length, 2);
  } finally {
    count.stop();
  }
}));

test('the edition of a database without either', () => on(NONE_DB, async (c) => {
  const e = await serverEdition(c);
  assert.deepEqual([e.name, e.version, e.installedAs, e.functions], [null, null, null, []]);
}));

test('the managed edition run as a plain script: named by its schema comment', () =>
  on(SCRIPT_DB, async (c) => {
    const e = await serverEdition(c);
    assert.deepEqual([e.name, e.version, e.installedAs], ['managed', CLIENT_VERSION, 'script']);
    assert.ok(e.offers('reserve') && e.offers('maintain'));
    assert.equal(e.offers('reserve_begin'), false);
    assert.equal(e.offers('emit'), false);
  }));

test('the extension at 0.2.0 offers no claim_once', extensionOnly(REASONS.versions), () =>
  on(OLD_DB, async (c) => {
    const e = await serverEdition(c);
    assert.deepEqual([e.name, e.version, e.installedAs], ['extension', '0.2.0', 'extension']);
    assert.equal(e.offers('claim_once'), false);
    assert.equal(e.offers('reserve'), true);
  }));

test('a role is offered the functions it may execute only', () => on(current, async (c) => {
  await c.query('BEGIN');
  try {
    await c.query('CREATE ROLE nodeclient_edition_role');
    await c.query('GRANT USAGE ON SCHEMA idempotency TO nodeclient_edition_role');
    await c.query('GRANT nodeclient_edition_role TO CURRENT_USER'); // SET ROLE, as a non-superuser
    await c.query('SET LOCAL ROLE nodeclient_edition_role');
    const e = await serverEdition(c, { refresh: true });
    assert.equal(e.name, EDITION);
    assert.equal(e.offers('fingerprint'), true); // granted to every role
    assert.equal(e.offers('reserve'), false); // only to roles granted EXECUTE (operations.md)
    assert.equal(e.offers('reserve_begin'), false);
  } finally {
    await c.query('ROLLBACK');
  }
}));
