// The Idempotency-Key header as Express-style middleware, (req, res, next), on a pg pool: the
// adapter of the decision flow (decision.js) to node:http's request and response, as Express
// and a plain node:http server hand them on.
//   400 missing or malformed key or scope, or a JSON body that is not JSON; 201 (or whatever
//   the handler answers) the first time; the stored answer with `Idempotent-Replayed: true` on
//   a retry; 409 + Retry-After while another request holds the key; 422 when the key was used
//   with another body or is too old.
// The handler's writes and the stored response commit in one transaction: the handler uses
// req.idempotency.client for its queries, and the answer it sends is held back until that
// transaction has committed.
import { DecisionFlow } from './decision.js';
import { holdAnswer, sendAnswer } from './held_answer.js';

export {
  answerFor, replayOf, STORED_MARK, storedAnswer,
} from './answers.js';
export { IdempotencyKeyHeaderError, parseIdempotencyKey } from './requests.js';

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
//   documentation the address of the service's idempotency documentation: the middleware's
//               own answers then carry Link: <address>; rel="describedby"
//   legacyAnswers true: its own answers have the body of 0.3.0 ({ error, message } as
//               application/json) instead of RFC 9457 problem details
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
// to release, so its 'error' event never reaches the process. When next returns a promise (a
// plain-http composition) and it rejects before an answer was sent, the transaction is rolled
// back.
export function idempotencyMiddleware(options) {
  const flow = new DecisionFlow(options);
  return async function idempotency(req, res, next) {
    let holding = null;
    let handlerFailure = null;
    const respond = (answer) => sendAnswer(res, holding, answer);
    const run = (context) => {
      req.idempotency = context;
      holding = holdAnswer(res);
      // When next returns a promise (a plain-http composition) that rejects before an answer
      // was sent, the transaction is rolled back and the error goes on to the caller.
      const failed = (async () => next())().then(() => new Promise(() => {}), (err) => {
        handlerFailure = err;
        throw err;
      });
      return Promise.race([holding.answer, failed]);
    };
    try {
      await flow.handle(req, { run, respond });
    } catch (err) {
      holding?.restore();
      if (err === handlerFailure) throw err;
      return next(err);
    }
    if (handlerFailure !== null) throw handlerFailure; // the handler failed after its answer
    return undefined;
  };
}
