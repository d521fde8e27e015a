// The key calls of the extension with typed results and typed errors: reserve, reserve_begin,
// complete, fail, checkpoint, lookup and forget, the Reservation reserve gives, the checks of
// scope and key names, and the request hash. Every function takes a connected pg client
// (pg.Client, or a pool's client): this package never opens connections itself, so it works
// with whatever pg the application has.
import {
  firstValue, isParsed, query, queryStatements, sharedStatement, TEXT_ROWS, transactionStatus,
  writesProtocol,
} from './connection.js';
import { KeyEmptyError, KeyTooLongError } from './errors.js';
import { fingerprint } from './fingerprint.js';
import {
  CHECKPOINT, COMPLETE, EXECUTE_ONCE, FAIL, FORGET, LOOKUP, PREPARED, RESERVE, RESERVE_BEGIN,
} from './statements.js';
import { DEFAULT_LOCK_TTL, DEFAULT_RETENTION, DEFAULT_WAIT, DURATION_UNIT } from './spec.js';

// An interval parameter: a number is seconds, a string the server's interval text.
export const interval = (v) =>
  (typeof v === 'number' ? `${Math.round(v * 1e6)} ${DURATION_UNIT}` : v);
// A jsonb parameter as its JSON text (pg would send an array as a PostgreSQL array).
export const json = (v) => (v === undefined ? null : JSON.stringify(v));

// fingerprint(request, { exclude }), or null for a request of null / undefined (no check).
export function requestHash(request, exclude) {
  return request === undefined || request === null ? null : fingerprint(request, { exclude });
}

const TIMESTAMPTZ = 1184;

// A jsonb value the server sent as text (the statements cast it): the JSON value, or null.
const jsonOf = (text) => (text === null ? null : JSON.parse(text));

// reserve's row. The three timestamps become Dates (with the client's own parser) when first
// read: the middleware never reads them, and three Dates cost a replay more than its JSON.
const number = (v) => (v === null ? null : Number(v));

class Reservation {
  #row;
  #client;
  #dates = {};

  constructor(row, client) {
    this.outcome = row.outcome;
    this.statusCode = number(row.status_code);
    this.response = jsonOf(row.response);
    this.attempt = number(row.attempt);
    this.recoveryPoint = row.recovery_point;
    this.#row = row;
    this.#client = client;
  }

  #date(column) {
    if (!(column in this.#dates)) {
      const text = this.#row[column];
      const toDate = this.#client?.getTypeParser?.(TIMESTAMPTZ, 'text') ?? ((t) => new Date(t));
      this.#dates[column] = text === null ? null : toDate(text);
    }
    return this.#dates[column];
  }

