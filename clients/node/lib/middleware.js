// The Idempotency-Key header as Express-style middleware, (req, res, next), on a pg pool.
//   400 missing or malformed key or scope, or a JSON body that is not JSON; 201 (or whatever the handler answers) the first time;
//   the stored answer with `Idempotent-Replayed: true` on a retry; 409 + Retry-After while
//   another request holds the key; 422 when the key was used with another body or is too old.
// The handler's writes and the stored response commit in one transaction: the handler uses
// req.idempotency.client for its queries, and the answer it sends is held back until that
// transaction has committed.
import { createHash } from 'node:crypto';
import { isConnectionLost, transactionStatus, watchConnection } from './connection.js';
import {
  ConnectionLostError, IdempotencyError, InvalidJsonError, KeyEmptyError, KeyInProgressError,
  KeyMismatchError, KeyTooLongError, KeyTooOldError, OutcomeError, ProgramLimitExceededError,
} from './errors.js';
import {
  checkNames, completeThen, executeOnceOf, executeOnceValues, preparedStatementUnusable,
  requestHash, reserveAfter, reserveBegin, reserveBeginRefused,
} from './keys.js';
import { isPipelined, SharedConnections } from './pipeline.js';
import { BEGIN, COMMIT, ROLLBACK } from './statements.js';
import { ExtensionVersionError, serverEdition } from './versions.js';

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const TOKEN_RE = /^[\x21-\x7e]{1,255}$/; // visible ASCII, no spaces

// A malformed or missing Idempotency-Key header: answer 400 with body { error: code }.
export class IdempotencyKeyHeaderError extends Error {
  constructor(code, message) {
    super(message);
    this.name = 'IdempotencyKeyHeaderError';
    this.code = code;
    this.httpStatus = 400;
  }
}

// A UUID (lower-cased) or a token of 1 to 255 visible ASCII characters. The quoted form of the
// IETF draft (a structured-field string, "...") is accepted too.
export function parseIdempotencyKey(raw) {
  if (raw === undefined || raw === '')
    throw new IdempotencyKeyHeaderError('idempotency_key_missing', 'the Idempotency-Key header is required');
  let key = String(raw).trim();
  if (key.length >= 2 && key.startsWith('"') && key.endsWith('"')) key = key.slice(1, -1);
  if (UUID_RE.test(key)) return key.toLowerCase();
  if (!TOKEN_RE.test(key)) {
    throw new IdempotencyKeyHeaderError('idempotency_key_malformed',
      'the Idempotency-Key must be a UUID or 1 to 255 visible ASCII characters');
  }
  return key;
}

// The HTTP answer { status, body, headers } for an error of the helpers that has one (the
// key header, the reserve outcomes), or null.
export function answerFor(err) {
  const problem = (status, error, message, headers = {}) =>
    ({ status, body: { error, message }, headers });
  if (err instanceof IdempotencyKeyHeaderError) return problem(400, err.code, err.message);
  if (err instanceof KeyTooLongError || err instanceof KeyEmptyError)
    return problem(400, err.httpError, err.message);
  if (err instanceof KeyInProgressError) {
    return problem(409, 'idempotency_key_in_use',
      'a request with this Idempotency-Key is still being processed; retry later',
      { 'Retry-After': String(err.retryAfter) });
  }
  if (err instanceof KeyMismatchError) {
    return problem(422, 'idempotency_key_reused',
      'this Idempotency-Key was already used with a different request body');
  }
  if (err instanceof KeyTooOldError) {
    return problem(422, 'idempotency_key_too_old',
      'this Idempotency-Key was created before the retention window, so the request cannot be ' +
      'told apart from a new one; check whether the first request took effect, then use a new key');
  }
  if (err instanceof OutcomeError) return problem(err.httpStatus, 'idempotency_key_conflict', err.message);
  if (err instanceof ConnectionLostError || isConnectionLost(err)) {
    return problem(503, 'database_unavailable',
      'the database could not be reached; retry with the same Idempotency-Key',
      { 'Retry-After': '1' });
  }
  return null;
}

// What complete() stores for an answer is { idempotency_http: 1, headers: {...}, and the body
// as one of body (the JSON value of a JSON answer), text (any other UTF-8 text) or base64
// (other bytes); none for an empty body }. The headers are those of the first answer that a
// client reads (lower-case names): Content-Type, Location and the keepHeaders option's. A
// replay sends them, and the body, as they were (test/vectors/http_answers.json).
export const STORED_MARK = 'idempotency_http';
const KEPT_HEADERS = ['content-type', 'location'];
const utf8 = new TextDecoder('utf-8', { fatal: true });

