// A RabbitMQ stream consumer that applies each message exactly once (by its offset).
//   STREAM=events AMQP_URL=amqp://... PGDATABASE=... node stream_consumer.js
// A stream is an append-only log read from an offset, as a Kafka partition. The offset is the
// position: applyOnce runs accept(group, stream, offset) in the same transaction as the effect,
// so the watermark moves with it, and a message at or below the watermark is skipped. The
// consumer starts after its watermark (START_OFFSET=first or a number overrides it: a replay
// from an older offset applies nothing twice), and acks after COMMIT (acks only pace a stream).
import { pathToFileURL } from 'node:url';
import amqp from 'amqplib';
import pg from 'pg';
import { applyOnce, watermark } from '@idempotency/client';
import { AMQP_URL, GROUP, apply, exitOnClose, noPhase } from './common.js';

const STREAM = process.env.STREAM ?? 'events';

async function startOffset(db) {
  const start = process.env.START_OFFSET;
  if (start) return /^[0-9]+$/.test(start) ? { '!': 'long', value: Number(start) } : start;
  const w = await watermark(db, GROUP, STREAM);
  return w === null ? 'first' : { '!': 'long', value: Number(w + 1n) };
}

export async function main(onPhase = noPhase) {
  const db = new pg.Client();
  await db.connect();
  const connection = await amqp.connect(AMQP_URL);
  exitOnClose(connection);
  const channel = await connection.createChannel();
  await channel.assertQueue(STREAM, { durable: true, arguments: { 'x-queue-type': 'stream' } });
  await channel.prefetch(100); // a stream consumer needs a prefetch
  let chain = Promise.resolve();
  await channel.consume(STREAM, (msg) => {
    chain = chain.then(() => handle(msg)).catch((err) => {
      console.error(err);
      process.exit(1);
    });
  }, { arguments: { 'x-stream-offset': await startOffset(db) } });

  async function handle(msg) {
    const offset = msg.properties.headers['x-stream-offset'];
    await onPhase('received', msg.properties.messageId);
    const applied = await applyOnce(db, GROUP, STREAM, offset, async () => {
      await apply(db, msg.properties.messageId, msg.content); // the key is the offset
      await onPhase('effect_written', msg.properties.messageId);
    });
    await onPhase(applied ? 'committed' : 'duplicate', msg.properties.messageId);
    channel.ack(msg);
    await onPhase('acked', msg.properties.messageId);
  }
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) await main();
