// The fingerprint against the shared vectors, against SQL on random documents, and on bad input.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';
import {
  canonicalJson, fingerprint, fingerprintValue, IdempotencyError, InvalidJsonError,
  InvalidParameterValueError, ProgramLimitExceededError, query,
} from '../index.js';
import { connect, databases, vectorsPath } from './db.js';

const VECTORS = fs.readFileSync(vectorsPath, 'utf8').split('\n').filter(Boolean)
  .map((line) => JSON.parse(line));

let conn;
before(async () => {
  const { source } = await databases('fingerprint');
  conn = await connect(source);
});
after(() => conn?.end());

test('the vector file has every vector', () => {
  assert.ok(VECTORS.length >= 120, `${VECTORS.length} vectors`);
});

describe('vectors as JSON texts', () => {
  for (const v of VECTORS) {
    test(v.name, () => {
      const options = { exclude: v.exclude };
      if (v.error !== undefined) {
        assert.throws(() => fingerprint(v.json, options), (err) => {
          assert.ok(err instanceof IdempotencyError, err.stack);
          assert.equal(err.code, v.error);
          return true;
        });
        return;
      }
      assert.equal(canonicalJson(v.json, options).toString('utf8'), v.canonical);
      assert.equal(fingerprint(v.json, options).toString('hex'), v.sha256);
      assert.equal(fingerprint(Buffer.from(v.json, 'utf8'), options).toString('hex'), v.sha256);
      assert.equal(fingerprint(new TextEncoder().encode(v.json), options).toString('hex'),
        v.sha256);
    });
  }
});

// A value goes through JSON.parse, which loses digits: only vectors whose numbers survive it.
describe('vectors as JavaScript values', () => {
  const exact = (v) => {
    const value = JSON.parse(v.json);
    return JSON.stringify(value) === JSON.stringify(JSON.parse(v.canonical));
  };
  for (const v of VECTORS.filter((x) => x.sha256 && !x.name.includes('nesting'))) {
    let value;
    try {
      value = JSON.parse(v.json);
    } catch {
      continue;
    }
    if (!exact(v) || !canonicalJson(v.json).equals(canonicalJson(JSON.stringify(value)))) continue;
    test(v.name, () => {
      assert.equal(fingerprintValue(value, { exclude: v.exclude }).toString('hex'), v.sha256);
    });
  }
});

