// The Idempotency-Key header as a Fastify 5 plugin: the adapter of the decision flow
// (decision.js) to Fastify's hooks. A route opts in with `config: { idempotency: true }` (or
// an object of options that override the plugin's for that route):
//   preParsing  keeps the body's bytes as request.rawBody while Fastify's own parser reads
//               them once (the fingerprint of a JSON body is that of its exact text)
//   preHandler  the claim: a refusal, a replay or a 409 / 422 is answered here and the handler
//               is not called; for a new key the handler runs inside the claim's transaction
//               with request.idempotency ({ client, scope, key, attempt, ... }) as in Express
//   onSend      the handler's answer (after Fastify's serialization) is held until the
//               transaction has committed with it stored; a commit that fails replaces it
//               with the 500 / 503 of answers.js
//   errorHandler (the route's) a body Fastify refused as not JSON or over the limit gets the
//               middleware's own 400 invalid_json / 413 body_too_large; any other error goes
//               on to the route's or the instance's error handler
// The options are idempotencyMiddleware's (middleware.js), with the statement form: its
// route's handler is never called (every answer comes from execute_once, sent by preHandler; no
// onSend / onResponse hooks are added there). The plugin must be registered (awaited) before
// the routes that use it.
import fastifyPlugin from 'fastify-plugin';
import { Readable, Transform } from 'node:stream';
import { DecisionFlow } from './decision.js';
import { notStoredAnswer, requestRefusedAnswer, styledAnswer } from './answers.js';
import { BodyTooLargeError } from './requests.js';
import { InvalidJsonError } from './errors.js';

const STATE = Symbol('idempotency state');

// Fastify's errors of a body its parser refused, as the middleware's own refusals.
const PARSER_REFUSALS = {
  FST_ERR_CTP_INVALID_JSON_BODY: () => new InvalidJsonError('the request body is not JSON'),
  FST_ERR_CTP_EMPTY_JSON_BODY: () => new InvalidJsonError('the request body is empty'),
  FST_ERR_CTP_BODY_TOO_LARGE: () => new BodyTooLargeError(),
};

// Sends one of the middleware's own answers ({ status, headers, body }) on reply.
const sendAnswer = (reply, answer) => reply.code(answer.status).headers(answer.headers)
  .send(answer.body);

// A stream that passes the body on to Fastify's parser and keeps a copy of its bytes.
function keepingBytes(payload, chunks) {
  const tee = new Transform({
    transform(chunk, encoding, done) {
      chunks.push(chunk);
      tee.receivedEncodedLength = payload.receivedEncodedLength;
      done(null, chunk);
    },
  });
  tee.receivedEncodedLength = payload.receivedEncodedLength;
  return payload.pipe(tee);
}

// The bytes of an onSend payload (a string, a Buffer, a stream or nothing).
async function payloadBytes(payload) {
  if (payload === undefined || payload === null) return Buffer.alloc(0);
  if (typeof payload === 'string') return Buffer.from(payload, 'utf8');
  if (Buffer.isBuffer(payload) || payload instanceof Uint8Array) return Buffer.from(payload);
  if (payload instanceof Readable || typeof payload.pipe === 'function') {
    const chunks = [];
    for await (const chunk of payload) chunks.push(Buffer.from(chunk));
    return Buffer.concat(chunks);
  }
  return Buffer.from(String(payload), 'utf8');
}

