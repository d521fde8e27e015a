// Orders API whose Idempotency-Key header is backed by the idempotency extension, through its
// Node client (@idempotency/client, clients/node): the middleware for the one-transaction path,
// runExternal for the path with an external call.
//   POST /orders                 create an order (Authorization + Idempotency-Key required)
//   GET  /orders/by-key/:key     what the server knows about a key (support staff)
//   GET  /healthz
//   GET  /                       the order page (public/index.html), a browser client
//   GET  /action.js              the helper it loads (@idempotency/client/action)
// Run: PGHOST=... PGPORT=... PGDATABASE=... node src/server.js   (see docs/http.md)
import fs from 'node:fs';
import http from 'node:http';
import { createRequire } from 'node:module';
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import {
  answerFor, idempotencyMiddleware, parseIdempotencyKey, replayOf as storedReplay, runExternal,
  STORED_MARK, StaleAttemptError,
} from '@idempotency/client';
import pg from 'pg';

const SCHEMA = fs.readFileSync(new URL('../schema.sql', import.meta.url), 'utf8');
// The order page and the client helper it imports, served as they are (no bundler).
const STATIC = {
  '/': { file: new URL('../public/index.html', import.meta.url), type: 'text/html' },
  '/action.js': { file: createRequire(import.meta.url).resolve('@idempotency/client/action'),
    type: 'text/javascript' },
};

export const CATALOG = { widget: 250, gadget: 1000, gizmo: 4200 }; // prices in cents
const DEFAULT_TOKENS = { 'alice-token': 'acct_alice', 'bob-token': 'acct_bob' };
const VOLATILE_FIELDS = ['client_sent_at']; // left out of the request fingerprint
const MAX_BODY_BYTES = 64 * 1024;
const MAX_SIMULATED_MS = 60_000;

export function configFromEnv(env = process.env) {
  return {
    host: env.HOST ?? '127.0.0.1',
    port: Number(env.PORT ?? 3000),
    lockTtl: env.LOCK_TTL ?? '30 seconds', // how long a committed claim outlives a crash
    retention: env.RETENTION ?? '24 hours', // how long responses are replayed
    reserveWait: env.RESERVE_WAIT ?? '0', // how long a duplicate waits before 409
    tokens: env.API_TOKENS ? JSON.parse(env.API_TOKENS) : DEFAULT_TOKENS,
    poolSize: Number(env.PG_POOL_MAX ?? 10),
    logRequests: env.LOG_REQUESTS === '1',
  };
}

class HttpError extends Error {
  constructor(status, code, message, headers = {}) {
    super(message);
    this.status = status;
    this.code = code;
    this.headers = headers;
  }
}

const reply = (status, body, headers = {}) => ({ status, body, headers });
const problem = (status, code, message, headers = {}) =>
  reply(status, { error: code, message }, headers);

// --- request parsing --------------------------------------------------------------------------

export { parseIdempotencyKey };

function authenticate(req, tokens) {
  const m = /^Bearer +(\S+)$/i.exec(req.headers.authorization ?? '');
  const account = m && Object.hasOwn(tokens, m[1]) ? tokens[m[1]] : undefined;
  if (!account)
    throw new HttpError(401, 'unauthorized', 'a valid "Authorization: Bearer <token>" is required',
      { 'WWW-Authenticate': 'Bearer' });
  return account;
}

// The body's bytes (fingerprinted as sent, every digit kept) and its parsed value.
async function readJson(req) {
  const chunks = [];
  let size = 0;
  for await (const chunk of req) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES)
      throw new HttpError(413, 'body_too_large', `the body is limited to ${MAX_BODY_BYTES} bytes`,
        { Connection: 'close' });
    chunks.push(chunk);
  }
  const raw = Buffer.concat(chunks);
  try {
    return { raw, body: JSON.parse(raw.toString('utf8')) };
  } catch {
    throw new HttpError(400, 'invalid_json', 'the body must be JSON');
  }
}

