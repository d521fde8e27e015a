// What the middleware reads from an HTTP request (a node:http IncomingMessage, as Express
// and most Node frameworks hand it on): the Idempotency-Key header, the scope, and the
// fingerprint of the body.
import { createHash } from 'node:crypto';
import { checkNames, requestHash } from './keys.js';
import { PROBLEMS } from './spec.js';

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

// The IdempotencyKeyHeaderError of code, its message the spec's detail (PROBLEMS).
const headerError = (code) => new IdempotencyKeyHeaderError(code, PROBLEMS[code].detail);

// The key of an Idempotency-Key header: the IETF draft's sf-string (RFC 8941: "..." with \"
// and \\ the only escapes; a parameter, a list or anything else after the closing quote is
// refused) or the unquoted token Stripe-style clients send, the two spellings of one key being
// the same key. The key is a UUID (lower-cased) or 1 to 255 visible ASCII characters
// (test/vectors/idempotency_key.json).
export function parseIdempotencyKey(raw) {
  if (raw === undefined || raw === null || raw === '')
    throw headerError('idempotency_key_missing');
  let key = String(raw).replace(/^[ \t]+|[ \t]+$/g, '');
  if (key.startsWith('"')) key = parseSfString(key);
  if (key !== null && UUID_RE.test(key)) return key.toLowerCase();
  if (key === null || !TOKEN_RE.test(key)) {
    throw headerError('idempotency_key_malformed');
  }
  return key;
}

// The value of an RFC 8941 sf-string that is all of text, or null.
function parseSfString(text) {
  let out = '';
  for (let i = 1; i < text.length; i++) {
    const c = text[i];
    if (c === '\\') {
      i++;
      if (i === text.length || (text[i] !== '"' && text[i] !== '\\')) return null;
      out += text[i];
    } else if (c === '"') {
      return i === text.length - 1 ? out : null;
    } else if (c < ' ' || c > '~') {
      return null;
    } else {
      out += c;
    }
  }
  return null; // not closed
}

// application/json, or any */*+json media type.
export const isJsonType = (contentType) =>
  /^(application\/json|[a-z]+\/[^;\s]+\+json)\s*(;|$)/i.test(String(contentType ?? '').trim());

// A body over the middleware's limit: 413.
export class BodyTooLargeError extends Error {}

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
    const stream = req.raw ?? req; // node's request, under a framework's (Fastify's request.raw)
    if (!req._body && !stream.readableEnded) {
      bytes = await readBody(stream, limit);
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

const valueOf = (v, req) => (typeof v === 'function' ? v(req) : v);

// The middleware's options that say what a request is (see idempotencyMiddleware), as one
// function: req => { scope, key, hash }, refusing (IdempotencyKeyHeaderError, KeyEmptyError,
// KeyTooLongError, InvalidJsonError, BodyTooLargeError, ...) before anything is sent.
export function requestIdentity(options) {
  const { exclude } = options;
  const keyOf = options.key ?? ((req) => parseIdempotencyKey(req.headers['idempotency-key']));
  const limit = options.limit ?? 1 << 20;
  const hashOf = options.request
    ? async (req) => requestHash(options.request(req), exclude)
    : (req) => defaultRequestHash(req, exclude, limit);
  return async (req) => {
    const scope = valueOf(options.scope, req);
    if (scope === undefined || scope === null) { // say a header the scope is read from
      throw headerError('idempotency_scope_missing');
    }
    const key = keyOf(req);
    checkNames(scope, key);
    return { scope, key, hash: await hashOf(req) };
  };
}
