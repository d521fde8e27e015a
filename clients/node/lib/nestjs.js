// The Idempotency-Key header in NestJS, on its Express and its Fastify adapter: the adapter of
// the decision flow (decision.js) to Nest's interceptors. A route (or a controller) takes the
// header with @Idempotent(options), which records its options and puts IdempotencyInterceptor
// on it; IdempotencyModule.forRoot(options) gives every route the options they share (the pool,
// the scope...), each route's own winning.
//   The interceptor runs after Nest's body parser and guards. It holds back whatever Nest
//   writes on node's response (Express's res, or Fastify's reply.raw) from the start:
//   - an answer of the flow's own (a refusal, a replay, 409, 422, 503, the statement form's
//     answer): the handler is not called, Nest writes an empty answer, and this one is sent in
//     its place (at once on a route whose handler takes the response: Nest sends nothing);
//   - a new key: the handler runs inside the claim's transaction, the claim ({ client, scope,
//     key, attempt, ... }) as request.idempotency and through @Idempotency(); its answer, as
//     Nest wrote it, is sent once the transaction has committed with it stored (a commit that
//     fails replaces it with the 500 / 503 of answers.js). A handler that throws (an exception
//     of a pipe included) rolls the transaction back; Nest's exception filters answer, and
//     nothing is stored (503 when it failed because the claim's connection was lost).
// The options are idempotencyMiddleware's (middleware.js); their functions (scope, key, request,
// params) get the adapter's request (Express's req, Fastify's request), which reads the same
// for headers. A JSON body is fingerprinted by its exact bytes when the application is made
// with { rawBody: true }, by its parsed value otherwise.
import {
  applyDecorators, createParamDecorator, Inject, Injectable, Module, Optional, SetMetadata,
  UseInterceptors,
} from '@nestjs/common';
import { RESPONSE_PASSTHROUGH_METADATA, ROUTE_ARGS_METADATA } from '@nestjs/common/constants.js';
import { RouteParamtypes } from '@nestjs/common/enums/route-paramtypes.enum.js';
import { Observable } from 'rxjs';
import { styledAnswer, unavailableAnswer } from './answers.js';
import { isConnectionLost } from './connection.js';
import { DecisionFlow } from './decision.js';
import { holdAnswer, sendAnswer } from './held_answer.js';

// The injection token of the options IdempotencyModule gives every route.
export const IDEMPOTENCY_OPTIONS = 'IDEMPOTENCY_OPTIONS';
// The metadata key of a route's own options (@Idempotent).
export const IDEMPOTENT_ROUTE = 'idempotency:route';
// A request an interceptor took already (the interceptor put on a route twice, say once by
// @Idempotent and once globally): the second passes it on.
const TAKEN = Symbol('idempotency taken');

export class IdempotencyInterceptor {
  // a route's handler => { decisions: its DecisionFlow, nestSends }, or null: not idempotent
  #flows = new WeakMap();

  constructor(options) {
    this.options = options ?? {};
  }

  #flowOf(context) {
    const handler = context.getHandler();
    let flow = this.#flows.get(handler);
    if (flow === undefined) {
      const cls = context.getClass();
      // the method's options, else its controller's (read with Reflect, not Nest's Reflector,
      // whose class an application may have twice: one copy its own, one this package's)
      const own = Reflect.getMetadata(IDEMPOTENT_ROUTE, handler) ??
        Reflect.getMetadata(IDEMPOTENT_ROUTE, cls);
      flow = own === undefined || own === null ? null
        : { decisions: new DecisionFlow({ ...this.options, ...own }),
          nestSends: nestSendsResult(cls, handler.name) };
      this.#flows.set(handler, flow);
    }
    return flow;
  }

  intercept(context, next) {
    if (context.getType() !== 'http') return next.handle();
    const flow = this.#flowOf(context);
    const http = context.switchToHttp();
    const request = http.getRequest();
    if (flow === null || request[TAKEN]) return next.handle();
    request[TAKEN] = true;
    const response = http.getResponse();
    return claimed(flow.decisions, flow.nestSends, request, response.raw ?? response, next);
  }
}

// Whether Nest sends the route's result: not when the handler takes the response (@Res() or
// @Next() without passthrough) to answer on it itself.
function nestSendsResult(cls, name) {
  const params = Reflect.getMetadata(ROUTE_ARGS_METADATA, cls, name) ?? {};
  const takesResponse = Object.keys(params).some((key) => {
    const type = Number(key.split(':')[0]);
    return type === RouteParamtypes.RESPONSE || type === RouteParamtypes.NEXT;
  });
  return !takesResponse || Reflect.getMetadata(RESPONSE_PASSTHROUGH_METADATA, cls, name) === true;
}