// Checked before the key is reserved: the same body always fails the same way, so a
// validation error need not be stored.
export function validateOrder(body) {
  const bad = (message) => new HttpError(400, 'invalid_order', message);
  if (body === null || typeof body !== 'object' || Array.isArray(body))
    throw bad('the body must be a JSON object');
  const { item, quantity, note } = body;
  if (typeof item !== 'string' || !Object.hasOwn(CATALOG, item))
    throw bad(`item must be one of ${Object.keys(CATALOG).join(', ')}`);
  if (!Number.isInteger(quantity) || quantity < 1 || quantity > 1000)
    throw bad('quantity must be an integer from 1 to 1000');
  if (note !== undefined && note !== null && (typeof note !== 'string' || note.length > 500))
    throw bad('note must be a string of at most 500 characters');
  return { item, quantity, note: note ?? null, totalCents: CATALOG[item] * quantity };
}

// Query parameters that simulate slow or failing work (for demos and tests).
function simulation(url) {
  const ms = (name) => {
    const text = url.searchParams.get(name);
    if (text === null) return 0;
    const value = Number(text);
    if (!Number.isInteger(value) || value < 0 || value > MAX_SIMULATED_MS)
      throw new HttpError(400, 'invalid_parameter', `${name} must be 0 to ${MAX_SIMULATED_MS}`);
    return value;
  };
  return {
    delayMs: ms('delay_ms'), // a slow handler inside the one transaction
    externalMs: url.searchParams.has('external_ms') ? ms('external_ms') : null, // two-step flow
    externalError: url.searchParams.get('external_error') === '1', // the external call fails
  };
}

// --- SQL --------------------------------------------------------------------------------------

const INSERT_ORDER = `
  INSERT INTO orders (account, idempotency_key, item, quantity, total_cents, note)
  VALUES ($1, $2, $3, $4, $5, $6)
  RETURNING jsonb_build_object('id', id, 'account', account, 'idempotency_key', idempotency_key,
    'item', item, 'quantity', quantity, 'total_cents', total_cents, 'note', note,
    'created_at', created_at) AS body`;
const LOOKUP = `
  SELECT l.state, l.status_code, l.response, encode(l.request_hash, 'hex') AS request_hash,
         l.attempt, l.recovery_point, l.last_error, l.first_seen_at, l.completed_at,
         l.locked_until, l.expires_at,
         ARRAY(SELECT o.id::text FROM orders o
                WHERE o.account = $1 AND o.idempotency_key = $2 ORDER BY o.id) AS order_ids
    FROM idempotency.lookup($1, $2) AS l`;

class SupplierUnavailable extends Error {}

// --- the orders service -------------------------------------------------------------------------