function routeHooks(options) {
  const flow = new DecisionFlow(options);
  const answerOptions = { documentation: options.documentation,
    legacyAnswers: options.legacyAnswers };

  async function preParsing(request, reply, payload) {
    const chunks = [];
    request[STATE] = { chunks };
    return keepingBytes(payload, chunks);
  }

  // The statement form: every answer is the flow's own, and no handler runs (nothing to hold
  // back, so no onSend / onResponse).
  async function statementPreHandler(request, reply) {
    const chunks = request[STATE]?.chunks;
    if (request.rawBody === undefined || request.rawBody === null)
      request.rawBody = chunks === undefined ? Buffer.alloc(0) : Buffer.concat(chunks);
    let answer;
    await flow.handle(request, {
      run: () => { throw new Error('the statement form runs no handler'); },
      respond: (a) => { answer = a; },
    });
    return sendAnswer(reply, answer);
  }

  async function preHandler(request, reply) {
    const state = request[STATE] ?? { chunks: [] };
    request[STATE] = state;
    if (request.rawBody === undefined || request.rawBody === null)
      request.rawBody = Buffer.concat(state.chunks);
    // settles with 'run' (the handler may run) or { answer } (an answer of the flow's own)
    let decide;
    const decided = new Promise((resolve) => { decide = resolve; });
    const handled = flow.handle(request, {
      run: (context) => {
        request.idempotency = context;
        const held = new Promise((resolve, reject) => { state.hold = { resolve, reject }; });
        decide('run');
        return held;
      },
      respond: (answer) => {
        if (state.deliver) state.deliver(answer);
        else decide({ answer });
      },
    });
    state.handled = handled;
    handled.catch((err) => {
      if (state.deliver) { // the handler answered: its answer becomes a 500
        console.error(`idempotency: the request failed after its answer: ${err.message}`);
        state.deliver(styledAnswer(notStoredAnswer(), answerOptions));
      }
    });
    const outcome = await Promise.race([decided, handled.then(() => decided)]);
    if (outcome === 'run') return undefined;
    state.own = true;
    return sendAnswer(reply, outcome.answer);
  }

  async function onSend(request, reply, payload) {
    const state = request[STATE];
    if (!state?.hold || state.own || state.sent) return payload;
    state.sent = true;
    const delivered = new Promise((resolve) => { state.deliver = resolve; });
    let body;
    try {
      body = await payloadBytes(payload);
    } catch (err) {
      state.hold.reject(err);
      throw err;
    }
    state.hold.resolve({ held: true, status: reply.statusCode,
      headers: Object.entries(reply.getHeaders()), body });
    const answer = await delivered;
    if (answer.held) return body;
    // replaces the handler's answer: none of its headers that describe another body stay
    reply.removeHeader('content-length');
    reply.removeHeader('location');
    reply.code(answer.status).headers(answer.headers);
    return answer.body;
  }

  // A response that ended without passing onSend (a hijacked reply): its transaction is rolled
  // back. (A client that goes away is not one: Fastify still sends the handler's answer through
  // onSend, and the handler keeps its connection until then.)
  async function onResponse(request) {
    const state = request[STATE];
    if (state?.hold && !state.sent) {
      state.sent = true;
      state.hold.reject(new Error('the request ended without an answer'));
    }
  }

  const errorHandlerOver = (fallback) => function idempotencyErrors(error, request, reply) {
    const refusal = PARSER_REFUSALS[error?.code];
    if (refusal && request.routeOptions?.config?.idempotency) {
      return sendAnswer(reply, styledAnswer(requestRefusedAnswer(refusal()), answerOptions));
    }
    return fallback.call(this, error, request, reply);
  };

  if (options.statement !== undefined) {
    return { preParsing, preHandler: statementPreHandler, errorHandlerOver };
  }
  return { preParsing, preHandler, onSend, onResponse, errorHandlerOver };
}

const hooksOf = (existing, hook) =>
  (existing === undefined ? [hook] : [...[existing].flat(), hook]);

async function idempotency(fastify, options) {
  const { limit, ...common } = options;
  if (!fastify.hasRequestDecorator('rawBody')) fastify.decorateRequest('rawBody', null);
  if (!fastify.hasRequestDecorator('idempotency')) fastify.decorateRequest('idempotency', null);
  fastify.addHook('onRoute', function addIdempotency(route) {
    const own = route.config?.idempotency;
    if (!own) return;
    const merged = { ...common, ...(own === true ? {} : own) };
    const hooks = routeHooks(merged);
    const bodyLimit = merged.limit ?? limit;
    if (bodyLimit !== undefined && route.bodyLimit === undefined) route.bodyLimit = bodyLimit;
    for (const name of ['preParsing', 'preHandler', 'onSend', 'onResponse'])
      if (hooks[name]) route[name] = hooksOf(route[name], hooks[name]);
    route.errorHandler = hooks.errorHandlerOver(route.errorHandler ?? this.errorHandler);
  });
}

// The plugin, for fastify.register(idempotencyPlugin, options) (options: idempotencyMiddleware's;
// pool and scope here or in each route's config.idempotency).
export const idempotencyPlugin = fastifyPlugin(idempotency, {
  fastify: '5.x',
  name: '@idempotency/client',
});
