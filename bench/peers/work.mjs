// bench/peers: what the strategies do apart from HTTP, shared by the service (service.mjs) and
// the loops without HTTP (loop.mjs): the business write, the fortress transaction, the Redis
// SET NX + Lua scripts, the statements the project's middleware sends, and its statement form
// (the business write as execute_once's statement).
import { createHash, randomUUID } from 'node:crypto';
import pg from 'pg';
import { createClient } from '@redis/client';
import { completeThen, requestHash, reserveAfter, reserveBegin } from '../../clients/node/lib/keys.js';
import { serverEdition } from '../../clients/node/lib/versions.js';
import { runOnce } from '../../clients/node/lib/transactions.js';

export const TTL = 86400; // seconds a result is kept
export const LOCK_MS = 30000; // how long a Redis lock lives if its holder dies

export function newPool(options = {}) {
  const pool = new pg.Pool({ max: Number(process.env.PG_POOL ?? 16), ...options });
  pool.on('error', () => {});
  return pool;
}

export async function redis() {
  const client = createClient({ url: process.env.REDIS_URL });
  client.on('error', () => {}); // reconnects on its own; commands fail meanwhile
  await client.connect();
  return client;
}

// The business work: one order row.
const INSERT_ORDER = 'INSERT INTO bench_orders (k, item, qty) VALUES ($1, $2, $3)';
export const orderParams = (key, body) => [key, body.item, body.qty];
export const insertOrder = async (db, key, body) => (await db.query(
  `${INSERT_ORDER} RETURNING id`, orderParams(key, body))).rows[0].id;
// (1s) the same insert as the statement of the statement form, with the same parameters. Its one
// row is the answer: the id as text, as node-postgres reads a bigint, so that the body is the
// other strategies' {"id":"..."}, byte for byte.
export const ORDER_STATEMENT = `${INSERT_ORDER} RETURNING id::text AS id`;

export const sha = (buf) => createHash('sha256').update(buf).digest('hex');

// (3) the fortress: a key table in PostgreSQL, insert-on-conflict, SELECT ... FOR UPDATE, the
// status and the response in the row, all in the business transaction. { status, body }.
export async function fortressTx(pool, key, hash, body) {
  const db = await pool.connect();
  try {
    await db.query('BEGIN');
    const ins = await db.query(`INSERT INTO bench_idem (k, request_hash, status)
      VALUES ($1, $2, 'processing') ON CONFLICT (k) DO NOTHING`, [key, hash]);
    if (ins.rowCount === 0) {
      const { rows } = await db.query(`SELECT status, request_hash, status_code, response
        FROM bench_idem WHERE k = $1 FOR UPDATE`, [key]);
      await db.query('ROLLBACK');
      db.release();
      const row = rows[0];
      if (!row) return { status: 409, body: { error: 'retry' } };
      if (row.request_hash !== hash) return { status: 422, body: { error: 'key reused' } };
      if (row.status !== 'completed') return { status: 409, body: { error: 'in progress' } };
      return { status: row.status_code, body: row.response, replay: true };
    }
    const id = await insertOrder(db, key, body);
    const response = { id };
    await db.query(`UPDATE bench_idem SET status = 'completed', status_code = 201,
      response = $2 WHERE k = $1`, [key, response]);
    await db.query('COMMIT');
    db.release();
    return { status: 201, body: response };
  } catch (err) {
    db.release(err); // dropped: the server rolls back
    throw err;
  }
}

// (4) Redis SET NX + Lua: one script checks for a stored result or takes the lock; the work
// writes to PostgreSQL; a second script stores the result and drops the lock (if still ours).
const TAKE = `local r = redis.call('GET', KEYS[2])
if r then return 'R' .. r end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 'L' end
return 'B'`;
const FINISH = `redis.call('SET', KEYS[2], ARGV[2], 'EX', ARGV[3])
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1`;
export async function accelerate(r, pool, key, hash, body) {
  const token = randomUUID();
  const got = await r.eval(TAKE, { keys: [`lock:${key}`, `result:${key}`],
    arguments: [token, String(LOCK_MS)] });
  if (got[0] === 'R') {
    const stored = JSON.parse(got.slice(1));
    if (stored.hash !== hash) return { status: 422, body: { error: 'key reused' } };
    return { status: stored.status, body: stored.body, replay: true };
  }
  if (got === 'B') return { status: 409, body: { error: 'in progress' } };
  let id;
  try {
    id = await insertOrder(pool, key, body);
  } catch (err) {
    await r.del(`lock:${key}`).catch(() => {});
    throw err;
  }
  const answer = { id };
  await r.eval(FINISH, { keys: [`lock:${key}`, `result:${key}`],
    arguments: [token, JSON.stringify({ hash, status: 201, body: answer }), String(TTL)] });
  return { status: 201, body: answer };
}

// (1) without HTTP: the statements the project's middleware sends for a request
// (reserve_begin prepared, or BEGIN + reserve in one round trip where the server's edition has
// no reserve_begin, the managed edition; on 'new' the work, then complete + COMMIT in one round
// trip).
export async function middlewareStatements(pool, key, rawBody, body) {
  const client = await pool.connect();
  try {
    const hash = requestHash(rawBody);
    const begun = (await serverEdition(client)).offers('reserve_begin');
    const r = begun ? await reserveBegin(client, 'bench', key, hash, { prepare: true })
      : await reserveAfter(client, 'BEGIN', 'bench', key, hash);
    if (r.outcome !== 'new') {
      if (!begun) await client.query('ROLLBACK');
      client.release();
      return { status: r.statusCode ?? 409, body: r.response, replay: r.outcome === 'replay' };
    }
    const answer = { id: await insertOrder(client, key, body) };
    await completeThen(client, 'COMMIT', 'bench', key, 201, answer, r.attempt, { prepare: begun });
    client.release();
    return { status: 201, body: answer };
  } catch (err) {
    client.release(err);
    throw err;
  }
}

// (1s) without HTTP: runOnce's statement form, what the middleware's statement option sends for
// a request (one call of execute_once: the claim, the insert and its stored answer).
export async function statementOnce(pool, key, rawBody, body) {
  const client = await pool.connect();
  try {
    const r = await runOnce(client, { scope: 'bench', key, request: rawBody,
      statement: ORDER_STATEMENT, params: orderParams(key, body) });
    client.release();
    return { status: r.statusCode, body: r.response, replay: r.replayed };
  } catch (err) {
    client.release(err);
    throw err;
  }
}
