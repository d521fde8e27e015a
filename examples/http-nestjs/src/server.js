// The NestJS orders example: ADAPTER=express (default) or fastify, PORT (0: any free port),
// HOST, and the PG* variables of the database (the extension preloaded). Prints
// "listening on http://HOST:PORT" once it serves.
//   PGDATABASE=... ADAPTER=fastify node src/server.js
import 'reflect-metadata';
import fs from 'node:fs';
import { NestFactory } from '@nestjs/core';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import pg from 'pg';
import { ordersModule } from './orders.js';

const ADAPTERS = { express: () => new ExpressAdapter(), fastify: () => new FastifyAdapter() };

export async function start({ adapter = 'express', host = '127.0.0.1', port = 3000, pool } = {}) {
  if (!ADAPTERS[adapter]) throw new Error(`ADAPTER must be one of ${Object.keys(ADAPTERS)}`);
  // the orders examples' schema (examples/http-node/schema.sql)
  await pool.query(fs.readFileSync(new URL('../../http-node/schema.sql', import.meta.url), 'utf8'));
  // rawBody: a JSON body is fingerprinted by its exact bytes
  const app = await NestFactory.create(ordersModule(pool), ADAPTERS[adapter](),
    { rawBody: true, logger: ['error', 'warn'] });
  app.enableShutdownHooks();
  await app.listen(port, host);
  return app;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const pool = new pg.Pool({ max: Number(process.env.PG_POOL_MAX ?? 10) });
  // an idle connection that breaks (a database restart) must not end the process
  pool.on('error', (err) => console.error('idle database connection lost:', err.message));
  const adapter = process.env.ADAPTER ?? 'express';
  const app = await start({ adapter, host: process.env.HOST ?? '127.0.0.1',
    port: Number(process.env.PORT ?? 3000), pool });
  const { address, port } = app.getHttpServer().address();
  console.log(`listening on http://${address}:${port} (NestJS, ${adapter} adapter)`);
}
