// The middleware's answers and what it stores, against test/vectors/http_answers.json, which
// the Python middlewares' tests check too: the same bodies, word for word, in both clients.
// No database: the answers given before a connection is taken come from a real node:http
// server, the 503 from a pool that cannot connect.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { once } from 'node:events';
import http from 'node:http';
import { after, before, test } from 'node:test';
import {
  answerFor, idempotencyMiddleware, KeyInProgressError, KeyMismatchError, KeyTooOldError,
  replayOf, storedAnswer,
} from '../index.js';
import { PROBLEM_TITLES } from '../lib/answers.js';

const vectors = JSON.parse(readFileSync(
  new URL('../../../test/vectors/http_answers.json', import.meta.url), 'utf8'));

// How a middleware answers: problem details (with a Link to the documentation when it has
// one), or the legacy bodies; a server each.
const DOCUMENTATION = 'https://api.example.com/docs/idempotency';
const STYLES = {
  'problem details': {},
  documentation: { documentation: DOCUMENTATION },
  legacy: { legacyAnswers: true },
};
const servers = [];
const bases = {};
before(async () => {
  const refused = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'),
    { code: 'ECONNREFUSED' });
  for (const [name, style] of Object.entries(STYLES)) {
    const middleware = idempotencyMiddleware({
      pool: { connect: async () => { throw refused; }, on: () => {}, listenerCount: () => 1 },
      scope: (req) => (req.headers['x-account'] === 'none' ? undefined : req.headers['x-account']),
      limit: 64,
      ...style,
    });
    const server = http.createServer((req, res) => {
      middleware(req, res, () => { res.writeHead(599).end(); });
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    servers.push(server);
    bases[name] = `http://127.0.0.1:${server.address().port}`;
  }
});
after(() => Promise.all(servers.map((s) => new Promise((r) => { s.close(r); }))));

async function post(style, headers, body = '{"item": "widget"}') {
  const res = await fetch(bases[style], { method: 'POST', body,
    headers: { 'Content-Type': 'application/json', ...headers } });
  return { status: res.status, headers: res.headers, body: await res.json() };
}

// The vectors' answer name: problem details, or (legacy) the old body; with the Link header of
// documentation.
const expect = (got, name, { legacyAnswers = false, documentation } = {}) => {
  const want = (legacyAnswers ? vectors.answers : vectors.problems)[name];
  if (typeof got.headers.get === 'function') {
    assert.equal(got.headers.get('link'), documentation ? `<${documentation}>; rel="describedby"` : null);
  }
  assert.equal(got.status, want.status, name);
  assert.deepEqual(got.body, want.body, name);
  for (const [header, value] of Object.entries(want.headers)) {
    const actual = typeof got.headers.get === 'function' ? got.headers.get(header) : got.headers[header];
    assert.equal(actual, value, `${name}: ${header}`);
  }
};

for (const [styleName, style] of Object.entries(STYLES)) {
  test(`the answers given before the claim: ${styleName}`, async () => {
    const key = { 'Idempotency-Key': 'k-1', 'X-Account': 'acct_1' };
    const send = (headers, body) => post(styleName, headers, body);
    expect(await send({ 'X-Account': 'acct_1' }), 'idempotency_key_missing', style);
    expect(await send({ ...key, 'Idempotency-Key': 'has space' }), 'idempotency_key_malformed', style);
    expect(await send({ ...key, 'X-Account': 'none' }), 'idempotency_scope_missing', style);
    expect(await send({ ...key, 'X-Account': 'a'.repeat(256) }), 'idempotency_scope_too_long', style);
    expect(await send(key, '{"item": '), 'invalid_json', style);
    expect(await send(key, JSON.stringify({ item: 'x'.repeat(100) })), 'body_too_large', style);
    expect(await send(key), 'database_unavailable', style); // the pool cannot connect
  });
}

// answerFor is the legacy form ({ status, body: { error, message }, headers }).
test("the reserve outcomes' answers", () => {
  const holder = { lockedUntil: null }; // the holder is inside its transaction
  const legacy = { legacyAnswers: true };
  expect(answerFor(new KeyInProgressError('s', 'k', holder, 'in_progress')), 'idempotency_key_in_use', legacy);
  expect(answerFor(new KeyMismatchError('s', 'k', {}, 'mismatch')), 'idempotency_key_reused', legacy);
  expect(answerFor(new KeyTooOldError('s', 'k', {}, 'too_old')), 'idempotency_key_too_old', legacy);
});

test('the problem titles', () => assert.deepEqual({ ...PROBLEM_TITLES }, vectors.titles));

test('what is stored for an answer, and what its replay sends', () => {
  const bytes = (x) => (x.body_base64 !== undefined ? Buffer.from(x.body_base64, 'base64')
    : Buffer.from(x.body, 'utf8'));
  for (const { answer, stored, replay } of vectors.stored) {
    assert.deepEqual(storedAnswer(bytes(answer), Object.entries(answer.headers), ['ETag']), stored);
    const r = replayOf(stored);
    assert.deepEqual(r.headers, replay.headers);
    assert.deepEqual(r.body, bytes(replay));
  }
  const legacy = replayOf(vectors.legacy.stored);
  assert.deepEqual(legacy.headers, vectors.legacy.replay.headers);
  assert.equal(legacy.body.toString(), vectors.legacy.replay.body);
});