// The Observable Nest awaits for the route's result, around the decision flow. nestSends:
// whether Nest sends the result (see nestSendsResult).
function claimed(flow, nestSends, request, res, next) {
  return new Observable((subscriber) => {
    const holding = holdAnswer(res);
    let handlerRan = false;
    let ended = false; // the result (or an error) was handed to Nest
    let abandoned = false; // Nest gave up before the result (the client went away)
    let handlerFinished = false;
    let handlerFailure = null;
    let claimClient = null;
    let failRun = null;
    const deliver = (value) => {
      ended = true;
      subscriber.next(value);
      subscriber.complete();
    };

    // An answer of the flow's own in place of the route's: Nest writes an empty answer, held,
    // then this one is sent (at once, on a route where Nest sends nothing).
    const answerInstead = (answer) => {
      if (nestSends) holding.answer.then(() => sendAnswer(res, holding, answer));
      else sendAnswer(res, holding, answer);
      deliver(null);
    };
    const respond = (answer) => (handlerRan ? sendAnswer(res, holding, answer)
      : answerInstead(answer));

    const run = (claim) => new Promise((resolve, reject) => {
      handlerRan = true;
      request.idempotency = claim;
      claimClient = claim.client;
      failRun = reject;
      let result = null;
      next.handle().subscribe({
        next: (value) => { result = value; },
        error: (err) => {
          handlerFinished = true;
          handlerFailure = err;
          reject(err);
        },
        complete: () => {
          handlerFinished = true;
          if (abandoned) {
            reject(new Error('the request was abandoned before its answer'));
            return;
          }
          holding.answer.then(resolve);
          deliver(result);
        },
      });
    });

    flow.handle(request, { run, respond }).catch((err) => {
      if (abandoned) return holding.restore();
      // A handler that failed because the claim's connection was lost (the server went away):
      // 503, retry with the same key, as when the commit meets it.
      if (err === handlerFailure && isConnectionLost(err, claimClient)) {
        console.error(`idempotency: the handler failed, its connection lost: ${err.message}`);
        return answerInstead(styledAnswer(unavailableAnswer(err), flow.answerOptions));
      }
      holding.restore();
      ended = true;
      return subscriber.error(err); // to Nest's exception filters
    });

    // Nest unsubscribes before the result when the client goes away: the transaction is rolled
    // back once the handler has finished with its client (never while it still uses it).
    return () => {
      if (ended) return;
      abandoned = true;
      if (handlerFinished) failRun?.(new Error('the request was abandoned before its answer'));
    };
  });
}

Injectable()(IdempotencyInterceptor);
Inject(IDEMPOTENCY_OPTIONS)(IdempotencyInterceptor, undefined, 0);
Optional()(IdempotencyInterceptor, undefined, 0);

// @Idempotent(options) on a route's method or a controller: the route takes Idempotency-Key,
// with options over IdempotencyModule's (pool and scope here or there).
export function Idempotent(options = {}) {
  if (options === null || typeof options !== 'object')
    throw new TypeError('@Idempotent takes an object of options');
  return applyDecorators(SetMetadata(IDEMPOTENT_ROUTE, options),
    UseInterceptors(IdempotencyInterceptor));
}

// @Idempotency() a parameter of the handler: the claim ({ client, scope, key, attempt,
// recoveryPoint, reservation }); @Idempotency('client'): one of its fields.
export const Idempotency = createParamDecorator((field, context) => {
  const claim = context.switchToHttp().getRequest().idempotency ?? null;
  return field === undefined || claim === null ? claim : claim[field];
});

// IdempotencyModule.forRoot(options), or forRootAsync({ imports, inject, useFactory }) for
// options made from other providers (a pool from the configuration): the options every
// @Idempotent route starts from, in every module (a global module).
export class IdempotencyModule {
  static forRoot(options) {
    return IdempotencyModule.#of([], { provide: IDEMPOTENCY_OPTIONS, useValue: options });
  }

  static forRootAsync({ imports = [], inject = [], useFactory }) {
    if (typeof useFactory !== 'function')
      throw new TypeError('IdempotencyModule.forRootAsync needs a useFactory');
    return IdempotencyModule.#of(imports, { provide: IDEMPOTENCY_OPTIONS, useFactory, inject });
  }

  static #of(imports, provider) {
    return { module: IdempotencyModule, global: true, imports, providers: [provider],
      exports: [IDEMPOTENCY_OPTIONS] };
  }
}
Module({})(IdempotencyModule);