// headers: [name, value] pairs, the first of a name wins.
export function storedAnswer(body, headers, keep = []) {
  const wanted = new Set([...KEPT_HEADERS, ...keep.map((name) => name.toLowerCase())]);
  const kept = {};
  for (const [name, value] of headers) {
    const lower = String(name).toLowerCase();
    if (wanted.has(lower) && !(lower in kept) && value !== undefined)
      kept[lower] = Array.isArray(value) ? value.join(', ') : String(value);
  }
  const stored = { [STORED_MARK]: 1, headers: kept };
  if (body.length === 0) return stored;
  let text;
  try {
    text = utf8.decode(body);
  } catch {
    stored.base64 = Buffer.from(body).toString('base64');
    return stored;
  }
  if (isJsonType(kept['content-type'])) {
    try {
      stored.body = JSON.parse(text);
      return stored;
    } catch {
      // sent as JSON, but not JSON: kept as its text
    }
  }
  stored.text = text;
  return stored;
}

// The replay of what complete() stored: { headers (lower-case names), body (a Buffer), value
// (the JSON value or the text; undefined for bytes or no body, for replayHeaders) }. A value
// stored without the mark (before it existed) is a JSON body, replayed as application/json.
export function replayOf(response) {
  if (response !== null && typeof response === 'object' && response[STORED_MARK] === 1) {
    const headers = { ...response.headers };
    if ('body' in response)
      return { headers, body: Buffer.from(JSON.stringify(response.body)), value: response.body };
    if ('text' in response)
      return { headers, body: Buffer.from(response.text, 'utf8'), value: response.text };
    if ('base64' in response)
      return { headers, body: Buffer.from(response.base64, 'base64'), value: undefined };
    return { headers, body: Buffer.alloc(0), value: undefined };
  }
  const text = response === undefined || response === null ? '' : JSON.stringify(response);
  return { headers: { 'content-type': 'application/json' }, body: Buffer.from(text),
    value: response };
}

// 503 + Retry-After: no server answered, or the connection was lost.
function unavailableAnswer(res, err) {
  const answer = answerFor(new ConnectionLostError(
    `the connection to the server was lost: ${err.message}`, { cause: err }));
  return send(res, answer.status, answer.body, answer.headers);
}

function send(res, status, body, headers = {}) {
  const text = body === undefined ? '' : JSON.stringify(body);
  res.writeHead(status, {
    'Content-Type': 'application/json',
    'Content-Length': Buffer.byteLength(text),
    ...headers,
  });
  res.end(text);
}

// The bodies of the middleware's answers are those of the Python middlewares, word for word
// (test/vectors/http_answers.json, checked by both clients' tests).
const INVALID_JSON_MESSAGE =
  'the request body is sent as JSON but is not JSON, or is over the limits of the fingerprint';

const valueOf = (v, req) => (typeof v === 'function' ? v(req) : v);

// No server answered (a refused or lost connection, a pool timeout), or the server is going
// away (class 08, 57P01-57P03): the request may be retried as it is.
function databaseUnreachable(err) {
  if (typeof err?.code === 'string' && /^(08|57P0[123])/.test(err.code)) return true;
  return !(err instanceof IdempotencyError) && !(err instanceof TypeError) &&
    err?.severity === undefined;
}

// application/json, or any */*+json media type.
const isJsonType = (contentType) =>
  /^(application\/json|[a-z]+\/[^;\s]+\+json)\s*(;|$)/i.test(String(contentType ?? '').trim());

class BodyTooLargeError extends Error {}

// The pool could not give a connection (nothing was sent).
class PoolConnectError extends Error {
  constructor(cause) {
    super(cause?.message, { cause });
  }
}

