// The Fastify plugin (lib/fastify.js) on a real Fastify server and PostgreSQL: the answers of
// test/vectors/http_answers.json, a handler that throws, and the cases every framework adapter
// passes (test/http_cases.js: a replay byte for byte the first answer, 409, a burst of one key,
// the statement form on a pipelined pool, a backend terminated mid-request, every connection
// cut while new ones are refused). A real restart with -m immediate:
// test/scripted/fastify_restart.sh.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import Fastify from 'fastify';
import pg from 'pg';
import { idempotencyPlugin } from '../lib/fastify.js';
import { connect, databases } from './db.js';
import {
  DOCUMENTATION, expectAnswer, frameworkCases, ordersOf as ordersOfService, post as postTo,
} from './http_cases.js';
import { Proxy } from './proxy.js';

const APP = 'fastify_plugin';

let db;
let check;
let proxy;
let pool;
let pipelined;
let app;
let base;
const gates = new Map(); // key => a promise the handler waits for

before(async () => {
  ({ source: db } = await databases('fastify'));
  check = await connect(db);
  await check.query('CREATE TABLE orders (id serial PRIMARY KEY, k text NOT NULL, item text)');
  proxy = new Proxy();
  const port = await proxy.listen();
  const via = { database: db, host: '127.0.0.1', port, application_name: APP };
  pool = new pg.Pool({ ...via, max: 4, connectionTimeoutMillis: 5000 });
  pool.on('error', () => {});
  pipelined = new pg.Pool({ database: db, max: 2, pipeline: true });
  app = Fastify();
  await app.register(idempotencyPlugin, { pool, scope: (req) => req.headers['x-account'], limit: 64 });
  const order = async (request, reply) => {
    const { client, key } = request.idempotency;
    await gates.get(request.headers['x-gate']);
    const { rows } = await client.query(
      'INSERT INTO orders (k, item) VALUES ($1, $2) RETURNING id', [key, request.body.item]);
    if (request.body.fail) throw new Error('the handler failed');
    return reply.code(201).header('location', `/orders/${rows[0].id}`).send({ id: rows[0].id });
  };
  app.post('/orders', { config: { idempotency: true } }, order);
  app.post('/documented', { config: { idempotency: { documentation: DOCUMENTATION } } }, order);
  app.post('/legacy', { config: { idempotency: { legacyAnswers: true } } }, order);
  app.post('/statement', { config: { idempotency: { pool: pipelined,
    statement: 'INSERT INTO orders (k, item) VALUES ($1, $2) RETURNING id, item',
    params: (req) => [req.headers['idempotency-key'], req.body.item] } } }, () => {
    throw new Error('the statement form never calls the handler');
  });
  app.get('/alive', async () => ({ ok: true }));
  base = await app.listen({ port: 0, host: '127.0.0.1' });
  Object.assign(service, { base, check, proxy });
});
after(async () => {
  await app?.close();
  proxy?.close();
  await pool?.end();
  await pipelined?.end();
  await check?.end();
});

const service = { app: APP, gates }; // for http_cases.js
const post = (...args) => postTo(service, ...args);
const ordersOf = (k) => ordersOfService(service, k);

test('the answers of its own are those of http_answers.json, in every style', async () => {
  for (const [path, style] of [['/orders', {}], ['/documented', { documentation: DOCUMENTATION }],
    ['/legacy', { legacy: true }]]) {
    expectAnswer(await post(path, {}), 'idempotency_key_missing', style);
    expectAnswer(await post(path, { 'idempotency-key': 'a b' }), 'idempotency_key_malformed', style);
    expectAnswer(await post(path, { 'idempotency-key': randomUUID(), 'x-account': undefined }),
      'idempotency_scope_missing', style);
    expectAnswer(await post(path, { 'idempotency-key': randomUUID() }, '{"item": '), 'invalid_json', style);
    expectAnswer(await post(path, { 'idempotency-key': randomUUID() },
      JSON.stringify({ item: 'x'.repeat(100) })), 'body_too_large', style);
    const k = randomUUID();
    assert.equal((await post(path, { 'idempotency-key': k })).status, 201);
    expectAnswer(await post(path, { 'idempotency-key': k }, '{"item": "pen"}'),
      'idempotency_key_reused', style);
  }
});

test('a handler that throws: Fastify answers 500, nothing is stored, the retry runs', async () => {
  const k = randomUUID();
  assert.equal((await post('/orders', { 'idempotency-key': k }, '{"item": "x", "fail": true}')).status, 500);
  assert.deepEqual(await ordersOf(k), []);
  assert.equal((await post('/orders', { 'idempotency-key': k }, '{"item": "x", "fail": false}')).status, 201);
  assert.equal((await ordersOf(k)).length, 1);
});

frameworkCases(service);
