// Calls of the extension with typed results and typed errors, and the request helpers. Every
// function takes a connected pg client (pg.Client, or a pool's client): this package never
// opens connections itself, so it works with whatever pg the application has.
import {
  ClientEncodingError, isConnectionLost, KeyEmptyError, KeyInProgressError, KeyMismatchError,
  KeyTooLongError, KeyTooOldError, PositionBelowWatermarkError, StaleAttemptError,
  TransactionAbortedError, TransactionOpenError, translate,
} from './errors.js';
import { fingerprint } from './fingerprint.js';
// Registers the translation of a missing function or schema of the extension (lib/versions.js).
import './versions.js';

// 'I' idle, 'T' in a transaction, 'E' in a failed transaction; undefined if pg cannot tell
// (pg before 8.14, or no query run yet).
export function transactionStatus(client) {
  return typeof client.getTransactionStatus === 'function'
    ? client.getTransactionStatus() ?? undefined : undefined;
}

// The client_encoding the server last reported (ParameterStatus) on each pg connection this
// package has used, followed from its first call there (pg itself does not follow it); UTF8
// until a report comes, as pg asks for it when it connects. undefined for a client without pg's
// protocol connection (pg-native, a wrapper).
const clientEncodings = new WeakMap();
function clientEncoding(client) {
  const connection = client?.connection;
  if (typeof connection?.on !== 'function') return undefined;
  let seen = clientEncodings.get(connection);
  if (seen === undefined) {
    seen = { value: 'UTF8' };
    connection.on('parameterStatus', (msg) => {
      if (msg.parameterName === 'client_encoding') seen.value = msg.parameterValue;
    });
    clientEncodings.set(connection, seen);
  }
  return seen.value;
}

// Throws, before anything is sent, on a connection inside a failed transaction, and on one
// whose client_encoding is not UTF8 (node-postgres sends every value as UTF-8: the server would
// read the bytes as that other encoding and store other characters).
function checkUsable(client) {
  if (transactionStatus(client) === 'E') {
    throw new TransactionAbortedError('the connection is inside a failed transaction',
      { hint: 'roll the transaction back before calling the idempotency helpers' });
  }
  const encoding = clientEncoding(client);
  if (encoding !== undefined && encoding.toUpperCase() !== 'UTF8') {
    throw new ClientEncodingError(
      `the session's client_encoding is ${encoding}, and node-postgres sends UTF-8`,
      { hint: 'leave client_encoding at UTF8 (RESET client_encoding)' });
  }
}

// While a helper uses a client, an 'error' event of its connection (the server restarted, the
// backend was terminated, the network cut it) lands here: a pg client emits one even while a
// query is failing with the same error, and one that nobody listens to ends the process. The
// returned function stops watching and gives the error seen, if any; a broken client keeps a
// listener that swallows its later events (it is not queryable any more: its queries fail).
const swallow = () => {};
export function watchConnection(client) {
  if (typeof client?.on !== 'function') return () => null;
  let lost = null;
  const onError = (err) => { lost ??= err; };
  client.on('error', onError);
  return () => {
    client.removeListener('error', onError);
    if ((lost !== null || isConnectionLost(null, client)) &&
      !client.listeners('error').includes(swallow)) client.on('error', swallow);
    return lost;
  };
}

// Runs one statement; pg errors come out as the typed errors of errors.js (ConnectionLostError
// when the connection is gone).
// types: pg's per-query type parsers (TEXT_ROWS: every value as its text); name: a prepared
// statement's (pg parses it once per connection).
export async function query(client, text, values = [], types = undefined, name = undefined) {
  return guarded(client, () => (types === undefined && name === undefined
    ? client.query(text, values) : client.query({ name, text, values, types })));
}

// send()'s promise, with client checked before and watched during it; pg errors come out as
// the typed errors of errors.js.
async function guarded(client, send) {
  checkUsable(client);
  const unwatch = watchConnection(client);
  try {
    return await send();
  } catch (err) {
    throw translate(err, client);
  } finally {
    unwatch();
  }
}

