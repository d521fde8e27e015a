// The middleware's HTTP answers, built here and nowhere else: an answer is { status, headers
// (lower-case names), body (a Buffer) }. The error answers are RFC 9457 problem details (or,
// with the legacyAnswers option, the JSON { error, message } of 0.3.0), word for word those of
// the other clients' middlewares (test/vectors/http_answers.json); the stored form of an answer
// and its replay are the same in every client too.
import { isConnectionLost } from './connection.js';
import {
  ConnectionLostError, InvalidJsonError, KeyEmptyError, KeyInProgressError, KeyMismatchError,
  KeyTooLongError, KeyTooOldError, OutcomeError, ProgramLimitExceededError,
} from './errors.js';
import { BodyTooLargeError, IdempotencyKeyHeaderError, isJsonType } from './requests.js';
import { PROBLEMS, PROBLEM_TITLES, PROBLEM_TYPE_BASE } from './spec.js';

// An answer of the middleware's own: a JSON body (none for undefined).
export function jsonAnswer(status, body, headers = {}) {
  const bytes = Buffer.from(body === undefined ? '' : JSON.stringify(body));
  const lower = {};
  for (const [name, value] of Object.entries(headers)) lower[name.toLowerCase()] = String(value);
  return { status, headers: { 'content-type': 'application/json',
    'content-length': String(bytes.length), ...lower }, body: bytes };
}

const problem = (status, error, message, headers = {}) =>
  ({ status, body: { error, message }, headers });

// The answer of code as the spec gives it (PROBLEMS, generated from http_answers.json).
const fixed = (code, headers = {}) => problem(PROBLEMS[code].status, code, PROBLEMS[code].detail,
  headers);

export { PROBLEM_TITLES, PROBLEM_TYPE_BASE } from './spec.js';

// One of the middleware's own error answers: problem details (type, title, status, detail, and
// the code as the extension member "error"), keeping its legacy body { error, message } and
// extra headers for styledAnswer.
function errorAnswerOf(status, { error, message }, headers = {}) {
  const details = { type: PROBLEM_TYPE_BASE + error, title: PROBLEM_TITLES[error] ?? 'Request failed',
    status, detail: message, error };
  const answer = jsonAnswer(status, details, headers);
  answer.headers['content-type'] = 'application/problem+json';
  Object.defineProperty(answer, 'legacy', { value: { body: { error, message }, headers } });
  return answer;
}

// answer as the options say: an error answer of the middleware's own with the legacy body
// (legacyAnswers) and Link: <documentation>; rel="describedby" (documentation); any other
// answer (the handler's, a replay) as it is.
export function styledAnswer(answer, { documentation, legacyAnswers } = {}) {
  if (answer?.legacy === undefined) return answer;
  const styled = legacyAnswers
    ? jsonAnswer(answer.status, answer.legacy.body, answer.legacy.headers) : answer;
  if (documentation) styled.headers.link = `<${documentation}>; rel="describedby"`;
  return styled;
}

// The HTTP answer { status, body, headers } for an error of the helpers that has one (the
// key header, the reserve outcomes), or null.
export function answerFor(err) {
  if (err instanceof IdempotencyKeyHeaderError) return problem(400, err.code, err.message);
  if (err instanceof KeyTooLongError || err instanceof KeyEmptyError)
    return problem(400, err.httpError, err.message);
  if (err instanceof KeyInProgressError) {
    return fixed('idempotency_key_in_use', { 'Retry-After': String(err.retryAfter) });
  }
  if (err instanceof KeyMismatchError) {
    return fixed('idempotency_key_reused');
  }
  if (err instanceof KeyTooOldError) {
    return fixed('idempotency_key_too_old');
  }
  if (err instanceof OutcomeError) return problem(err.httpStatus, 'idempotency_key_conflict', err.message);
  if (err instanceof ConnectionLostError || isConnectionLost(err)) {
    return fixed('database_unavailable', { 'Retry-After': '1' });
  }
  return null;
}

// answerFor(err) as an answer to send, or null.
export function errorAnswer(err) {
  const answer = answerFor(err);
  return answer === null ? null : errorAnswerOf(answer.status, answer.body, answer.headers);
}

// The answer to a request whose key, scope or body was refused before anything was sent
// (answerFor's, 400 invalid_json, 413 body_too_large), or null for an error that has none.
export function requestRefusedAnswer(err) {
  const answer = errorAnswer(err);
  if (answer) return answer;
  if (err instanceof InvalidJsonError || err instanceof ProgramLimitExceededError) {
    const { status, body } = fixed('invalid_json');
    return errorAnswerOf(status, body);
  }
  if (err instanceof BodyTooLargeError) {
    const { status, body } = fixed('body_too_large');
    return errorAnswerOf(status, body);
  }
  return null;
}

// 503 + Retry-After: no server answered, or the connection was lost.
export const unavailableAnswer = (err) => errorAnswer(new ConnectionLostError(
  `the connection to the server was lost: ${err.message}`, { cause: err }));

// 500: the request failed and nothing of it is stored.
export const notStoredAnswer = () => {
  const { status, body } = fixed('internal_error');
  return errorAnswerOf(status, body);
};

// The answer to a reserve outcome that runs nothing (in_progress, mismatch, too_old).
const OUTCOME_ERRORS = {
  in_progress: KeyInProgressError, mismatch: KeyMismatchError, too_old: KeyTooOldError,
};
export const outcomeAnswer = (scope, key, reservation) => errorAnswer(
  new OUTCOME_ERRORS[reservation.outcome](scope, key, reservation, reservation.outcome));

// The answer of a stored response: its status, stored headers and body; a replay (replayed)
// adds Idempotent-Replayed: true and replayHeaders(statusCode, value)'s (which win).
export function storedResponseAnswer({ statusCode, response }, replayed, replayHeaders) {
  const replay = replayOf(response);
  const headers = { ...replay.headers, 'content-length': String(replay.body.length) };
  if (replayed) {
    headers['idempotent-replayed'] = 'true';
    for (const [name, value] of Object.entries(replayHeaders(statusCode, replay.value)))
      headers[name.toLowerCase()] = String(value);
  }
  return { status: statusCode, headers, body: replay.body };
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
