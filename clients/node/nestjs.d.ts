// Type declarations of @idempotency/client/nestjs (lib/nestjs.js): the Idempotency-Key header in
// NestJS, on its Express and its Fastify adapter. @nestjs/common and rxjs are optional peer
// dependencies.
import type {
  CallHandler, DynamicModule, ExecutionContext, InjectionToken, ModuleMetadata, NestInterceptor,
  OptionalFactoryDependency,
} from '@nestjs/common';
import type { Observable } from 'rxjs';
import type {
  Body, IdempotencyContext, MiddlewareOptions, StatementParam,
} from './index.js';

/**
 * The request a route's functions read: Express's req or Fastify's request (both have the
 * headers, and the body Nest parsed; rawBody with NestFactory.create(..., { rawBody: true })).
 */
export interface IdempotentRequest {
  headers: Record<string, string | string[] | undefined>;
  body?: unknown;
  rawBody?: Buffer;
  idempotency?: IdempotencyContext | null;
  [name: string]: unknown;
}

/**
 * idempotencyMiddleware's options, whose functions read the adapter's request; pool and scope
 * in IdempotencyModule.forRoot's options or in a route's own.
 */
export interface IdempotentOptions
  extends Omit<MiddlewareOptions, 'scope' | 'key' | 'request' | 'params' | 'pool'> {
  pool?: MiddlewareOptions['pool'];
  scope?: string | ((req: IdempotentRequest) => string | null | undefined);
  key?: (req: IdempotentRequest) => string;
  request?: (req: IdempotentRequest) => Body | null | undefined;
  params?: (req: IdempotentRequest) => readonly StatementParam[] |
    Promise<readonly StatementParam[]>;
}

/** The injection token of the options IdempotencyModule gives every route. */
export declare const IDEMPOTENCY_OPTIONS: string;
/** The metadata key of a route's own options. */
export declare const IDEMPOTENT_ROUTE: string;

/** @Idempotent(options) on a route's method or a controller: the route takes Idempotency-Key. */
export declare function Idempotent(options?: IdempotentOptions): MethodDecorator & ClassDecorator;

/** @Idempotency() a handler's parameter: the claim; @Idempotency('client'): one of its fields. */
export declare const Idempotency: (field?: keyof IdempotencyContext) => ParameterDecorator;

/** The interceptor @Idempotent puts on a route (one per request, however often it is put). */
export declare class IdempotencyInterceptor implements NestInterceptor {
  constructor(options?: IdempotentOptions | null);
  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown>;
}

export interface IdempotencyModuleAsyncOptions extends Pick<ModuleMetadata, 'imports'> {
  inject?: Array<InjectionToken | OptionalFactoryDependency>;
  useFactory: (...args: any[]) => IdempotentOptions | Promise<IdempotentOptions>;
}

/** The options every @Idempotent route starts from, in every module (a global module). */
export declare class IdempotencyModule {
  static forRoot(options: IdempotentOptions): DynamicModule;
  static forRootAsync(options: IdempotencyModuleAsyncOptions): DynamicModule;
}
