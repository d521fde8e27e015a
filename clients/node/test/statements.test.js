// lib/statements.js against test/vectors/statements.json, the one list of the statements every
// client sends: each text of the extension's equals the listed one (runs of white space folded;
// Node writes placeholders as $n, as the list does), no other text calls the extension, and
// every listed statement (and each other text this client sends with parameters) can be
// prepared on a server with the extension installed.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { test } from 'node:test';
import * as statements from '../lib/statements.js';
import { connected } from './db.js';

const listed = JSON.parse(fs.readFileSync(
  new URL('../../../test/vectors/statements.json', import.meta.url), 'utf8')).statements;
const fold = (text) => text.replace(/\s+/g, ' ').trim();

// Every text statements.js exports, whatever holds it (a constant, an object, an array).
const texts = (value) => (typeof value === 'string' ? [value]
  : Object.values(value).flatMap(texts));
const ALL = Object.entries(statements).filter(([name]) => name !== 'LISTED')
  .flatMap(([, value]) => texts(value));

test('each statement of the extension equals the listed one', () => {
  assert.ok(Object.keys(statements.LISTED).length > 0);
  for (const [name, text] of Object.entries(statements.LISTED)) {
    assert.ok(name in listed, `${name} is not in test/vectors/statements.json`);
    assert.equal(fold(text), fold(listed[name].sql), `statement ${name}`);
    const placeholders = new Set(text.match(/\$[0-9]+/g) ?? []);
    assert.equal(placeholders.size, listed[name].params.length, `parameters of ${name}`);
  }
});

test('LISTED holds every text of statements.js that calls the extension', () => {
  const inListed = new Set(Object.values(statements.LISTED));
  for (const text of ALL) {
    if (/\bidempotency\.[a-z_]+\s*\(/.test(text))
      assert.ok(inListed.has(text), `a statement of the extension outside LISTED: ${text}`);
  }
});

const shared = connected('statements');

// PREPAREs text (then DEALLOCATEs it), failing with what (the text's name) if it does not.
async function prepares(text, what) {
  const { client } = shared;
  await client.query(`PREPARE idempotency_statement_test AS ${text}`).catch((err) => {
    assert.fail(`${what} does not prepare: ${err.message}`);
  });
  await client.query('DEALLOCATE idempotency_statement_test');
}

test('every listed statement can be prepared against the installed extension', async () => {
  for (const [name, { sql }] of Object.entries(listed))
    await prepares(sql, `test/vectors/statements.json's ${name}`);
});

test('every text of statements.js that a client sends as a query can be prepared', async () => {
  const preparable = ALL.filter((text) => /^\s*SELECT\b/.test(text));
  assert.ok(preparable.length >= Object.keys(statements.LISTED).length);
  for (const text of preparable) await prepares(text, fold(text));
});