// ---- statements whose columns are known ----
// pg's Query describes its portal on every execution and builds a result with a parser per
// column. A caller that knows the columns needs neither: Statements sends, for each statement,
// its Parse (a named one only if this connection has not parsed it), then Bind and Execute
// (none for a statement without values: parsed only), then one Sync, in one write, and settles
// with the rows of each executed statement as arrays of text (null for NULL). It is a pg
// "submittable" (client.query(submittable), as pg-cursor is).
const param = (v) => (v === null || v === undefined ? null
  : v instanceof Uint8Array ? Buffer.from(v.buffer, v.byteOffset, v.byteLength) : String(v));

const parsed = (connection, { name, text }) => connection.parsedStatements[name] === text;

class Statements {
  constructor(statements) {
    this.statements = statements;
    this.rows = statements.filter((s) => s.values !== undefined).map(() => []);
    this.current = 0;
    this.result = new Promise((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
  }

  submit(connection) {
    const parsing = []; // the Parse messages sent, in order: the named ones, or null
    const { stream } = connection;
    stream.cork?.();
    try {
      for (const statement of this.statements) {
        const { name = '', text, values } = statement;
        if (name === '' || !parsed(connection, statement)) {
          connection.parse({ name, text, types: [] });
          parsing.push(name === '' ? null : statement);
        }
        if (values === undefined) continue;
        connection.bind({ statement: name, values: values.map(param) });
        connection.execute({ portal: '', rows: 0 });
      }
      connection.sync();
    } finally {
      stream.uncork?.();
    }
    // pg records a ParseComplete under a Query's one name; these are recorded here, each when
    // its ParseComplete comes (a later statement may fail: the named ones parsed stay)
    if (parsing.some((s) => s !== null)) {
      const onParsed = () => {
        const statement = parsing.shift();
        if (statement) connection.parsedStatements[statement.name] = statement.text;
      };
      connection.on('parseComplete', onParsed);
      this.stopListening = () => connection.removeListener('parseComplete', onParsed);
    }
  }

  handleRowDescription() {}

  handleDataRow(msg) { this.rows[this.current].push(msg.fields); }

  handleCommandComplete() { this.current += 1; }

  handleEmptyQuery() { this.current += 1; }

  handlePortalSuspended() {}

  handleCopyInResponse(connection) { connection.sendCopyFail('unexpected COPY'); }

  handleCopyData() {}

  // pg calls it for an ErrorResponse (then forgets the query: ReadyForQuery does not reach it)
  // and for a connection that fails or ends
  handleError(err) { this.settle(err); }

  handleReadyForQuery() { this.settle(null, this.rows); }

  // callback: what pg puts there (its query_timeout's timer, cleared when called)
  settle(err, rows) {
    if (this.settled) return;
    this.settled = true;
    this.stopListening?.();
    this.callback?.(err, rows);
    if (err) this.reject(err);
    else this.resolve(rows);
  }
}

// Whether client is node-postgres's own (it has the protocol connection Statements writes to)
// and not in pg's pipeline mode (which refuses submittables); pg-native and other look-alikes
// are not.
const writesProtocol = (client) =>
  typeof client?.connection?.parsedStatements === 'object' && !client.pipeline;

// Runs statements ([{ name?, text, values? }]) in one round trip with Statements, as query
// runs one.
function queryStatements(client, statements) {
  return guarded(client, () => {
    const submitted = new Statements(statements);
    client.query(submitted);
    return submitted.result;
  });
}

const interval = (v) => (typeof v === 'number' ? `${v} seconds` : v);
const json = (v) => (v === undefined ? null : JSON.stringify(v));

// fingerprint(request, { exclude }), or null for a request of null / undefined (no check).
export function requestHash(request, exclude) {
  return request === undefined || request === null ? null : fingerprint(request, { exclude });
}

// Every value of a row as the server's text: reserve's row is converted by Reservation.
const TEXT_ROWS = { getTypeParser: () => (text) => text };
const TIMESTAMPTZ = 1184;

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
    this.response = row.response === null ? null : JSON.parse(row.response);
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

// A row of Statements (reserve's columns, in RESERVE's order) as the object Reservation reads.
const reservationOfFields = (f, client) => reservationOf({ outcome: f[0], status_code: f[1],
  response: f[2], attempt: f[3], recovery_point: f[4], first_seen_at: f[5],
  locked_until: f[6], expires_at: f[7] }, client);

const RESERVE = `SELECT r.outcome::text AS outcome, r.status_code, r.response, r.attempt,
    r.recovery_point, r.first_seen_at, r.locked_until, r.expires_at
  FROM idempotency.reserve($1, $2, $3, $4::interval, $5::interval, $6::interval) AS r`;

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
  { lockTtl = '5 minutes', retention = '24 hours', wait = '0' } = {}) {
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

const COMPLETE = 'SELECT idempotency.complete($1, $2, $3::integer, $4::jsonb, $5::integer)';

export async function complete(client, scope, key, statusCode, response, attempt = null) {
  await query(client, COMPLETE, [scope, key, statusCode, json(response), attempt]);
}

export async function fail(client, scope, key, error = null, attempt = null) {
  await query(client, 'SELECT idempotency.fail($1, $2, $3::jsonb, $4)',
    [scope, key, json(error), attempt]);
}

export async function checkpoint(client, scope, key, recoveryPoint, attempt = null) {
  await query(client, 'SELECT idempotency.checkpoint($1, $2, $3, $4)',
    [scope, key, recoveryPoint, attempt]);
}

// ---- several statements in one round trip ----
// A transaction that opens, reserves, and later completes and commits costs five round trips
// one statement at a time (BEGIN, reserve, the work, complete, COMMIT). On pg's own client,
// Statements sends BEGIN and reserve (or complete and COMMIT) in one write with the values
// bound; the server runs them in order and stops at the first error (the rest are skipped, so
// a COMMIT after a failed complete never runs and the transaction is left failed, to be rolled
// back). No value is ever written into a query text: a client without pg's protocol connection
// (pg-native, a wrapper) sends the statements one by one, with parameters.

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

const RESERVE_BEGIN = RESERVE.replace('idempotency.reserve(', 'idempotency.reserve_begin(');

const RESERVE_BEGIN_NAME = 'idempotency_reserve_begin_v1';
const COMPLETE_NAME = 'idempotency_complete_v1';
const PREPARED_COMPLETE = { name: COMPLETE_NAME, text: COMPLETE };

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
  [RESERVE_BEGIN_NAME, COMPLETE_NAME].some((name) => err.message.includes(name));

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
    const named = prepare && parsed(client.connection, PREPARED_COMPLETE);
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
  const { rows } = await query(client, 'SELECT * FROM idempotency.lookup($1, $2)', [scope, key]);
  if (rows.length === 0) return null;
  const r = rows[0];
  return {
    state: r.state, statusCode: r.status_code, response: r.response, requestHash: r.request_hash,
    attempt: r.attempt, recoveryPoint: r.recovery_point, lastError: r.last_error,
    firstSeenAt: r.first_seen_at, completedAt: r.completed_at, lockedUntil: r.locked_until,
    expiresAt: r.expires_at,
  };
}

export async function forget(client, scope, key) {
  const { rows } = await query(client, 'SELECT idempotency.forget($1, $2) AS existed', [scope, key]);
  return rows[0].existed;
}

function raiseFor(scope, key, r) {
  switch (r.outcome) {
    case 'in_progress':
      throw new KeyInProgressError(scope, key, r, `idempotency key "${key}" is in progress`);
    case 'mismatch':
      throw new KeyMismatchError(scope, key, r,
        `idempotency key "${key}" was used with a different request`);
    case 'too_old':
      throw new KeyTooOldError(scope, key, r,
        `idempotency key "${key}" is older than the retention window`);
    default:
  }
}

// The work's answer: { statusCode, response } or [statusCode, response].
function resultOf(out, what) {
  if (Array.isArray(out) && out.length === 2) return { statusCode: out[0], response: out[1] };
  if (out !== null && typeof out === 'object' && Number.isInteger(out.statusCode))
    return { statusCode: out.statusCode, response: out.response ?? null };
  throw new TypeError(`${what} must return { statusCode, response } or [statusCode, response]`);
}

// A broken connection gets no statement: the server rolls back on its own, and a write to
// a dead socket only adds an EPIPE.
async function rollbackQuietly(client, sql = 'ROLLBACK') {
  if (isConnectionLost(null, client)) return;
  const unwatch = watchConnection(client);
  try {
    await client.query(sql);
  } catch {
    // the connection is broken: the server has rolled back already
  } finally {
    unwatch();
  }
}

// Sends the statement that ends a work's transaction or savepoint. A work that caught a server
// error and returned leaves the transaction failed: COMMIT would answer ROLLBACK without an
// error and the caller acknowledge a message that was never applied, so that is
// TransactionAbortedError; so is a failed transaction seen before sending (checkUsable) or
// reported by RELEASE SAVEPOINT (25P02), and undo() then rolls it back.
async function endWork(client, sql, undo) {
  let done;
  try {
    done = await query(client, sql);
  } catch (err) {
    if (err instanceof TransactionAbortedError) await undo();
    throw err;
  }
  if (done?.command === 'ROLLBACK') {
    throw new TransactionAbortedError(
      'the work returned inside a failed transaction: nothing of it was committed',
      { hint: "let the work's database error propagate, or roll back to a savepoint of its own" });
  }
}

// Runs fn(close, open) in a transaction of its own, or in a savepoint if the caller has one
// open; the connection is watched throughout (fn's own queries included). open and close are
// the statements that start and end it (BEGIN / COMMIT, or SAVEPOINT / RELEASE SAVEPOINT); with
// opens or closes, fn sends that one itself, with a statement of its own (reserveAfter,
// completeThen).
async function inTransaction(client, fn, { opens = false, closes = false } = {}) {
  checkUsable(client);
  const unwatch = watchConnection(client);
  try {
    const nested = transactionStatus(client) === 'T';
    const open = nested ? 'SAVEPOINT idempotency_helper' : 'BEGIN';
    const close = nested ? 'RELEASE SAVEPOINT idempotency_helper' : 'COMMIT';
    const undo = async () => {
      if (nested) {
        await rollbackQuietly(client, 'ROLLBACK TO SAVEPOINT idempotency_helper');
        await rollbackQuietly(client, 'RELEASE SAVEPOINT idempotency_helper');
      } else {
        await rollbackQuietly(client);
      }
    };
    if (!opens) await query(client, open);
    let out;
    try {
      out = await fn(close, open);
    } catch (err) {
      await undo();
      throw translate(err, client);
    }
    if (!closes) await endWork(client, close, undo);
    return out;
  } finally {
    unwatch();
  }
}

// One transaction whose first statement is text (one boolean column): resolves to
// then(boolean). On pg's own client with no transaction open, BEGIN and text go to the server in
// one write with the values bound (Statements: one round trip instead of two, as a consumer pays
// per message), and COMMIT follows then(); otherwise inTransaction (a savepoint inside the
// caller's transaction). An error rolls everything back and comes out typed.
async function transactionWith(client, text, values, then) {
  if (transactionStatus(client) !== 'I' || !writesProtocol(client)) {
    return inTransaction(client, async () =>
      then(Object.values((await query(client, text, values)).rows[0])[0]));
  }
  checkUsable(client);
  const unwatch = watchConnection(client);
  try {
    let out;
    try {
      const [, rows] = await queryStatements(client, [{ text: 'BEGIN', values: [] },
        { text, values }]);
      out = await then(rows[0][0] === 't'); // BEGIN's rows (none), then the statement's
    } catch (err) {
      await rollbackQuietly(client);
      throw translate(err, client);
    }
    await endWork(client, 'COMMIT', () => rollbackQuietly(client));
    return out;
  } finally {
    unwatch();
  }
}

const reserveOptions = (o) => ({ lockTtl: o.lockTtl, retention: o.retention, wait: o.wait });

// The one-transaction helper. reserve, work and complete in one transaction (a savepoint if
// the caller has a transaction open): on 'new' runs work(client, reservation), which returns
// { statusCode, response }, and completes with it; on 'replay' returns the stored result
// without running work; in_progress / mismatch / too_old throw KeyInProgressError /
// KeyMismatchError / KeyTooOldError. An error in work rolls the claim back with the work.
// Round trips: BEGIN + reserve in one, the work's, complete + COMMIT in one.
export async function runOnce(client, options, work) {
  const { scope, key, request, exclude } = options;
  const hash = requestHash(request, exclude);
  return inTransaction(client, async (close, open) => {
    const r = await reserveAfter(client, open, scope, key, hash, reserveOptions(options));
    if (r.outcome === 'replay') {
      await query(client, close);
      return { statusCode: r.statusCode, response: r.response, replayed: true, attempt: r.attempt };
    }
    raiseFor(scope, key, r);
    const { statusCode, response } = resultOf(await work(client, r), 'runOnce work');
    await completeThen(client, close, scope, key, statusCode, response, r.attempt);
    return { statusCode, response, replayed: false, attempt: r.attempt };
  }, { opens: true, closes: true });
}

// runOnce as a wrapper: idempotent(fn, { scope, key, request, ... }) returns
// async (client, ...args) => result, where scope, key and request are values or functions of
// args, and fn(client, ...args) returns { statusCode, response }.
export function idempotent(fn, options) {
  const pick = (v, args) => (typeof v === 'function' ? v(...args) : v);
  return (client, ...args) => runOnce(client, {
    ...options,
    scope: pick(options.scope, args),
    key: pick(options.key, args),
    request: pick(options.request, args),
  }, () => fn(client, ...args));
}

// The cross-transaction helper, for an external side effect. Commits the claim, runs
// work(attempt) with no transaction open (it returns { statusCode, response }), then in a
// second transaction calls finish(client, result) if given (your business writes; it may return
// the result to store instead, say with the id of the row it inserted) and complete with the
// attempt fence: StaleAttemptError if the lease lapsed and another holder took over (finish's
// writes roll back with it). If work or that second transaction throws, the claim is released
// with fail(failWith(err)) (default { error: err.name, message }; the next reserve gets
// attempt + 1) and the error rethrown. attempt carries the attempt number, the recovery point
// an earlier attempt left (a takeover), and checkpoint().
export async function runExternal(client, options, work) {
  const unwatch = watchConnection(client);
  try {
    return await runExternalWatched(client, options, work);
  } finally {
    unwatch();
  }
}

async function runExternalWatched(client, options, work) {
  const { scope, key, request, exclude, finish } = options;
  const failWith = options.failWith ??
    ((err) => ({ error: err?.name ?? 'Error', message: String(err?.message ?? err).slice(0, 1000) }));
  checkUsable(client);
  const status = transactionStatus(client);
  if (status !== undefined && status !== 'I') {
    throw new TransactionOpenError('runExternal needs a connection with no transaction open', {
      hint: 'commit or roll back first: the claim must be committed before the external call',
    });
  }
  const hash = requestHash(request, exclude);
  // The claim commits on its own: one statement with no transaction open (status 'I') is one.
  const r = status === 'I' ? await reserve(client, scope, key, hash, reserveOptions(options))
    : await inTransaction(client, () => reserve(client, scope, key, hash, reserveOptions(options)));
  if (r.outcome === 'replay')
    return { statusCode: r.statusCode, response: r.response, replayed: true, attempt: r.attempt };
  raiseFor(scope, key, r);
  const attempt = {
    attempt: r.attempt,
    recoveryPoint: r.recoveryPoint,
    reservation: r,
    // Records progress in its own transaction (StaleAttemptError if another holder took over).
    async checkpoint(recoveryPoint) {
      await inTransaction(client, () => checkpoint(client, scope, key, recoveryPoint, r.attempt));
      this.recoveryPoint = recoveryPoint;
    },
  };
  const release = async (err) => {
    if (isConnectionLost(err, client)) return; // the lease lapses on its own
    if (transactionStatus(client) !== 'I') await rollbackQuietly(client);
    try {
      await inTransaction(client, () => fail(client, scope, key, failWith(err), r.attempt));
    } catch {
      // taken over or completed already, or the database is gone: the lease lapses on its own
    }
  };
  let result;
  try {
    result = resultOf(await work(attempt), 'runExternal work');
  } catch (err) {
    await release(err);
    throw err;
  }
  try {
    result = await inTransaction(client, async (close) => {
      const final = finish ? await finish(client, result) : undefined;
      const stored = final === undefined ? result : resultOf(final, 'runExternal finish');
      await completeThen(client, close, scope, key, stored.statusCode, stored.response, r.attempt);
      return stored;
    }, { closes: true });
  } catch (err) {
    if (!(err instanceof StaleAttemptError)) await release(err);
    throw translate(err, client);
  }
  return { ...result, replayed: false, attempt: r.attempt };
}

// ---- streams, watermarks, outbox keys ----

const UUID = /^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$/i;

function positionParam(position) {
  if (typeof position === 'bigint' || Number.isSafeInteger(position))
    return [String(position), 'bigint'];
  if (typeof position === 'string' && /^[0-9]+$/.test(position)) return [position, 'bigint'];
  if (typeof position === 'string' && UUID.test(position)) return [position, 'uuid'];
  throw new TypeError('position must be a bigint, a safe integer, or a UUID string');
}

function acceptQuery(consumer, partition, position) {
  const [value, type] = positionParam(position);
  return [`SELECT idempotency.accept($1, $2, $3::${type}) AS accepted`, [consumer, partition, value]];
}

// idempotency.accept: true if position is above the watermark (and moves it there).
export async function accept(client, consumer, partition, position) {
  const { rows } = await query(client, ...acceptQuery(consumer, partition, position));
  return rows[0].accepted;
}

// The stored position as a bigint (a 128-bit position for UUID keys), or null.
export async function watermark(client, consumer, partition) {
  const { rows } = await query(client,
    'SELECT idempotency.watermark($1, $2)::text AS w', [consumer, partition]);
  return rows[0].w === null ? null : BigInt(rows[0].w);
}

const positionValue = (p) => (typeof p === 'string' && UUID.test(p)
  ? BigInt(`0x${p.replaceAll('-', '')}`) : BigInt(p));

// Runs fn(client) in one transaction with accept(consumer, partition, position): true if it
// ran, false for a position at or below the watermark (a redelivery). An error in fn rolls the
// watermark move back too, so the message is applied again next time. { strict: true }: a
// position below the watermark (not equal to it) throws PositionBelowWatermarkError instead of
// returning false, for partitions that must arrive in order.
export async function applyOnce(client, consumer, partition, position, fn, { strict = false } = {}) {
  const [text, values] = acceptQuery(consumer, partition, position);
  return transactionWith(client, text, values, async (accepted) => {
    if (!accepted) {
      if (strict) {
        const mark = await watermark(client, consumer, partition);
        if (mark !== null && positionValue(position) < mark)
          throw new PositionBelowWatermarkError(consumer, partition, position, mark);
      }
      return false;
    }
    await fn(client);
    return true;
  });
}

// ---- a key per message: queue consumers ----

// idempotency.claim_once in the caller's transaction: true the first time (the key is now
// completed in this transaction: apply the message in it), false for a redelivery.
// KeyInProgressError (IK003) if another holder has the key after wait, KeyTooOldError (IK004)
// for a UUIDv7 / ULID key older than retention; KeyEmptyError / KeyTooLongError before any query.
const CLAIM_ONCE = 'SELECT idempotency.claim_once($1, $2, $3::interval, $4::interval) AS claimed';

function withKey(err, scope, key) {
  if ((err instanceof KeyInProgressError || err instanceof KeyTooOldError) && err.key === null)
    Object.assign(err, { scope, key });
  return err;
}

export async function claimOnce(client, scope, key, { retention = '24 hours', wait = '0' } = {}) {
  checkNames(scope, key);
  try {
    const { rows } = await query(client, CLAIM_ONCE,
      [scope, key, interval(retention), interval(wait)]);
    return rows[0].claimed;
  } catch (err) {
    throw withKey(err, scope, key);
  }
}

// Runs work(client) in one transaction with claimOnce(scope, key): true if it ran, false for a
// redelivery (the key is completed: acknowledge the message without running work). A savepoint
// if the caller has a transaction open, else a transaction committed before this resolves:
// acknowledge the message after that. An error in work rolls the claim back with it (the
// redelivery is applied), and so does a work that resolves inside a failed transaction
// (TransactionAbortedError); a connection that breaks rejects with ConnectionLostError (nothing
// of the transaction was kept, unless it broke during COMMIT: the redelivery then gives false).
export async function consumeOnce(client, scope, key, work,
  { retention = '24 hours', wait = '0' } = {}) {
  checkNames(scope, key);
  try {
    return await transactionWith(client, CLAIM_ONCE,
      [scope, key, interval(retention), interval(wait)], async (claimed) => {
        if (claimed) await work(client);
        return claimed;
      });
  } catch (err) {
    throw withKey(err, scope, key);
  }
}

export async function nextKey(client, stream) {
  const { rows } = await query(client, 'SELECT idempotency.next_key($1)::text AS k', [stream]);
  return BigInt(rows[0].k);
}

// idempotency.emit: the message's LSN as a bigint (formatLsn prints it as pg_lsn does).
export async function emit(client, topic, payload) {
  const { rows } = await query(client, 'SELECT idempotency.emit($1, $2::jsonb)::text AS lsn',
    [topic, json(payload)]);
  return parseLsn(rows[0].lsn);
}

const MASK64 = (1n << 64n) - 1n;

// '16/B374D848' -> 0x16B374D848n
export function parseLsn(text) {
  const m = /^([0-9A-Fa-f]{1,8})\/([0-9A-Fa-f]{1,8})$/.exec(text);
  if (m === null) throw new TypeError(`not an LSN: "${text}"`);
  return (BigInt(`0x${m[1]}`) << 32n) | BigInt(`0x${m[2]}`);
}

export function formatLsn(lsn) {
  const v = BigInt(lsn);
  return `${(v >> 32n).toString(16).toUpperCase()}/${(v & 0xffffffffn).toString(16).toUpperCase()}`;
}

// The outbox key (as idempotency.lsn_key): commit LSN then LSN, each 64-bit big-endian, as a
// UUID string.
export function lsnKey(commitLsn, lsn) {
  const c = BigInt(commitLsn);
  const l = BigInt(lsn);
  if (c < 0n || l < 0n || c > MASK64 || l > MASK64) throw new RangeError('an LSN is 64 bits');
  if (l > c) throw new RangeError('lsn must not exceed commitLsn');
  const hex = ((c << 64n) | l).toString(16).padStart(32, '0');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

// { commitLsn, lsn } of an outbox key (a UUID string, with or without dashes).
export function lsnKeyParts(key) {
  if (typeof key !== 'string' || !UUID.test(key)) throw new TypeError(`not a UUID: "${key}"`);
  const v = BigInt(`0x${key.replaceAll('-', '')}`);
  return { commitLsn: v >> 64n, lsn: v & MASK64 };
}