export function createService(pool, config) {
  const insertOrder = (client, ctx) =>
    client.query(INSERT_ORDER, [ctx.account, ctx.key, ctx.order.item, ctx.order.quantity,
      ctx.order.totalCents, ctx.order.note]).then((r) => r.rows[0].body);

  const claimOptions = () => ({
    exclude: VOLATILE_FIELDS, lockTtl: config.lockTtl, retention: config.retention,
    wait: config.reserveWait,
  });

  // The common path: reserve, insert, complete, commit, all in one transaction, by the
  // middleware. A failure rolls everything back, the claim included: the retry starts afresh.
  const oneTransaction = idempotencyMiddleware({
    pool,
    ...claimOptions(),
    scope: (req) => req.ctx.account,
    key: (req) => req.ctx.key,
    request: (req) => req.ctx.raw, // the replay carries the first answer's Location: stored
  });

  async function createInOneTransaction(req, res) {
    await oneTransaction(req, res, async (err) => {
      if (err) throw err;
      const { ctx } = req;
      if (ctx.sim.delayMs) await sleep(ctx.sim.delayMs); // a slow handler: duplicates get 409
      const body = await insertOrder(req.idempotency.client, ctx);
      send(res, reply(201, body, location(201, body)));
    });
    return null; // answered
  }

  // The cross-transaction path, for work with an external side effect: the claim commits, the
  // external call runs outside any transaction, then the order and the result commit in a
  // second transaction fenced by the attempt. A crash in between leaves a claim that lapses
  // after LOCK_TTL; the next retry takes it over (attempt + 1, recovery point kept).
  async function createWithExternalCall(ctx) {
    const client = await pool.connect();
    let broken;
    try {
      const r = await runExternal(client, {
        scope: ctx.account, key: ctx.key, request: ctx.raw, ...claimOptions(),
        failWith: (err) => ({ error: err instanceof SupplierUnavailable
          ? 'supplier_unavailable' : 'internal_error' }),
        finish: async (c) => ({ statusCode: 201, response: await insertOrder(c, ctx) }),
      }, async (attempt) => {
        await attempt.checkpoint('supplier_called');
        // The simulated external call. attempt.recoveryPoint === 'supplier_called' means an
        // earlier attempt may have made it already: a real supplier would get the same key.
        await sleep(ctx.sim.externalMs);
        if (ctx.sim.externalError) throw new SupplierUnavailable('the supplier did not answer');
        return { statusCode: 201, response: null };
      });
      return r.replayed ? replayOf(r.statusCode, r.response)
        : reply(r.statusCode, r.response, location(r.statusCode, r.response));
    } catch (err) {
      if (err instanceof SupplierUnavailable)
        return problem(502, 'supplier_unavailable',
          'the supplier did not answer; retry with the same Idempotency-Key', { 'Retry-After': '1' });
      if (err instanceof StaleAttemptError) // our lease lapsed and a retry took over: its result wins
        return problem(409, 'idempotency_key_taken_over',
          'this attempt outlived its claim and a retry took the key over; retry to get its result',
          { 'Retry-After': '1' });
      const answer = answerFor(err); // in_progress, mismatch, too_old
      if (answer) return answer;
      broken = isUnavailable(err) ? err : undefined;
      throw err;
    } finally {
      client.release(broken);
    }
  }

  async function postOrder(req, res, url) {
    const account = authenticate(req, config.tokens);
    const key = parseIdempotencyKey(req.headers['idempotency-key']);
    const sim = simulation(url);
    const { raw, body } = await readJson(req);
    req.ctx = { account, key, raw, body, sim, order: validateOrder(body) };
    return sim.externalMs === null ? createInOneTransaction(req, res)
      : createWithExternalCall(req.ctx);
  }

  async function getByKey(req, encodedKey) {
    const account = authenticate(req, config.tokens);
    let raw;
    try {
      raw = decodeURIComponent(encodedKey);
    } catch {
      throw new HttpError(400, 'idempotency_key_malformed', 'the key is not valid URL encoding');
    }
    const key = parseIdempotencyKey(raw);
    const { rows } = await pool.query(LOOKUP, [account, key]);
    if (rows.length === 0)
      return problem(404, 'not_found', 'no live record for this key in your account');
    const row = rows[0];
    // The middleware stores an answer with the headers its replays carry: its body is shown
    // as the response, the headers beside it.
    if (row.response?.[STORED_MARK] === 1) {
      const { value, headers } = storedReplay(row.response);
      Object.assign(row, { response: value ?? null, response_headers: headers });
    }
    return reply(200, { key, ...row, order_ids: row.order_ids.map(Number) });
  }

  // The answer to send, or null when the request was answered already (the middleware's path).
  return async function handle(req, res) {
    const url = new URL(req.url, 'http://localhost');
    const path = url.pathname;
    if (path === '/orders') {
      if (req.method !== 'POST') return problem(405, 'method_not_allowed', 'use POST', { Allow: 'POST' });
      return postOrder(req, res, url);
    }
    if (path.startsWith('/orders/by-key/') && path.length > '/orders/by-key/'.length) {
      if (req.method !== 'GET') return problem(405, 'method_not_allowed', 'use GET', { Allow: 'GET' });
      return getByKey(req, path.slice('/orders/by-key/'.length));
    }
    if (path === '/healthz') return reply(200, { ok: true });
    if (Object.hasOwn(STATIC, path)) {
      if (req.method !== 'GET')
        return problem(405, 'method_not_allowed', 'use GET', { Allow: 'GET' });
      const { file, type } = STATIC[path];
      const bytes = await fs.promises.readFile(file);
      res.writeHead(200, { 'Content-Type': `${type}; charset=utf-8`,
        'Content-Length': bytes.length, 'Cache-Control': 'no-store' });
      res.end(bytes);
      return null; // answered
    }
    return problem(404, 'not_found', 'no such resource');
  };
}

