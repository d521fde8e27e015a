// bench/peers: one Express 5 service, POST /orders (Idempotency-Key, a small JSON body); the
// work inserts one row into bench_orders and answers 201 { id }. STRATEGY picks the
// idempotency layer (see bench/peers.sh); each is written as its own documentation shows.
// Environment: STRATEGY, PORT, PG* (the cluster), REDIS_URL. Prints "listening" when ready.
// The strategies on Fastify (STRATEGY fastify-...) are fastify.mjs's.
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import express from 'express';
import { idempotencyMiddleware, runExternal, parseIdempotencyKey, answerFor, isConnectionLost }
  from '../../clients/node/index.js';
import {
  accelerate, fortressTx, insertOrder, LOCK_MS, newPool, ORDER_STATEMENT, orderParams, redis, sha,
  TTL,
} from './work.mjs';
import { roundTrips } from './roundtrips.mjs';

const STRATEGY = process.env.STRATEGY;

const pool = newPool();
const app = express();
app.get('/__roundtrips', (req, res) => { res.json(roundTrips); });

const keyOf = (req) => req.get('idempotency-key');
const rawJson = express.json({ verify: (req, res, buf) => { req.rawBody = buf; } });

// (1) the project's middleware: claim, work and answer in one transaction.
function middleware() {
  const idempotency = idempotencyMiddleware({ pool, scope: 'bench' });
  app.post('/orders', rawJson, idempotency, async (req, res) => {
    const { client, key } = req.idempotency;
    res.status(201).json({ id: await insertOrder(client, key, req.body) });
  });
}

// (1s) the middleware's statement form: the insert is its statement, with its parameters from
// the request; one call of execute_once claims the key, inserts, stores the row as the answer
// and completes the key. No handler runs: the middleware answers 201 with the row. Its pool is
// made with pg's `pipeline: true`, as docs/http.md shows: concurrent requests' calls share its
// connections.
function statement() {
  app.post('/orders', rawJson, idempotencyMiddleware({ pool: newPool({ pipeline: true }),
    scope: 'bench', statement: ORDER_STATEMENT,
    params: (req) => orderParams(parseIdempotencyKey(keyOf(req)), req.body) }));
}

// (0) no idempotency: the insert alone, answered 201. Not a strategy (a retry inserts again):
// the rate any layer over the same work can approach. bench/peers.sh runs it for new keys only.
function insert() {
  app.post('/orders', rawJson, async (req, res) => {
    try {
      res.status(201).json({ id: await insertOrder(pool, parseIdempotencyKey(keyOf(req)),
        req.body) });
    } catch (err) {
      res.status(500).json({ error: err.message });
    }
  });
}

// (2) the project's cross-transaction helper: claim committed, work, finish + complete.
function external() {
  app.post('/orders', rawJson, async (req, res) => {
    let client;
    try {
      const key = parseIdempotencyKey(keyOf(req));
      client = await pool.connect();
      const finish = async (c) =>
        ({ statusCode: 201, response: { id: await insertOrder(c, key, req.body) } });
      const r = await runExternal(client, { scope: 'bench', key, request: req.rawBody, finish },
        async () => ({ statusCode: 201, response: null }));
      client.release();
      res.status(r.statusCode).json(r.response);
    } catch (err) {
      if (isConnectionLost(err, client)) client?.release(err); // dropped by the pool
      else client?.release();
      const a = answerFor(err);
      if (a) res.status(a.status).set(a.headers).json(a.body);
      else res.status(500).json({ error: err.message });
    }
  });
}

// (3) the fortress: a key table in PostgreSQL, insert-on-conflict, SELECT ... FOR UPDATE, the
// status and the response in the row, all in the business transaction (fortressTx, work.mjs).
function fortress() {
  app.post('/orders', rawJson, async (req, res) => {
    const r = await fortressTx(pool, keyOf(req), sha(req.rawBody), req.body);
    res.status(r.status).json(r.body);
  });
}

// (4) Redis SET NX + Lua: one script checks for a stored result or takes the lock; the work
// writes to PostgreSQL; a second script stores the result and drops the lock (if still ours)
// (accelerate, work.mjs).
async function accelerator() {
  const r = await redis();
  app.post('/orders', rawJson, async (req, res) => {
    const out = await accelerate(r, pool, keyOf(req), sha(req.rawBody), req.body);
    return res.status(out.status).json(out.body);
  });
}

