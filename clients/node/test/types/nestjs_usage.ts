// nestjs.d.ts against a use of the decorators and the module (compiled by types.test.js with
// tsc --strict, decorators as NestJS applications write them).
import { Body, Controller, Module, Post } from '@nestjs/common';
import type { IdempotencyContext, MiddlewareOptions } from '@idempotency/client';
import {
  Idempotency, IdempotencyInterceptor, IdempotencyModule, Idempotent,
} from '@idempotency/client/nestjs';

declare const pool: MiddlewareOptions['pool'];

@Controller('orders')
export class OrdersController {
  @Post()
  @Idempotent({ documentation: 'https://api.example.com/docs/idempotency', exclude: ['sent_at'] })
  async create(@Idempotency('client') client: IdempotencyContext['client'],
    @Body() body: { item: string }): Promise<{ item: string }> {
    await client.query('SELECT $1::text', [body.item]);
    return { item: body.item };
  }

  @Post('once')
  @Idempotent({ statement: 'INSERT INTO orders (item) VALUES ($1) RETURNING id',
    params: (req) => [String((req.body as { item: string }).item)], legacyAnswers: true })
  once(): void {}
}

@Module({
  imports: [IdempotencyModule.forRoot({ pool, scope: (req) => req.headers['x-account'] as string })],
  controllers: [OrdersController],
})
export class AppModule {}

export const later = IdempotencyModule.forRootAsync({
  useFactory: async () => ({ pool, scope: 'tenant' }),
  inject: [],
});
export const interceptor: IdempotencyInterceptor = new IdempotencyInterceptor({ pool });
