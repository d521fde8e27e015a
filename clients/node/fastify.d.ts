// Type declarations of @idempotency/client/fastify (lib/fastify.js): the Idempotency-Key
// header as a Fastify 5 plugin. fastify and fastify-plugin are optional peer dependencies.
import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import type {
  Body, IdempotencyContext, MiddlewareOptions, StatementParam,
} from './index.js';

/**
 * idempotencyMiddleware's options, whose functions read a FastifyRequest. limit becomes the
 * bodyLimit of a route that sets none (413 body_too_large above it).
 */
export interface IdempotencyPluginOptions
  extends Omit<MiddlewareOptions, 'scope' | 'key' | 'request' | 'params' | 'pool'> {
  pool?: MiddlewareOptions['pool'];
  scope?: string | ((req: FastifyRequest) => string | null | undefined);
  key?: (req: FastifyRequest) => string;
  request?: (req: FastifyRequest) => Body | null | undefined;
  params?: (req: FastifyRequest) => readonly StatementParam[] | Promise<readonly StatementParam[]>;
}

declare module 'fastify' {
  interface FastifyContextConfig {
    /** true, or options over the plugin's for this route: the route takes Idempotency-Key. */
    idempotency?: boolean | IdempotencyPluginOptions;
  }
  interface FastifyRequest {
    /** The claim's context (its client, scope, key, attempt) while the handler runs. */
    idempotency: IdempotencyContext | null;
    /** The body's bytes as they arrived (the fingerprint of a JSON body is its exact text). */
    rawBody: Buffer | string | null;
  }
}

/**
 * fastify.register(idempotencyPlugin, options), awaited before the routes that set
 * config.idempotency; pool and scope here or in each route's config.
 */
export declare const idempotencyPlugin: FastifyPluginAsync<IdempotencyPluginOptions>;
