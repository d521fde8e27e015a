// fastify.d.ts against a use of the plugin (compiled by types.test.js with tsc --strict).
import Fastify from 'fastify';
import type { MiddlewareOptions } from '@idempotency/client';
import { idempotencyPlugin } from '@idempotency/client/fastify';

declare const pool: MiddlewareOptions['pool'];

export async function service(): Promise<void> {
  const app = Fastify();
  await app.register(idempotencyPlugin, {
    pool, scope: (req) => req.headers['x-account'] as string | undefined, limit: 1 << 16,
  });
  app.post('/orders', { config: { idempotency: true } }, async (request, reply) => {
    const client = request.idempotency!.client;
    const raw: Buffer | string | null = request.rawBody;
    await client.query('SELECT $1::int', [raw === null ? 0 : raw.length]);
    return reply.code(201).send({ ok: true });
  });
  app.post('/once', { config: { idempotency: { statement: 'SELECT 1', legacyAnswers: true,
    params: () => [] } } }, async () => undefined);
}
