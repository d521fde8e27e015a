// bench/peers on Fastify 5: the service of service.mjs (POST /orders, one order row, 201 { id })
// with the strategies whose cost is the framework's as much as the layer's, written as a
// Fastify application does: STRATEGY fastify-middleware (the plugin's handler form),
// fastify-statement (its statement form on a pipelined pool), fastify-accelerator (Redis SET
// NX + Lua, work.mjs's accelerate, as a route) and fastify-insert (the insert alone, no
// idempotency). Environment and "listening": service.mjs's.
import Fastify from 'fastify';
import { parseIdempotencyKey } from '../../clients/node/index.js';
import { idempotencyPlugin } from '../../clients/node/lib/fastify.js';
import { accelerate, insertOrder, newPool, ORDER_STATEMENT, orderParams, redis, sha }
  from './work.mjs';
import { roundTrips } from './roundtrips.mjs';

const STRATEGY = process.env.STRATEGY;
const pool = newPool();
const app = Fastify({ keepAliveTimeout: 60000 });
// an error of the work (the database or Redis gone): 503, as the Express service answers it
app.setErrorHandler((err, request, reply) => {
  reply.code(err.statusCode >= 400 && err.statusCode < 500 ? err.statusCode : 503)
    .send({ error: err.message });
});
app.get('/__roundtrips', async () => roundTrips);

const keyOf = (request) => request.headers['idempotency-key'];

// (1) the plugin's handler form: the insert on the claim's transaction.
async function middleware() {
  await app.register(idempotencyPlugin, { pool, scope: 'bench' });
  app.post('/orders', { config: { idempotency: true } }, async (request, reply) => {
    const { client, key } = request.idempotency;
    reply.code(201);
    return { id: await insertOrder(client, key, request.body) };
  });
}

// (1s) the plugin's statement form: execute_once answers every request (the route's handler
// never runs), on a pool made with pg's `pipeline: true`.
async function statement() {
  await app.register(idempotencyPlugin, { pool: newPool({ pipeline: true }), scope: 'bench',
    statement: ORDER_STATEMENT,
    params: (request) => orderParams(parseIdempotencyKey(keyOf(request)), request.body) });
  app.post('/orders', { config: { idempotency: true } }, async () => {
    throw new Error('the statement form answers every request');
  });
}

// (4) Redis SET NX + Lua: the body parsed once from its bytes, kept for the fingerprint.
async function accelerator() {
  const r = await redis();
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body, done) => {
    request.rawBody = body;
    try {
      done(null, JSON.parse(body));
    } catch (err) {
      err.statusCode = 400;
      done(err, undefined);
    }
  });
  app.post('/orders', async (request, reply) => {
    const out = await accelerate(r, pool, keyOf(request), sha(request.rawBody), request.body);
    return reply.code(out.status).send(out.body);
  });
}

// (0) no idempotency: the insert alone (new keys only, see service.mjs).
async function insert() {
  app.post('/orders', async (request, reply) => {
    reply.code(201);
    return { id: await insertOrder(pool, parseIdempotencyKey(keyOf(request)), request.body) };
  });
}

const strategies = { 'fastify-middleware': middleware, 'fastify-statement': statement,
  'fastify-accelerator': accelerator, 'fastify-insert': insert };
if (!strategies[STRATEGY]) throw new Error(`unknown STRATEGY ${STRATEGY}`);
await strategies[STRATEGY]();
process.on('SIGTERM', () => process.exit(0)); // an exit, so that node --cpu-prof writes its profile
await app.listen({ port: Number(process.env.PORT), host: '127.0.0.1' });
console.log('listening');