async function readBody(req, limit) {
  const chunks = [];
  let size = 0;
  for await (const chunk of req) {
    size += chunk.length;
    if (size > limit) throw new BodyTooLargeError();
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

// The fingerprint of the request as it arrived. A JSON body (by its Content-Type) is
// fingerprinted as JSON: the exact text (req.rawBody, kept by express.json's verify) or the
// parsed value; any other body by its raw bytes, as SQL's idempotency.fingerprint(bytea), so
// the same key with other bytes is a mismatch, never a replay. A body no parser has read is
// read here (and kept as req.rawBody for the handler); one that a parser read without keeping
// the bytes is fingerprinted by the value it made (say a form's fields).
async function defaultRequestHash(req, exclude, limit) {
  const json = isJsonType(req.headers['content-type']);
  let bytes = req.rawBody;
  if (bytes === undefined || bytes === null) {
    if (!req._body && !req.readableEnded) {
      bytes = await readBody(req, limit);
      req.rawBody = bytes;
    } else if (typeof req.body === 'string' || Buffer.isBuffer(req.body)) {
      bytes = req.body;
    } else if (req.body !== undefined && req.body !== null) {
      return requestHash(req.body, exclude);
    } else {
      throw new TypeError('the request body was read, and neither req.rawBody nor req.body ' +
        'holds it: keep the bytes in req.rawBody (express.json({ verify }))');
    }
  }
  if (json) return requestHash(bytes, exclude);
  return createHash('sha256').update(bytes).digest();
}

// options:
//   pool        a pg.Pool (required)
//   scope       string or req => string: whose keys (the account, the tenant) (required)
//   key         req => key; default: parseIdempotencyKey(req.headers['idempotency-key'])
//   request     req => the request to fingerprint (a JSON text, bytes or a value; null /
//               undefined: no fingerprint check); default: a JSON body as JSON, any other
//               by its raw bytes (read here if no body parser has read them)
//   limit       the largest body read here, in bytes (413 above); default 1 MiB
//   exclude     fields left out of the fingerprint (dotted paths)
//   lockTtl, retention, wait   as reserve's (strings of intervals, or seconds)
//   store       statusCode => whether to store the answer; default: below 500 (a 5xx rolls the
//               claim back with the handler's writes, and the retry starts afresh)
//   keepHeaders names of headers of the first answer that its replays carry besides
//               Content-Type and Location (say ETag)
//   replayHeaders (statusCode, response) => extra headers of a replay
//   prepare     false: send reserve_begin (execute_once in the statement form) unnamed, its
//               values bound, not as a prepared statement (default true; behind a pooler that
//               mixes up prepared statements, the first 26000 or 42P05 switches reserve_begin
//               to unnamed for every request, execute_once for that pooled connection)
// The statement form, for an endpoint whose work is one SQL statement (the handler is not called
// for the requests it answers):
//   statement   the statement's text, with PostgreSQL's placeholders ($1, $2, ...)
//   params      req => its parameters (an array, bound as text: see statementParam); default none
//   status      the status of a new key's answer (default 201)
// One call of idempotency.execute_once claims the key, runs the statement, stores its result
// and completes the key: one round trip for a new key and for a replay. A new key is answered
// with the statement's result as JSON (its one row as an object, a single json / jsonb column
// as it is; an empty body for no row) and its replays with the same bytes. An error of the
// statement is a 500 with a log line, and nothing is stored.
// The middleware's promise settles when the answer has been sent. A database or network that
// goes away answers 503 + Retry-After (the connection is released with the error, so the pool
// drops it); other errors of its own go to next(err). The connection is watched from checkout
// to release, so its 'error' event never reaches the process. When next returns a promise (a plain-http composition)
// and it rejects before an answer was sent, the transaction is rolled back.
export function idempotencyMiddleware(options) {
  const { pool, exclude, lockTtl, retention, wait } = options ?? {};
  if (!pool || typeof pool.connect !== 'function') throw new TypeError('idempotencyMiddleware needs a pg pool');
  if (options.scope === undefined) throw new TypeError('idempotencyMiddleware needs a scope');
  // A pool emits 'error' when one of its idle connections breaks (a server restart): with no
  // listener, that event ends the process. One that logs is added when the application has
  // none; its own listener, added before, is left alone.
  if (typeof pool.on === 'function' && typeof pool.listenerCount === 'function' &&
    pool.listenerCount('error') === 0) {
    pool.on('error', (err) => {
      console.error(`idempotency: an idle connection of the pool failed: ${err.message}`);
    });
  }
  const { statement } = options;
  if (statement !== undefined && (typeof statement !== 'string' || statement.trim() === ''))
    throw new TypeError("idempotencyMiddleware's statement must be a non-empty string");
  const paramsOf = options.params ?? (() => []);
  const statementStatus = options.status ?? 201;
  const keyOf = options.key ?? ((req) => parseIdempotencyKey(req.headers['idempotency-key']));
  const limit = options.limit ?? 1 << 20;
  const hashOf = options.request
    ? async (req) => requestHash(options.request(req), exclude)
    : (req) => defaultRequestHash(req, exclude, limit);
  const store = options.store ?? ((status) => status < 500);
  const replayHeaders = options.replayHeaders ?? (() => ({}));
  const keepHeaders = options.keepHeaders ?? [];
  // reserve_begin, prepared, until the server refuses it (see reserveBegin): then unprepared,
  // or BEGIN + reserve in one round trip. null: not known yet (the server's edition, asked once)
  let useReserveBegin = null;
  const opts = { lockTtl, retention, wait, prepare: options.prepare ?? true };
  // The claim, and whether it was reserve_begin's prepared statement (then complete's is
  // prepared on the same server connection: see reserveBegin).
  const reserveOpening = async (client, scope, key, hash) => {
    useReserveBegin ??= (await serverEdition(client)).offers('reserve_begin');
    while (useReserveBegin) {
      try {
        const { prepare } = opts;
        return [await reserveBegin(client, scope, key, hash, opts), prepare];
      } catch (err) {
        // other requests' statements, sent before the first such error came back, meet it
        // too: each of them retries unprepared
        if (preparedStatementUnusable(err)) opts.prepare = false;
        else if (reserveBeginRefused(err)) useReserveBegin = false;
        else throw err;
      }
    }
    return [await reserveAfter(client, BEGIN, scope, key, hash, opts), false];
  };
  // Nothing to roll back on a connection the server reports idle (reserve_begin opened no
  // transaction, or failed before it could); otherwise ROLLBACK, then release. failed: the
  // claim was refused, and pg may not have read the ReadyForQuery after the error yet (its
  // status still says idle after BEGIN + reserve): ROLLBACK, queued behind it, in any case.
  const endReservation = async (client, releaseClient, failed = false) => {
    if (!failed && transactionStatus(client) === 'I') return releaseClient();
    try {
      await client.query(ROLLBACK);
      return releaseClient();
    } catch (err) {
      return releaseClient(err); // a broken connection: the server rolls back on its own
    }
  };

  // execute_once on a pooled connection with no transaction open, so the call commits by
  // itself; prepared unless options.prepare is false (see executeOnce). On a pool made with
  // pg's `pipeline: true`, concurrent requests' calls share its connections (pipeline.js).
  const shared = statement !== undefined && isPipelined(pool) ? new SharedConnections(pool) : null;
  const callExecuteOnce = async (values) => {
    if (shared) return shared.run((client) => executeOnceOf(client, values, opts.prepare));
    const client = await pool.connect().catch((err) => { throw new PoolConnectError(err); });
    const unwatch = watchConnection(client);
    let failure = null;
    try {
      return await executeOnceOf(client, values, opts.prepare);
    } catch (err) {
      failure = err;
      throw err;
    } finally {
      const lost = unwatch(failure);
      if (lost || isConnectionLost(failure, client)) client.release(lost ?? failure ?? true);
      else if (transactionStatus(client) !== undefined && transactionStatus(client) !== 'I')
        client.release(true); // never hand on a connection left in a transaction
      else client.release();
    }
  };

  // The statement form's answer to a request (see the options).
  const answerStatement = async (req, res, next, scope, key, hash) => {
    let values;
    try {
      values = executeOnceValues(scope, key, hash, statement, await paramsOf(req),
        statementStatus, { lockTtl, retention, wait });
    } catch (err) {
      return next(err);
    }
    let reservation;
    // A pooled connection that died while idle fails on its first statement: tried once more
    // on another connection (execute_once of a key is safe to repeat: a replay at worst).
    for (let tries = 1; ; tries++) {
      try {
        reservation = await callExecuteOnce(values);
        break;
      } catch (failure) {
        const err = failure instanceof PoolConnectError ? failure.cause : failure;
        if (isConnectionLost(err)) {
          if (tries < 2 && !(failure instanceof PoolConnectError)) continue;
          return unavailableAnswer(res, err);
        }
        if (databaseUnreachable(err)) return unavailableAnswer(res, err);
        if (failure instanceof PoolConnectError) return next(err);
        if (err instanceof ExtensionVersionError) {
          console.error('idempotency: the statement form needs idempotency.execute_once ' +
            `(extension 0.3.0 or later): ${err.message}`);
        } else {
          console.error(`idempotency: the statement for key "${key}" failed, nothing is ` +
            `stored: ${err.message}`);
        }
        return send(res, 500, { error: 'internal_error',
          message: 'the request failed; retry with the same Idempotency-Key' });
      }
    }
    const { outcome, statusCode, response } = reservation;
    if (outcome !== 'new' && outcome !== 'replay') {
      const Outcome = {
        in_progress: KeyInProgressError, mismatch: KeyMismatchError, too_old: KeyTooOldError,
      }[outcome];
      const answer = answerFor(new Outcome(scope, key, reservation, outcome));
      return send(res, answer.status, answer.body, answer.headers);
    }
    // The first answer has the body and headers its replays send (a JSON body; none for a
    // statement without a row), without Idempotent-Replayed and replayHeaders.
    const replay = replayOf(response);
    const headers = { ...replay.headers, 'content-length': String(replay.body.length) };
    if (outcome === 'replay') {
      headers['idempotent-replayed'] = 'true';
      for (const [name, value] of Object.entries(replayHeaders(statusCode, replay.value)))
        headers[name.toLowerCase()] = String(value);
    }
    res.writeHead(statusCode, headers);
    res.end(replay.body);
    return undefined;
  };

  return async function idempotency(req, res, next) {
    let scope;
    let key;
    let hash;
    try {
      scope = valueOf(options.scope, req);
      if (scope === undefined || scope === null) { // say a header the scope is read from
        throw new IdempotencyKeyHeaderError('idempotency_scope_missing',
          'the request does not say whose it is: the scope of its Idempotency-Key is missing');
      }
      key = keyOf(req);
      checkNames(scope, key);
      hash = await hashOf(req);
    } catch (err) {
      const answer = answerFor(err);
      if (answer) return send(res, answer.status, answer.body, answer.headers);
      if (err instanceof InvalidJsonError || err instanceof ProgramLimitExceededError)
        return send(res, 400, { error: 'invalid_json', message: INVALID_JSON_MESSAGE });
      if (err instanceof BodyTooLargeError) {
        return send(res, 413, { error: 'body_too_large',
          message: 'the request body is over the limit of the idempotency middleware' });
      }
      return next(err);
    }
    if (statement !== undefined) return answerStatement(req, res, next, scope, key, hash);

    let client;
    let unwatch = () => null;
    // Gives the client back: with the error when the connection is broken (the pool drops it).
    const releaseClient = (err) => {
      const lost = unwatch();
      if (err || lost || isConnectionLost(null, client)) client.release(err ?? lost ?? true);
      else client.release();
    };
    const unavailable = (err) => {
      const answer = answerFor(new ConnectionLostError(
        `the connection to the server was lost: ${err.message}`, { cause: err }));
      return send(res, answer.status, answer.body, answer.headers);
    };
    let reservation;
    let prepared;
    // A pooled connection that died while idle (the server restarted, the backend was
    // terminated) fails on the claim, its first statement. The claim commits nothing (a new
    // key's transaction stays open for the handler), so it is tried once more on another
    // connection: the first request after the database is back succeeds.
    for (let tries = 1; ; tries++) {
      try {
        client = await pool.connect();
      } catch (err) {
        return isConnectionLost(err) || databaseUnreachable(err) ? unavailable(err) : next(err);
      }
      try {
        unwatch = watchConnection(client);
        // one round trip: a transaction open after the outcome 'new' only
        [reservation, prepared] = await reserveOpening(client, scope, key, hash);
        break;
      } catch (err) {
        if (isConnectionLost(err, client)) {
          releaseClient(err);
          if (tries < 2) continue;
          return unavailable(err);
        }
        await endReservation(client, releaseClient, true);
        return databaseUnreachable(err) ? unavailable(err) : next(err);
      }
    }

    if (reservation.outcome !== 'new') {
      // The answer is read, and nothing was written: it is sent now, and the transaction (if
      // BEGIN + reserve opened one) rolled back after; the connection then goes back.
      try {
        if (reservation.outcome === 'replay') {
          const { statusCode, response } = reservation;
          const replay = replayOf(response);
          const headers = { ...replay.headers, 'content-length': String(replay.body.length),
            'idempotent-replayed': 'true' };
          for (const [name, value] of Object.entries(replayHeaders(statusCode, replay.value)))
            headers[name.toLowerCase()] = String(value);
          res.writeHead(statusCode, headers);
          res.end(replay.body);
        } else {
          const Outcome = {
            in_progress: KeyInProgressError, mismatch: KeyMismatchError, too_old: KeyTooOldError,
          }[reservation.outcome];
          const answer = answerFor(new Outcome(scope, key, reservation, reservation.outcome));
          send(res, answer.status, answer.body, answer.headers);
        }
      } finally {
        await endReservation(client, releaseClient);
      }
      return undefined;
    }

    // 'new': hold the answer back until the transaction has committed.
    const original = { writeHead: res.writeHead, write: res.write, end: res.end };
    const chunks = [];
    let head = null;
    let ended = false;
    let released = false;
    const restore = () => Object.assign(res, original);
    // Ends the transaction with end(): ROLLBACK, or complete + COMMIT (one round trip). If
    // that fails, the transaction is rolled back (a failed complete skipped the COMMIT) and the
    // connection released, with the error if it is broken.
    const finishTransaction = async (end) => {
      if (released) return;
      released = true;
      try {
        if (isConnectionLost(null, client))
          throw new ConnectionLostError('the connection to the server was lost');
        await end();
        releaseClient();
      } catch (err) {
        if (!isConnectionLost(err, client)) await client.query(ROLLBACK).catch(() => {});
        releaseClient(err);
        throw err;
      }
    };
    const rollback = () => client.query(ROLLBACK);
    const chunkOf = (chunk, encoding) =>
      (typeof chunk === 'string' ? Buffer.from(chunk, typeof encoding === 'string' ? encoding : 'utf8')
        : Buffer.from(chunk));

    let settle;
    const settled = new Promise((resolve) => { settle = resolve; });

    res.writeHead = (statusCode, ...rest) => {
      head = [statusCode, ...rest];
      res.statusCode = statusCode;
      return res;
    };
    res.write = (chunk, encoding, callback) => {
      if (chunk !== undefined && chunk !== null) chunks.push(chunkOf(chunk, encoding));
      const cb = typeof encoding === 'function' ? encoding : callback;
      if (cb) process.nextTick(cb);
      return true;
    };
    res.end = (chunk, encoding, callback) => {
      if (ended) return res;
      ended = true;
      if (typeof chunk === 'function') {
        callback = chunk;
        chunk = undefined;
      } else if (typeof encoding === 'function') {
        callback = encoding;
      }
      if (chunk !== undefined && chunk !== null) chunks.push(chunkOf(chunk, encoding));
      const body = Buffer.concat(chunks);
      const status = head ? head[0] : res.statusCode;
      (async () => {
        if (store(status)) {
          // writeHead's headers, then those set before it (writeHead's win)
          const given = head?.length > 1 && typeof head[head.length - 1] === 'object'
            ? head[head.length - 1] : null;
          const pairs = Array.isArray(given)
            ? (Array.isArray(given[0]) ? given
              : given.flatMap((v, i) => (i % 2 === 0 ? [[v, given[i + 1]]] : [])))
            : Object.entries(given ?? {});
          const response = storedAnswer(body, [...pairs, ...Object.entries(res.getHeaders())],
            keepHeaders);
          await finishTransaction(() => completeThen(client, COMMIT, scope, key, status,
            response, reservation.attempt, { prepare: prepared && opts.prepare }));
        } else {
          await finishTransaction(rollback);
        }
      })().then(() => {
        restore();
        if (head) res.writeHead(...head);
        res.end(body, callback);
      }, async (err) => {
        if (preparedStatementUnusable(err)) opts.prepare = false; // the next claims' too
        if (!released) await finishTransaction(rollback).catch(() => {});
        restore();
        console.error(`idempotency: the answer to key "${key}" was not stored: ${err.message}`);
        res.removeHeader('Content-Length');
        res.removeHeader('Location');
        if (isConnectionLost(err)) {
          unavailable(err); // COMMIT may have happened: the retry replays or runs afresh
        } else {
          send(res, 500, { error: 'internal_error',
            message: 'the request failed; retry with the same Idempotency-Key' });
        }
      }).finally(settle);
      return res;
    };

    req.idempotency = { client, scope, key, attempt: reservation.attempt,
      recoveryPoint: reservation.recoveryPoint, reservation };
    try {
      await next();
    } catch (err) {
      if (!ended) { // the handler failed before answering: nothing of it commits
        ended = true;
        await finishTransaction(rollback).catch(() => {});
        restore();
        settle();
      }
      throw err;
    }
    await settled;
    return undefined;
  };
}
