// An Express 5 service for the fault tests: POST /orders under the middleware, POST /once under
// runOnce and POST /external under runExternal, each inserting one order. Its database
// connections go where PGHOST / PGPORT say (the tests' TCP proxy); it prints {"port": N} once
// it listens. It must survive whatever happens to the database or the network.
//   node service_proc.js DATABASE
import http from 'node:http';
import express from 'express';
import pg from 'pg';
import {
  answerFor, idempotencyMiddleware, parseIdempotencyKey, runExternal, runOnce,
} from '../index.js';

const pool = new pg.Pool({ database: process.argv[2], max: 4, connectionTimeoutMillis: 5000 });
const app = express();
app.use(express.json());
const delay = (req) => new Promise((r) => { setTimeout(r, Number(req.query.delay_ms ?? 0)); });
const insertOrder = async (client, key, item) => (await client.query(
  'INSERT INTO orders (k, item) VALUES ($1, $2) RETURNING id', [key, item])).rows[0].id;

app.post('/orders', idempotencyMiddleware({ pool, scope: 'faults' }), async (req, res) => {
  const { client, key } = req.idempotency;
  await delay(req);
  res.status(201).json({ id: await insertOrder(client, key, req.body.item) });
});

// The helpers on a client of the application's own: a broken one goes back with the error.
function withHelper(helper) {
  return async (req, res) => {
    let client;
    try {
      const key = parseIdempotencyKey(req.get('idempotency-key'));
      client = await pool.connect();
      const r = await helper(client, key, req);
      client.release();
      res.status(r.statusCode).json(r.response);
    } catch (err) {
      client?.release(err);
      const answer = answerFor(err); // ConnectionLostError: 503
      if (answer) return res.status(answer.status).set(answer.headers).json(answer.body);
      return res.status(500).json({ error: err.name, message: err.message });
    }
    return undefined;
  };
}

app.post('/once', withHelper((client, key, req) => runOnce(client,
  { scope: 'faults', key, request: req.body }, async (c) => {
    await delay(req);
    return { statusCode: 201, response: { id: await insertOrder(c, key, req.body.item) } };
  })));

app.post('/external', withHelper((client, key, req) => runExternal(client,
  { scope: 'faults', key, request: req.body, lockTtl: 1, finish: async (c, result) => ({
    statusCode: 201, response: { id: await insertOrder(c, key, result.response.item) } }) },
  async () => {
    await delay(req);
    return { statusCode: 201, response: { item: req.body.item } };
  })));

app.get('/alive', (req, res) => { res.json({ pid: process.pid }); });
app.use((err, req, res, next) => { // eslint-disable-line no-unused-vars
  res.status(500).json({ error: 'internal_error', message: err.message });
});
// An idle pooled client that loses its connection is the pool's to handle (it drops it).
pool.on('error', () => {});
const server = http.createServer(app);
server.listen(0, '127.0.0.1', () => {
  process.stdout.write(`${JSON.stringify({ port: server.address().port })}\n`);
});