// (5) the hybrid: Redis read-through, a Redis lock, the fortress transaction (the durable
// record), and the result written back to Redis after the commit.
async function hybrid() {
  const r = await redis();
  app.post('/orders', rawJson, async (req, res) => {
    const key = keyOf(req);
    const hash = sha(req.rawBody);
    const cached = await r.get(`result:${key}`);
    if (cached) {
      const stored = JSON.parse(cached);
      if (stored.hash !== hash) return res.status(422).json({ error: 'key reused' });
      return res.status(stored.status).json(stored.body);
    }
    const token = randomUUID();
    if (!(await r.set(`lock:${key}`, token, { NX: true, PX: LOCK_MS })))
      return res.status(409).json({ error: 'in progress' });
    try {
      const out = await fortressTx(pool, key, hash, req.body);
      if (out.status < 300) {
        await r.set(`result:${key}`, JSON.stringify({ hash, status: out.status, body: out.body }),
          { EX: TTL });
      }
      return res.status(out.status).json(out.body);
    } finally {
      if ((await r.get(`lock:${key}`).catch(() => null)) === token)
        await r.del(`lock:${key}`).catch(() => {});
    }
  });
}

// (6) @aws-lambda-powertools/idempotency, its cache (Redis) persistence layer, payload
// validation, outside Lambda through makeIdempotent.
async function powertools() {
  const { makeIdempotent, IdempotencyConfig } = await import('@aws-lambda-powertools/idempotency');
  const { CachePersistenceLayer } = await import('@aws-lambda-powertools/idempotency/cache');
  const { IdempotencyAlreadyInProgressError, IdempotencyValidationError } =
    await import('@aws-lambda-powertools/idempotency');
  const persistenceStore = new CachePersistenceLayer({ client: await redis() });
  const work = async (event) => ({ id: await insertOrder(pool, event.key, event.body) });
  const createOrder = makeIdempotent(work, {
    persistenceStore,
    config: new IdempotencyConfig({ eventKeyJmesPath: 'key', payloadValidationJmesPath: 'body',
      expiresAfterSeconds: TTL }),
  });
  app.post('/orders', rawJson, async (req, res) => {
    try {
      res.status(201).json(await createOrder({ key: keyOf(req), body: req.body }));
    } catch (err) {
      if (err instanceof IdempotencyAlreadyInProgressError)
        return res.status(409).json({ error: 'in progress' });
      if (err instanceof IdempotencyValidationError)
        return res.status(422).json({ error: 'key reused' });
      return res.status(500).json({ error: err.message });
    }
    return undefined;
  });
}

// (7) express-idempotency with express-idempotency-redis-adapter.
async function expressIdempotency() {
  const idempotency = (await import('express-idempotency')).default;
  const RedisAdapter = (await import('express-idempotency-redis-adapter')).default.default;
  const adapter = new RedisAdapter({ connectionConfig: { url: process.env.REDIS_URL } });
  await adapter.connect();
  app.use(rawJson);
  app.use(idempotency.idempotency({ dataAdapter: adapter }));
  app.post('/orders', async (req, res) => {
    if (idempotency.getSharedIdempotencyService().isHit(req)) return undefined;
    try {
      return res.status(201).json({ id: await insertOrder(pool, keyOf(req), req.body) });
    } catch (err) {
      idempotency.getSharedIdempotencyService().reportError(req);
      return res.status(500).json({ error: err.message });
    }
  });
}

const strategies = { insert, middleware, statement, external, fortress, accelerator, hybrid,
  powertools, 'express-idempotency': expressIdempotency };
if (!strategies[STRATEGY]) throw new Error(`unknown STRATEGY ${STRATEGY}`);
await strategies[STRATEGY]();
app.use((err, req, res, next) => { // eslint-disable-line no-unused-vars
  if (!res.headersSent) res.status(503).json({ error: err.message });
});
const server = http.createServer({ keepAliveTimeout: 60000 }, app);
process.on('SIGTERM', () => process.exit(0)); // an exit, so that node --cpu-prof writes its profile
server.listen(Number(process.env.PORT), '127.0.0.1', () => { console.log('listening'); });