test('SQL agrees on 400 random documents', async () => {
  let seed = 15;
  const rnd = () => { // a small deterministic PRNG (mulberry32)
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (lo, hi) => lo + Math.floor(rnd() * (hi - lo + 1));
  const pick = (xs) => xs[int(0, xs.length - 1)];
  const digits = (n) => Array.from({ length: n }, () => int(0, 9)).join('');
  const alphabet = ['a', 'b', 'aa', '\u00e9', '\uffff', '\u{1F600}', '\ue000', '.', '\\', '"', '\n',
    '\u001f', '/', 'Z', '\u2028'];
  const number = () => pick(['', '-']) + pick(['0', String(int(1, 9)) + digits(int(0, 30))]) +
    pick(['', `.${digits(int(1, 30))}`]) + pick(['', `e${int(-300, 300)}`, `E+${int(0, 40)}`, 'e-0']);
  const str = (n) => {
    const s = Array.from({ length: int(0, n) }, () => pick(alphabet)).join('');
    const text = JSON.stringify(s);
    // \u escapes of everything non-ASCII, at random: the parser decodes both forms
    return rnd() < 0.5 ? text
      : text.replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
  };
  const value = (depth) => {
    const k = int(0, depth < 4 ? 6 : 3);
    if (k === 0) return number();
    if (k === 1) return str(5);
    if (k === 2) return pick(['true', 'false', 'null']);
    if (k <= 4) return `[${Array.from({ length: int(0, 4) }, () => value(depth + 1)).join(', ')}]`;
    return `{${Array.from({ length: int(0, 5) }, () => `${str(3)}: ${value(depth + 1)}`).join(',')}}`;
  };
  const docs = Array.from({ length: 400 }, () => value(0));
  const excludes = docs.map(() => ['a', 'b', 'aa', 'a.b', '\u00e9', 'a.aa.b']
    .filter(() => rnd() < 0.3));
  const { rows } = await query(conn, `
    SELECT encode(idempotency.fingerprint((p ->> 0)::jsonb,
             ARRAY(SELECT jsonb_array_elements_text(p -> 1))), 'hex') AS h
      FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS t(p, n) ORDER BY n`,
  [JSON.stringify(docs.map((d, i) => [d, excludes[i]]))]);
  assert.equal(rows.length, docs.length);
  docs.forEach((doc, i) => {
    assert.equal(fingerprint(doc, { exclude: excludes[i] }).toString('hex'), rows[i].h, doc);
  });
});

test('JavaScript values', () => {
  const same = (value, text) => assert.deepEqual(fingerprint(value), fingerprint(text));
  same({ a: 1.0 }, '{"a": 1}');
  same(0.1, '0.1'); // the shortest round-trip text, not the double's binary expansion
  same(1e21, '1e21');
  same(-0, '0');
  same(10n ** 50n, '1e50');
  same(['x', null, true], '["x",null,true]');
  same({ b: [1], a: { c: false } }, '{"a":{"c":false},"b":[1]}');
  same({ a: undefined, f() {}, b: [undefined, () => 1] }, '{"b":[null,null]}'); // as JSON.stringify
  same({ at: new Date(Date.UTC(2030, 0, 2)) }, '{"at":"2030-01-02T00:00:00.000Z"}'); // toJSON
  same({ '\u{1F600}': 1, '\uffff': 2 }, '{"\uffff":2,"\u{1F600}":1}'); // code point order
  // A string argument is a JSON text; fingerprintValue takes it as a string value.
  assert.deepEqual(fingerprintValue('a string value'),
    createHash('sha256').update('"a string value"').digest());
  assert.deepEqual(fingerprint('"a string value"'), fingerprintValue('a string value'));
  const h = fingerprint({});
  assert.ok(Buffer.isBuffer(h));
  assert.equal(h.length, 32);
});

test('huge numbers keep every digit', () => {
  const a = '123456789012345678901234567890.12345678901234567891';
  assert.equal(canonicalJson(a).toString(), a);
  assert.deepEqual(fingerprint('1.10'), fingerprint('1.1'));
  assert.notDeepEqual(fingerprint('1.1'), fingerprint('1.100000000000000000001'));
  assert.notDeepEqual(fingerprint('9007199254740993'), fingerprint('9007199254740992'));
});

const isCode = (cls, code) => (err) => {
  assert.ok(err instanceof cls, `${err.name}: ${err.message}`);
  assert.equal(err.code, code);
  return true;
};

test('NaN, Infinity, lone surrogates, invalid UTF-8 and non-JSON: InvalidJsonError 22P02', () => {
  for (const bad of [NaN, Infinity, -Infinity, { a: '\ud800' }, ['\udc00'], { '\ud800': 1 },
    'NaN', 'Infinity', '{', 'not json', '"\\ud800"', Buffer.from([0xff]), Buffer.from('"\xc3"', 'latin1'),
    Buffer.from([0x22, 0xed, 0xa0, 0x80, 0x22]), '\ufeff{}', Buffer.from('\ufeff{}'), '', '{"a": 1,}',
    '"\ud800"', '[1]x']) {
    assert.throws(() => fingerprint(bad), isCode(InvalidJsonError, '22P02'), String(bad));
  }
});

test('\\u0000 is InvalidJsonError 22P05', () => {
  for (const bad of ['"\\u0000"', { a: 'x\u0000' }])
    assert.throws(() => fingerprint(bad), isCode(InvalidJsonError, '22P05'));
});

test('SQL raises the same class for the same bad texts', async () => {
  for (const text of ['"\\ud800"', 'NaN', 'Infinity', '{', '{"a": 1,}']) {
    await assert.rejects(query(conn, 'SELECT idempotency.fingerprint($1::jsonb)', [text]),
      (err) => err instanceof InvalidJsonError);
    assert.throws(() => fingerprint(text), InvalidJsonError);
  }
});

test('limits are ProgramLimitExceededError 54000, as in SQL', async () => {
  for (const text of ['1e1000', `${'['.repeat(1001)}${']'.repeat(1001)}`]) {
    assert.throws(() => fingerprint(text), isCode(ProgramLimitExceededError, '54000'));
    await assert.rejects(query(conn, 'SELECT idempotency.fingerprint($1::jsonb)', [text]),
      isCode(ProgramLimitExceededError, '54000'));
  }
  assert.deepEqual(fingerprint(`${'['.repeat(1000)}${']'.repeat(1000)}`),
    fingerprint(JSON.parse(`${'['.repeat(1000)}${']'.repeat(1000)}`)));
  let deep = [[]];
  for (let i = 0; i < 1100; i++) deep = [deep];
  assert.throws(() => fingerprint(deep), ProgramLimitExceededError);
  const cyclic = { a: 1 };
  cyclic.self = cyclic;
  assert.throws(() => fingerprint(cyclic), ProgramLimitExceededError);
  assert.throws(() => fingerprint(`${'['.repeat(100000)}${']'.repeat(100000)}`),
    ProgramLimitExceededError);
  // a syntax error wins over a limit, as in SQL, where the cast fails first
  assert.throws(() => fingerprint('[1e1000, }'), InvalidJsonError);
});

test('exclude must be an array of strings: InvalidParameterValueError 22023', () => {
  for (const bad of ['sent_at', null, 5, [1], ['a', null], [''], ['a..b'], ['.a'], ['a.'], { a: 1 }]) {
    assert.throws(() => fingerprint('{"a": 1}', { exclude: bad }),
      isCode(InvalidParameterValueError, '22023'), JSON.stringify(bad));
  }
  assert.deepEqual(fingerprint('{"a":1,"b":2}', { exclude: new Set(['a']) }), fingerprint('{"b":2}'));
});

test('what is not a JSON value is a TypeError', () => {
  for (const bad of [undefined, () => 1, Symbol('x')])
    assert.throws(() => fingerprint(bad), TypeError);
});