function location(status, body) {
  return status === 201 && body && body.id !== undefined ? { Location: `/orders/${body.id}` } : {};
}

const replayOf = (status, body) =>
  reply(status, body ?? null, { 'Idempotent-Replayed': 'true', ...location(status, body) });

function isUnavailable(err) {
  return ['ECONNREFUSED', 'ENOENT', 'ECONNRESET', '57P01', '57P03'].includes(err.code) ||
    (typeof err.code === 'string' && err.code.startsWith('08'));
}

function send(res, answer) {
  const text = JSON.stringify(answer.body);
  res.writeHead(answer.status, {
    'Content-Type': 'application/json',
    'Content-Length': Buffer.byteLength(text),
    ...answer.headers,
  });
  res.end(text);
}

export function createHttpServer(pool, config) {
  const handle = createService(pool, config);
  return http.createServer(async (req, res) => {
    const started = Date.now();
    res.on('error', () => {}); // the client may be gone; the work still completes
    let answer;
    try {
      answer = await handle(req, res);
    } catch (err) {
      if (err instanceof HttpError) {
        answer = problem(err.status, err.code, err.message, err.headers);
      } else if (answerFor(err)) {
        answer = answerFor(err); // the Idempotency-Key header
      } else if (isUnavailable(err)) {
        console.error(`${req.method} ${req.url}: ${err.message}`);
        answer = problem(503, 'unavailable', 'the database is unavailable', { 'Retry-After': '1' });
      } else {
        console.error(`${req.method} ${req.url}:`, err);
        answer = problem(500, 'internal_error', 'the request failed; retry with the same Idempotency-Key');
      }
    }
    if (answer && !res.destroyed && !res.headersSent) send(res, answer);
    if (config.logRequests)
      console.log(`${req.method} ${req.url} ${answer?.status ?? res.statusCode} key=${req.headers['idempotency-key'] ?? '-'} ` +
        `${Date.now() - started}ms${res.destroyed ? ' (client gone)' : ''}`);
  });
}

// Creates the extension and the orders table unless they exist (one server at a time). Where
// both exist it runs no DDL: a service running as an application role that owns nothing (on a
// managed database, docs/managed.md) starts on tables the database's owner made. Returns
// whether it applied schema.sql.
export async function applySchema(pool) {
  const { rows } = await pool.query("SELECT to_regnamespace('idempotency') IS NOT NULL " +
    "AND to_regclass('orders') IS NOT NULL AS ready");
  if (rows[0].ready) return false;
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query("SELECT pg_advisory_xact_lock(hashtext('idempotency http example schema'))");
    await client.query(SCHEMA);
    await client.query('COMMIT');
    return true;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw err;
  } finally {
    client.release();
  }
}

async function main() {
  const config = configFromEnv();
  const pool = new pg.Pool({ max: config.poolSize }); // connection from PGHOST, PGPORT, ...
  // A lost connection (database restart) fails the request using it, not the process.
  pool.on('error', (err) => console.error(`idle database connection: ${err.message}`));
  pool.on('connect', (client) =>
    client.on('error', (err) => console.error(`database connection: ${err.message}`)));
  await applySchema(pool);
  const server = createHttpServer(pool, config);
  server.listen(config.port, config.host, () => {
    const { address, port } = server.address();
    console.log(`listening on http://${address}:${port}`);
  });
  let stopping = false;
  const stop = () => {
    if (stopping) return;
    stopping = true;
    server.close(() => pool.end().then(() => process.exit(0)));
    server.closeIdleConnections();
    setTimeout(() => process.exit(0), 5000).unref();
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  // Tests start servers with EXIT_WITH_STDIN=1: a server never outlives its test process.
  if (process.env.EXIT_WITH_STDIN === '1') process.stdin.on('close', stop).resume();
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((err) => {
    console.error(`orders server: ${err.message}`);
    process.exit(1);
  });
}