  get firstSeenAt() { return this.#date('first_seen_at'); }

  get lockedUntil() { return this.#date('locked_until'); }

  get expiresAt() { return this.#date('expires_at'); }

  toJSON() {
    return { ...this, firstSeenAt: this.firstSeenAt, lockedUntil: this.lockedUntil,
      expiresAt: this.expiresAt };
  }
}

const reservationOf = (row, client) => new Reservation(row, client);

// A row of queryStatements (reserve's columns, in RESERVE's order) as the object Reservation
// reads.
const reservationOfFields = (f, client) => reservationOf({ outcome: f[0], status_code: f[1],
  response: f[2], attempt: f[3], recovery_point: f[4], first_seen_at: f[5],
  locked_until: f[6], expires_at: f[7] }, client);

// KeyEmptyError / KeyTooLongError (a 400 for answerFor) unless scope and key are each 1 to 255
// bytes of UTF-8, the server's rule: refused before anything is sent.
export function checkNames(scope, key) {
  for (const [what, value] of [['scope', scope], ['key', key]]) {
    if (value === undefined || value === null) continue;
    const bytes = Buffer.byteLength(String(value), 'utf8');
    if (bytes === 0) throw new KeyEmptyError(what);
    if (bytes > 255) throw new KeyTooLongError(what, bytes);
  }
}

// The values of reserve's ($1 to $6) and reserve_begin's parameters, once scope and key pass
// checkNames.
function reserveValues(scope, key, requestHash,
  { lockTtl = DEFAULT_LOCK_TTL, retention = DEFAULT_RETENTION, wait = DEFAULT_WAIT } = {}) {
  checkNames(scope, key);
  return [scope, key, requestHash ?? null, interval(lockTtl), interval(retention),
    interval(wait)];
}

// idempotency.reserve. requestHash: a Buffer (see fingerprint) or null.
export async function reserve(client, scope, key, requestHash = null, options = {}) {
  const values = reserveValues(scope, key, requestHash, options);
  const { rows } = await query(client, RESERVE, values, TEXT_ROWS);
  return reservationOf(rows[0], client);
}

// A parameter of execute_once's statement as the text the server reads for its type (the
// statement's cast or column says which): null and undefined are NULL; strings as they are;
// booleans true / false; numbers and bigints as numbers (NaN, Infinity, -Infinity as
// PostgreSQL writes them); a Date in ISO 8601 (UTC); a Buffer or Uint8Array as bytea's hex
// form; other objects and arrays as JSON text. Anything else is a TypeError: the text of an
// unknown type would be a guess.
export function statementParam(value) {
  if (value === null || value === undefined) return null;
  switch (typeof value) {
    case 'string': return value;
    case 'boolean': return value ? 'true' : 'false';
    case 'bigint': return String(value);
    case 'number':
      if (Number.isNaN(value)) return 'NaN';
      if (!Number.isFinite(value)) return value > 0 ? 'Infinity' : '-Infinity';
      return String(value);
    case 'object':
      if (value instanceof Date) {
        if (Number.isNaN(value.getTime())) throw new TypeError('a statement parameter is an invalid Date');
        return value.toISOString();
      }
      if (value instanceof Uint8Array) return `\\x${Buffer.from(value).toString('hex')}`;
      return JSON.stringify(value);
    default:
      throw new TypeError(`a statement parameter of type ${typeof value} has no text form here: ` +
        'pass it as a string, or as a type the client converts');
  }
}

// execute_once's parameters ($1 to $9), the statement's converted by statementParam; a
// KeyEmptyError / KeyTooLongError (a 400) or TypeError before anything is sent.
export function executeOnceValues(scope, key, requestHash, statement, params = [],
  statusCode = 201, options = {}) {
  if (typeof statement !== 'string' || statement.trim() === '')
    throw new TypeError('executeOnce needs the statement as a non-empty string');
  if (params !== null && params !== undefined && !Array.isArray(params))
    throw new TypeError("the statement's params must be an array");
  if (!Number.isInteger(statusCode)) throw new TypeError('the status must be an integer');
  const [s, k, hash, lockTtl, retention, wait] = reserveValues(scope, key, requestHash, options);
  return [s, k, hash, statement, (params ?? []).map(statementParam), statusCode, lockTtl,
    retention, wait];
}

// The clients that met preparedStatementUnusable: their server connection's prepared
// statements are not theirs (a pooler), so their execute_once, claim_once and accept go
// unnamed from then on.
const unnamed = new WeakSet();
export const sendsUnnamed = (client) => unnamed.has(client);
export const sendUnnamed = (client) => { unnamed.add(client); };

const PREPARED_EXECUTE_ONCE = PREPARED.execute_once;

// idempotency.execute_once in the client's current transaction (autocommit when it has none
// open): on the outcome 'new' the statement ran with its parameters bound (one text[]), and
// the reservation carries statusCode and the statement's result as its response. One round
// trip. A server before 0.3.0 has no execute_once: ExtensionVersionError naming it.
// prepare (default true): with no transaction open, as a prepared statement (parsed and
// planned once per connection, then bound and executed only). A server
// connection whose prepared statements are not the client's (26000 or 42P05, see
// preparedStatementUnusable) refuses it at Parse or Bind, before anything ran: it is sent
// again unnamed, as is every later one of that client (sendsUnnamed). Inside the caller's
// transaction it goes unnamed: a refused Parse would fail the caller's transaction.
export async function executeOnce(client, scope, key, statement, params = [],
  requestHash = null, { statusCode = 201, prepare = true, ...options } = {}) {
  return executeOnceOf(client, executeOnceValues(scope, key, requestHash, statement, params,
    statusCode, options), prepare);
}

// executeOnce with its parameters checked and converted already (executeOnceValues).
// On a connection in pg's pipeline mode, shared by concurrent calls (pipeline.js),
// sharedStatement sends it (a prepared one parsed once per connection too).
export async function executeOnceOf(client, values, prepare = true) {
  const pipelined = client.pipeline === true;
  if (prepare && !unnamed.has(client) && transactionStatus(client) === 'I') {
    try {
      if (pipelined) {
        const rows = await sharedStatement(client, { ...PREPARED_EXECUTE_ONCE, values });
        return reservationOfFields(rows[0], client);
      }
      if (writesProtocol(client)) {
        const [rows] = await queryStatements(client, [{ ...PREPARED_EXECUTE_ONCE, values }]);
        return reservationOfFields(rows[0], client);
      }
      const { rows } = await query(client, EXECUTE_ONCE, values, TEXT_ROWS,
        PREPARED_EXECUTE_ONCE.name);
      return reservationOf(rows[0], client);
    } catch (err) {
      if (!preparedStatementUnusable(err)) throw err;
      unnamed.add(client);
    }
  }
  if (!pipelined)
    return reservationOf((await query(client, EXECUTE_ONCE, values, TEXT_ROWS)).rows[0], client);
  const rows = await sharedStatement(client, { text: EXECUTE_ONCE, values });
  return reservationOfFields(rows[0], client);
}

export async function complete(client, scope, key, statusCode, response, attempt = null) {
  await query(client, COMPLETE, [scope, key, statusCode, json(response), attempt]);
}

export async function fail(client, scope, key, error = null, attempt = null) {
  await query(client, FAIL, [scope, key, json(error), attempt]);
}

export async function checkpoint(client, scope, key, recoveryPoint, attempt = null) {
  await query(client, CHECKPOINT, [scope, key, recoveryPoint, attempt]);
}

// ---- several statements in one round trip ----
// A transaction that opens, reserves, and later completes and commits costs five round trips
// one statement at a time (BEGIN, reserve, the work, complete, COMMIT). On pg's own client,
// connection.js's queryStatements sends BEGIN and reserve (or complete and COMMIT) in one
// write with the values bound; the server runs them in order and stops at the first error
// (the rest are skipped, so a COMMIT after a failed complete never runs and the transaction is
// left failed, to be rolled back). No value is ever written into a query text: a client
// without pg's protocol connection (pg-native, a wrapper) sends the statements one by one,
// with parameters.

// `before` (say 'BEGIN' or 'SAVEPOINT s') then reserve, in one round trip. If it fails, it is
// unknown whether `before` ran: roll back as after a failed reserve.
export async function reserveAfter(client, before, scope, key, requestHash = null,
  options = {}) {
  const values = reserveValues(scope, key, requestHash, options);
  if (!writesProtocol(client)) {
    await query(client, before);
    return reservationOf((await query(client, RESERVE, values, TEXT_ROWS)).rows[0], client);
  }
  const [, rows] = await queryStatements(client, [{ text: before, values: [] },
    { text: RESERVE, values }]);
  return reservationOfFields(rows[0], client); // `before`'s rows (none), then reserve's
}

const PREPARED_COMPLETE = PREPARED.complete;
const RESERVE_BEGIN_NAME = PREPARED.reserve_begin.name;

// idempotency.reserve_begin, for a client with no transaction open: one statement. The outcome
// 'new' leaves a transaction open (the server opened it, as BEGIN would); any other leaves
// none, so a replay needs no ROLLBACK. A server before 0.3.0 (42883), a role without EXECUTE
// on it (42501) or keys distributed by Citus (0A000) refuse it: see reserveBeginRefused.
// prepare: as a prepared statement (parsed and planned once per connection); behind a pooler
// that does not keep them apart, see preparedStatementUnusable, then call it unprepared.
export async function reserveBegin(client, scope, key, requestHash = null, options = {}) {
  const { prepare = false } = options;
  const values = reserveValues(scope, key, requestHash, options);
  if (prepare && writesProtocol(client)) {
    // complete's prepared statement is parsed with reserve_begin's, never inside the
    // transaction: a server connection has both or neither (see completeThen)
    const [rows] = await queryStatements(client, [PREPARED_COMPLETE,
      { name: RESERVE_BEGIN_NAME, text: RESERVE_BEGIN, values }]);
    return reservationOfFields(rows[0], client);
  }
  if (!prepare && writesProtocol(client)) {
    const [rows] = await queryStatements(client, [{ text: RESERVE_BEGIN, values }]);
    return reservationOfFields(rows[0], client);
  }
  const { rows } = await query(client, RESERVE_BEGIN, values, TEXT_ROWS,
    prepare ? RESERVE_BEGIN_NAME : undefined);
  return reservationOf(rows[0], client);
}

// Whether err says that the server connection's prepared statements are not the client's: one
// it lacks (26000: a pooler moved the client to another server connection, or DISCARD ALL),
// or one that another client of the pooler made there first (42P05).
export const preparedStatementUnusable = (err) => ['26000', '42P05'].includes(err?.code) &&
  Object.values(PREPARED).some(({ name }) => err.message.includes(name));

// Whether err is reserve_begin refused as a whole (see reserveBegin): BEGIN + reserve do the
// same in two statements.
export const reserveBeginRefused = (err) =>
  ['42883', '42501', '0A000'].includes(err?.code) && /reserve_begin|shard/.test(err.message);

// complete then `after` (say 'COMMIT' or 'RELEASE SAVEPOINT s'), in one round trip. A failed
// complete skips `after`: the transaction is left failed, for the caller to roll back.
// prepare: complete's prepared statement, if reserveBegin parsed it on this connection
// (otherwise parsed afresh: a named Parse could fail, 42P05, and with it the transaction).
export async function completeThen(client, after, scope, key, statusCode, response,
  attempt = null, { prepare = false } = {}) {
  const values = [scope, key, statusCode, json(response), attempt];
  if (writesProtocol(client)) {
    const named = prepare && isParsed(client, PREPARED_COMPLETE);
    await queryStatements(client, [
      named ? { ...PREPARED_COMPLETE, values } : { text: COMPLETE, values },
      { text: after, values: [] },
    ]);
    return;
  }
  await query(client, COMPLETE, values);
  await query(client, after);
}

// What the server knows of a key, or null.
export async function lookup(client, scope, key) {
  const { rows } = await query(client, LOOKUP, [scope, key]);
  if (rows.length === 0) return null;
  const r = rows[0];
  return {
    state: r.state, statusCode: r.status_code, response: jsonOf(r.response),
    requestHash: r.request_hash, attempt: r.attempt, recoveryPoint: r.recovery_point,
    lastError: jsonOf(r.last_error),
    firstSeenAt: r.first_seen_at, completedAt: r.completed_at, lockedUntil: r.locked_until,
    expiresAt: r.expires_at,
  };
}

export async function forget(client, scope, key) {
  return firstValue(await query(client, FORGET, [scope, key]));
}
