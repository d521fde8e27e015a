// The extension versions the client declares, and what it says when the server's is missing
// or older: an ExtensionVersionError naming both versions, not an undefined function. Against
// databases of their own: one with the extension at 0.2.0 (the oldest supported, without
// claim_once), one without it.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, test } from 'node:test';
import {
  checkExtension, claimOnce, CLIENT_VERSION, EXTENSION_VERSIONS, ExtensionVersionError,
} from '../index.js';
import { connect, databases } from './db.js';

const OLD_DB = 'nodeclient_versions_old';
const NONE_DB = 'nodeclient_versions_none';
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
  await admin([OLD_DB, NONE_DB].flatMap((db) => [`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`,
    `CREATE DATABASE ${db}`]));
  const c = await connect(OLD_DB);
  await c.query("CREATE EXTENSION idempotency VERSION '0.2.0'");
  await c.end();
});
after(() => admin([OLD_DB, NONE_DB].map((db) => `DROP DATABASE IF EXISTS ${db} WITH (FORCE)`)));

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

test('an older server is named with both versions', () => on(OLD_DB, async (c) => {
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

test('a missing function says which extension version it needs', () => on(OLD_DB, async (c) => {
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
