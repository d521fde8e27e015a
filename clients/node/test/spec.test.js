// What test/vectors/client.json says every client does the same way: durations sent as whole
// microseconds (nothing rounded), a server error of each listed SQLSTATE thrown as its class.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { test } from 'node:test';
import * as idempotency from '../index.js';
import { translate } from '../lib/connection.js';
import { interval } from '../lib/keys.js';
import { connected } from './db.js';

const spec = JSON.parse(fs.readFileSync(
  new URL('../../../test/vectors/client.json', import.meta.url), 'utf8'));
const shared = connected('spec');

test('a duration in seconds is sent as the spec encodes it', () => {
  assert.ok(spec.duration.vectors.length > 0);
  for (const { microseconds, text } of spec.duration.vectors)
    assert.equal(interval(microseconds / 1e6), text, `${microseconds} µs`);
});

test('a sub-millisecond duration reaches the server whole', async () => {
  const { rows } = await shared.client.query(
    "SELECT $1::interval = interval '1500 microseconds' AS same", [interval(0.0015)]);
  assert.equal(rows[0].same, true);
});

test('a server error of each listed SQLSTATE is thrown as its class', async () => {
  const { client } = shared;
  await client.query(`CREATE FUNCTION pg_temp.raise_sqlstate(code text) RETURNS void
    LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'listed' USING ERRCODE = code; END $$`);
  const translated = spec.sqlstates.filter((e) => e.translated);
  assert.ok(translated.length > 0);
  for (const entry of translated) {
    const err = await client.query('SELECT pg_temp.raise_sqlstate($1)', [entry.sqlstate])
      .then(() => assert.fail(`${entry.sqlstate} raised nothing`), (e) => e);
    const name = { in_progress: 'KeyInProgressError', too_old: 'KeyTooOldError' }[entry.outcome]
      ?? (entry.name.endsWith('Error') ? entry.name : `${entry.name}Error`);
    const typed = translate(err, client);
    assert.equal(typed.constructor.name, name, entry.sqlstate);
    assert.equal(typed.code, entry.sqlstate);
    assert.equal(idempotency[name], typed.constructor, `${name} is exported`);
  }
});
