// The Idempotency-Key header as Express-style middleware, (req, res, next), on a pg pool.
//   400 missing or malformed key or scope, or a JSON body that is not JSON; 201 (or whatever the handler answers) the first time;
//   the stored answer with `Idempotent-Replayed: true` on a retry; 409 + Retry-After while
//   another request holds the key; 422 when the key was used with another body or is too old.
// The handler's writes and the stored response commit in one transaction: the handler uses
// req.idempotency.client for its queries, and the answer it sends is held back until that
// transaction has committed.
import { createHash } from 'node:crypto';
import {
  checkNames, completeThen, preparedStatementUnusable, requestHash, reserveAfter,
  reserveBegin, reserveBeginRefused, transactionStatus, watchConnection,
} from './client.js';
import {
  ConnectionLostError, IdempotencyError, InvalidJsonError, isConnectionLost, KeyEmptyError,
  KeyInProgressError, KeyMismatchError, KeyTooLongError, KeyTooOldError, OutcomeError,
  ProgramLimitExceededError,
} from './errors.js';

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

function send(res, status, body, headers = {}) {
  const text = body === undefined ? '' : JSON.stringify(body);
  res.writeHead(status, {
    'Content-Type': 'application/json',
    'Content-Length': Buffer.byteLength(text),
    ...headers,
  });
  res.end(text);
}

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
//   replayHeaders (statusCode, response) => extra headers of a replay (e.g. Location)
//   prepare     false: send reserve_begin unnamed (its values bound), not as a prepared statement
//               (default true; behind a pooler that mixes up prepared statements, the first
//               26000 or 42P05 switches it to false)
// The middleware's promise settles when the answer has been sent. A database or network that
// goes away answers 503 + Retry-After (the connection is released with the error, so the pool
// drops it); other errors of its own go to next(err). The connection is watched from checkout
// to release, so its 'error' event never reaches the process. When next returns a promise (a plain-http composition)
// and it rejects before an answer was sent, the transaction is rolled back.
export function idempotencyMiddleware(options) {
  const { pool, exclude, lockTtl, retention, wait } = options ?? {};
  if (!pool || typeof pool.connect !== 'function') throw new TypeError('idempotencyMiddleware needs a pg pool');
  if (options.scope === undefined) throw new TypeError('idempotencyMiddleware needs a scope');
  const keyOf = options.key ?? ((req) => parseIdempotencyKey(req.headers['idempotency-key']));
  const limit = options.limit ?? 1 << 20;
  const hashOf = options.request
    ? async (req) => requestHash(options.request(req), exclude)
    : (req) => defaultRequestHash(req, exclude, limit);
  const store = options.store ?? ((status) => status < 500);
  const replayHeaders = options.replayHeaders ?? (() => ({}));
  // reserve_begin, prepared, until the server refuses it (see reserveBegin): then unprepared,
  // or BEGIN + reserve in one round trip
  let useReserveBegin = true;
  const opts = { lockTtl, retention, wait, prepare: options.prepare ?? true };
  // The claim, and whether it was reserve_begin's prepared statement (then complete's is
  // prepared on the same server connection: see reserveBegin).
  const reserveOpening = async (client, scope, key, hash) => {
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
    return [await reserveAfter(client, 'BEGIN', scope, key, hash, opts), false];
  };
  // Nothing to roll back on a connection the server reports idle (reserve_begin opened no
  // transaction, or failed before it could); otherwise ROLLBACK, then release.
  const endReservation = async (client, releaseClient) => {
    if (transactionStatus(client) === 'I') return releaseClient();
    try {
      await client.query('ROLLBACK');
      return releaseClient();
    } catch (err) {
      return releaseClient(err); // a broken connection: the server rolls back on its own
    }
  };

  return async function idempotency(req, res, next) {
    let scope;
    let key;
    let hash;
    try {
      scope = valueOf(options.scope, req);
      key = keyOf(req);
      checkNames(scope, key);
      hash = await hashOf(req);
    } catch (err) {
      const answer = answerFor(err);
      if (answer) return send(res, answer.status, answer.body, answer.headers);
      if (err instanceof InvalidJsonError || err instanceof ProgramLimitExceededError)
        return send(res, 400, { error: 'invalid_json', message: err.message });
      if (err instanceof BodyTooLargeError) {
        return send(res, 413, { error: 'body_too_large',
          message: 'the request body is over the limit of the idempotency middleware' });
      }
      return next(err);
    }

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
    try {
      client = await pool.connect();
    } catch (err) {
      return isConnectionLost(err) || databaseUnreachable(err) ? unavailable(err) : next(err);
    }
    try {
      unwatch = watchConnection(client);
      // one round trip: a transaction open after the outcome 'new' only
      [reservation, prepared] = await reserveOpening(client, scope, key, hash);
    } catch (err) {
      if (isConnectionLost(err, client)) {
        releaseClient(err);
        return unavailable(err);
      }
      await endReservation(client, releaseClient);
      return databaseUnreachable(err) ? unavailable(err) : next(err);
    }

    if (reservation.outcome !== 'new') {
      // The answer is read, and nothing was written: it is sent now, and the transaction (if
      // BEGIN + reserve opened one) rolled back after; the connection then goes back.
      try {
        if (reservation.outcome === 'replay') {
          const { statusCode, response } = reservation;
          send(res, statusCode, response,
            { 'Idempotent-Replayed': 'true', ...replayHeaders(statusCode, response) });
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
        if (!isConnectionLost(err, client)) await client.query('ROLLBACK').catch(() => {});
        releaseClient(err);
        throw err;
      }
    };
    const rollback = () => client.query('ROLLBACK');
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
          const text = body.toString('utf8');
          let response;
          try {
            response = text === '' ? null : JSON.parse(text);
          } catch {
            response = text; // not JSON: stored, and replayed, as a JSON string
          }
          await finishTransaction(() => completeThen(client, 'COMMIT', scope, key, status,
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
