// The Idempotency-Key header against test/vectors/idempotency_key.json, which every client's
// tests check: the draft's sf-string and the unquoted token, one key for both spellings.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

import { parseIdempotencyKey } from '../index.js';

const { keys } = JSON.parse(readFileSync(
  new URL('../../../test/vectors/idempotency_key.json', import.meta.url), 'utf8'));

test('the vectors are there', () => assert.ok(keys.length >= 10));

for (const c of keys) {
  test(`the key header: ${c.name}`, () => {
    const header = c.header ?? undefined;
    if ('error' in c) {
      assert.throws(() => parseIdempotencyKey(header), (e) => e.code === c.error);
    } else {
      assert.equal(parseIdempotencyKey(header), c.key);
    }
  });
}
