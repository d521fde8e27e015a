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
import { extensionOnly, REASONS } from './edition.js';

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

test('no query text in lib/ outside statements.js and the generated spec_statements.js', () => {
  const lib = new URL('../lib/', import.meta.url);
  const query = /(['"`])\s*(SELECT|INSERT|UPDATE|DELETE|WITH)\b/;
  const found = [];
  for (const file of fs.readdirSync(lib).filter((f) => f.endsWith('.js'))) {
    if (file === 'statements.js' || file === 'spec_statements.js') continue;
    fs.readFileSync(new URL(file, lib), 'utf8').split('\n').forEach((line, i) => {
      const code = line.replace(/^\s*\/\/.*$/, '');
      if (query.test(code)) found.push(`lib/${file}:${i + 1}: ${line.trim()}`);
    });
  }
  assert.deepEqual(found, []);
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

// The functions only the extension has (docs/managed.md's feature table): the texts that call
// them are prepared by a test of their own, reported not applicable against the managed edition.
const EXTENSION_ONLY = { emit: REASONS.outbox, reserve_begin: REASONS.reserveBegin };
const calls = (text, fn) => new RegExp(`\\bidempotency\\.${fn}\\(`).test(text);
const callsExtensionOnly = (text) => Object.keys(EXTENSION_ONLY).some((fn) => calls(text, fn));
for (const [fn, reason] of Object.entries(EXTENSION_ONLY)) {
  test(`the texts that call idempotency.${fn} can be prepared`, extensionOnly(reason),
    async () => {
      const texts = [...Object.values(listed).map(({ sql }) => sql), ...ALL]
        .filter((text) => calls(text, fn));
      assert.ok(texts.length > 0);
      for (const text of texts) await prepares(text, fold(text));
    });
}

test('every listed statement can be prepared against the installed edition', async () => {
  for (const [name, { sql }] of Object.entries(listed))
    if (!callsExtensionOnly(sql)) await prepares(sql, `test/vectors/statements.json's ${name}`);
});

test('every text of statements.js that a client sends as a query can be prepared', async () => {
  const preparable = ALL.filter((text) => /^\s*SELECT\b/.test(text));
  assert.ok(preparable.length >= Object.keys(statements.LISTED).length);
  for (const text of preparable) if (!callsExtensionOnly(text)) await prepares(text, fold(text));
});
