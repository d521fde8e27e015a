// The NestJS interceptor and decorators (lib/nestjs.js) on a real Nest application, on its
// Express and its Fastify adapter, and PostgreSQL: the answers of test/vectors/http_answers.json
// in every style, handlers that throw, one that answers on the response itself, a client that
// goes away, and the cases of every framework adapter (http_cases.js: replays, 409, a burst of
// one key, the statement form, a backend terminated mid-request, the database cut as in a crash
// restart). The controllers are plain JS classes, decorated by calling Nest's decorators.
import 'reflect-metadata';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import {
  Body, ConflictException, Controller, Get, Headers, Module, Post, Res,
} from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import pg from 'pg';
import { from } from 'rxjs';
import { Idempotency, Idempotent, IdempotencyModule } from '../lib/nestjs.js';
import { connect, databases, until } from './db.js';
import {
  DOCUMENTATION, expectAnswer, frameworkCases, inTransaction, json, ordersOf, post,
} from './http_cases.js';
import { Proxy } from './proxy.js';

const APP = 'nestjs_interceptor';
// Express keeps the body's bytes (rawBody: a JSON body is fingerprinted by its text); Fastify
// does not (by the value Nest parsed), and gets its options from forRootAsync.
const ADAPTERS = {
  express: { adapter: () => new ExpressAdapter(), rawBody: true,
    options: (options) => IdempotencyModule.forRoot(options) },
  fastify: { adapter: () => new FastifyAdapter(), rawBody: false,
    options: (options) => IdempotencyModule.forRootAsync({ useFactory: async () => options }) },
};

let db;
let check;
let proxy;
let pool;
let pipelined;
const gates = new Map(); // key => a promise the handler waits for

// Decorates a method of cls: decorators (method decorators, then [index, parameter decorator]).
function decorate(cls, name, ...decorators) {
  const descriptor = Object.getOwnPropertyDescriptor(cls.prototype, name);
  for (const d of decorators) {
    if (Array.isArray(d)) d[1](cls.prototype, name, d[0]);
    else d(cls.prototype, name, descriptor);
  }
}

class Orders {
  async create(client, key, body, headers, res) {
    await gates.get(headers['x-gate']);
    const { rows } = await client.query(
      'INSERT INTO orders (k, item) VALUES ($1, $2) RETURNING id', [key, body.item]);
    if (body.fail === 'error') throw new Error('the handler failed');
    if (body.fail === 'conflict') throw new ConflictException('out of stock');
    res.header('location', `/orders/${rows[0].id}`);
    return { id: rows[0].id };
  }

  documented(...args) {
    return this.create(...args);
  }

  legacy(...args) {
    return this.create(...args);
  }

  observed(...args) { // an Observable: Nest unsubscribes from it when the client goes away
    return from(this.create(...args));
  }

  // answers on the response itself (@Res() without passthrough): Nest sends nothing of its own
  async own(client, key, body, res) {
    const { rows } = await client.query(
      'INSERT INTO orders (k, item) VALUES ($1, $2) RETURNING id', [key, body.item]);
    res.status(201).send({ id: rows[0].id, own: true });
  }

  statement() {
    throw new Error('the statement form never calls the handler');
  }

  alive() {
    return { ok: true };
  }
}
const orderParams = [[0, Idempotency('client')], [1, Idempotency('key')], [2, Body()],
  [3, Headers()], [4, Res({ passthrough: true })]];
Controller()(Orders);
decorate(Orders, 'create', Post('orders'), Idempotent(), ...orderParams);
decorate(Orders, 'documented', Post('documented'), Idempotent({ documentation: DOCUMENTATION }),
  ...orderParams);
decorate(Orders, 'legacy', Post('legacy'), Idempotent({ legacyAnswers: true }), ...orderParams);
decorate(Orders, 'observed', Post('observed'), Idempotent(), ...orderParams);
decorate(Orders, 'own', Post('own'), Idempotent(), [0, Idempotency('client')],
  [1, Idempotency('key')], [2, Body()], [3, Res()]);
decorate(Orders, 'alive', Get('alive'));

// @Idempotent on the controller (every route) and on a method (its options win): the
// interceptor is on that route twice, and takes the request once.
class Tickets {
  async open(client, key) {
    const { rows } = await client.query(
      "INSERT INTO orders (k, item) VALUES ($1, 'ticket') RETURNING id", [key]);
    return { id: rows[0].id };
  }
}
Controller('tickets')(Tickets);
Idempotent()(Tickets);
decorate(Tickets, 'open', Post(), Idempotent({ legacyAnswers: true }),
  [0, Idempotency('client')], [1, Idempotency('key')]);

before(async () => {
  ({ source: db } = await databases('nestjs'));
  check = await connect(db);
  await check.query('CREATE TABLE orders (id serial PRIMARY KEY, k text NOT NULL, item text)');
  proxy = new Proxy();
  const port = await proxy.listen();
  pool = new pg.Pool({ database: db, host: '127.0.0.1', port, application_name: APP, max: 4,
    connectionTimeoutMillis: 5000 });
  pool.on('error', () => {});
  pipelined = new pg.Pool({ database: db, max: 2, pipeline: true });
  decorate(Orders, 'statement', Post('statement'), Idempotent({ pool: pipelined,
    statement: 'INSERT INTO orders (k, item) VALUES ($1, $2) RETURNING id, item',
    params: (req) => [req.headers['idempotency-key'], req.body.item] }));
});
after(async () => {
  proxy?.close();
  await pool?.end();
  await pipelined?.end();
  await check?.end();
});

