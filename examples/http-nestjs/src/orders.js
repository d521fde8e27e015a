// The orders API of the example, as a NestJS module in plain JavaScript (decorators applied by
// calling them, as TypeScript's compiled output does):
//   POST /orders      create an order: Authorization: Bearer <token> and Idempotency-Key
//   GET  /orders/:id  an order of the caller's account
//   GET  /healthz
// POST /orders is @Idempotent: its work runs in the claim's transaction (@Idempotency('client')),
// its answer is stored with the key, and a retry gets it back byte for byte.
import {
  BadRequestException, Body, Controller, Get, Inject, Injectable, Module, NotFoundException,
  Param, Post, Req, Res, UnauthorizedException, UseGuards,
} from '@nestjs/common';
import { Idempotency, Idempotent, IdempotencyModule } from '@idempotency/client/nestjs';

export const CATALOG = { widget: 250, gadget: 1000, gizmo: 4200 }; // prices in cents
const TOKENS = { 'alice-token': 'acct_alice', 'bob-token': 'acct_bob' };

// Whose request it is: a table of tokens stands in for the service's authentication.
export class AccountGuard {
  canActivate(context) {
    const req = context.switchToHttp().getRequest();
    const account = TOKENS[String(req.headers.authorization ?? '').replace(/^Bearer /, '')];
    if (!account) throw new UnauthorizedException('a known bearer token is required');
    req.account = account;
    return true;
  }
}
Injectable()(AccountGuard);

export class OrdersController {
  constructor(pool) {
    this.pool = pool; // for the reads outside any claim
  }

  // the claim's client: the order is written in the transaction that holds the key
  async create(client, body, req, res) {
    const price = CATALOG[body?.item];
    const quantity = body?.quantity ?? 1;
    // thrown before anything commits: rolled back, nothing stored, the key is free again
    if (price === undefined) throw new BadRequestException(`no item ${JSON.stringify(body?.item)}`);
    if (!Number.isInteger(quantity) || quantity < 1) throw new BadRequestException('quantity must be a positive integer');
    const { rows: [order] } = await client.query(
      `INSERT INTO orders (account, idempotency_key, item, quantity, total_cents)
       VALUES ($1, $2, $3, $4, $5) RETURNING id, item, quantity, total_cents`,
      [req.account, req.idempotency.key, body.item, quantity, price * quantity]);
    res.header('location', `/orders/${order.id}`);
    return { id: Number(order.id), item: order.item, quantity: order.quantity,
      total_cents: Number(order.total_cents) };
  }

  async get(id, req) {
    const { rows } = await this.pool.query(
      'SELECT id, item, quantity, total_cents FROM orders WHERE id = $1 AND account = $2',
      [id, req.account]);
    if (rows.length === 0) throw new NotFoundException('no such order');
    return { ...rows[0], id: Number(rows[0].id), total_cents: Number(rows[0].total_cents) };
  }

  healthz() {
    return { ok: true };
  }
}

function decorate(cls, name, decorators, params = []) {
  const descriptor = Object.getOwnPropertyDescriptor(cls.prototype, name);
  for (const d of decorators) d(cls.prototype, name, descriptor);
  params.forEach((d, i) => d(cls.prototype, name, i));
}
Controller()(OrdersController);
Inject('PG_POOL')(OrdersController, undefined, 0);
decorate(OrdersController, 'create', [Post('orders'), UseGuards(AccountGuard),
  Idempotent({ exclude: ['client_sent_at'] })],
[Idempotency('client'), Body(), Req(), Res({ passthrough: true })]);
decorate(OrdersController, 'get', [Get('orders/:id'), UseGuards(AccountGuard)], [Param('id'), Req()]);
decorate(OrdersController, 'healthz', [Get('healthz')]);

// The application's module for a pool: the options every @Idempotent route shares.
export function ordersModule(pool, { lockTtl = '30 seconds', retention = '24 hours' } = {}) {
  class OrdersModule {}
  Module({
    imports: [IdempotencyModule.forRoot({ pool, scope: (req) => req.account, lockTtl, retention,
      documentation: 'https://github.com/pgidempotency/idempotency/blob/main/docs/http.md' })],
    controllers: [OrdersController],
    providers: [{ provide: 'PG_POOL', useValue: pool }],
  })(OrdersModule);
  return OrdersModule;
}