for (const [adapterName, { adapter, rawBody, options }] of Object.entries(ADAPTERS)) {
  describe(`on the ${adapterName} adapter`, () => {
    let app;
    const service = { app: APP, gates }; // for http_cases.js
    before(async () => {
      class AppModule {}
      Module({ imports: [options({ pool, scope: (req) => req.headers['x-account'] })],
        controllers: [Orders, Tickets] })(AppModule);
      app = await NestFactory.create(AppModule, adapter(), { logger: false, rawBody });
      await app.listen(0, '127.0.0.1');
      Object.assign(service, { check, proxy,
        base: `http://127.0.0.1:${app.getHttpServer().address().port}` });
    });
    after(async () => {
      await app?.close();
    });

    const postTo = (...args) => post(service, ...args);
    frameworkCases(service);

    test('the answers of its own are those of http_answers.json, in every style', async () => {
      for (const [path, style] of [['/orders', {}], ['/documented', { documentation: DOCUMENTATION }],
        ['/legacy', { legacy: true }]]) {
        expectAnswer(await postTo(path, {}), 'idempotency_key_missing', style);
        expectAnswer(await postTo(path, { 'idempotency-key': 'a b' }), 'idempotency_key_malformed', style);
        expectAnswer(await postTo(path, { 'idempotency-key': randomUUID(), 'x-account': undefined }),
          'idempotency_scope_missing', style);
        const k = randomUUID();
        assert.equal((await postTo(path, { 'idempotency-key': k })).status, 201);
        expectAnswer(await postTo(path, { 'idempotency-key': k }, '{"item": "pen"}'),
          'idempotency_key_reused', style);
      }
    });

    test("@Idempotent on a controller and its method: the method's options, one claim", async () => {
      expectAnswer(await postTo('/tickets', {}), 'idempotency_key_missing', { legacy: true });
      const k = randomUUID();
      const first = await postTo('/tickets', { 'idempotency-key': k });
      assert.equal(first.status, 201);
      const again = await postTo('/tickets', { 'idempotency-key': k });
      assert.equal(again.headers.get('idempotent-replayed'), 'true');
      assert.deepEqual(again.bytes, first.bytes);
      assert.deepEqual(await ordersOf(service, k), [json(first).id]);
    });

    test('a handler that answers on the response itself (@Res()): held, stored, replayed; own answers too', async () => {
      const k = randomUUID();
      const first = await postTo('/own', { 'idempotency-key': k });
      assert.equal(first.status, 201);
      assert.equal(json(first).own, true);
      const again = await postTo('/own', { 'idempotency-key': k });
      assert.equal(again.headers.get('idempotent-replayed'), 'true');
      assert.deepEqual(again.bytes, first.bytes);
      expectAnswer(await postTo('/own', {}), 'idempotency_key_missing');
      expectAnswer(await postTo('/own', { 'idempotency-key': k }, '{"item": "pen"}'), 'idempotency_key_reused');
      assert.deepEqual(await ordersOf(service, k), [json(first).id]);
    });

    test('a handler that throws: Nest answers, nothing is committed or stored, the retry runs', async () => {
      const k = randomUUID();
      const failed = await postTo('/orders', { 'idempotency-key': k }, '{"item": "x", "fail": "error"}');
      assert.equal(failed.status, 500);
      assert.equal(json(failed).statusCode, 500); // Nest's own exception filter answered
      const refused = await postTo('/orders', { 'idempotency-key': k }, '{"item": "x", "fail": "conflict"}');
      assert.equal(refused.status, 409);
      assert.equal(json(refused).message, 'out of stock');
      assert.deepEqual(await ordersOf(service, k), []);
      assert.equal((await check.query('SELECT 1 FROM idempotency.keys WHERE key = $1', [k])).rows.length, 0);
      const retry = await postTo('/orders', { 'idempotency-key': k }, '{"item": "x"}');
      assert.equal(retry.status, 201);
      assert.deepEqual(await ordersOf(service, k), [json(retry).id]);
    });

    for (const path of ['/orders', '/observed']) test(`a client that goes away mid-request (${path}): the connection comes back, the key ends with one order`, async () => {
      const k = randomUUID();
      let open;
      gates.set(k, new Promise((r) => { open = r; }));
      const gone = new AbortController();
      const pending = fetch(`${service.base}${path}`, { method: 'POST', body: '{"item": "book"}',
        signal: gone.signal, headers: { 'content-type': 'application/json', 'x-account': 'acct',
          'idempotency-key': k, 'x-gate': k } }).catch((err) => err);
      await inTransaction(service);
      gone.abort();
      assert.equal((await pending).name, 'AbortError');
      open();
      await until('the request ended', async () => (await check.query(
        `SELECT 1 FROM pg_stat_activity WHERE application_name = $1
           AND state IN ('active', 'idle in transaction')`, [APP])).rows.length === 0);
      const retry = await postTo(path, { 'idempotency-key': k });
      assert.equal(retry.status, 201);
      assert.deepEqual(await ordersOf(service, k), [json(retry).id]);
    });

  });
}
