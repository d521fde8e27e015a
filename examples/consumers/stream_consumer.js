// A RabbitMQ stream consumer that applies each message exactly once (by its offset).
//   STREAM=events AMQP_URL=amqp://... PGDATABASE=... node stream_consumer.js
// A stream is an append-only log read from an offset, as a Kafka partition. The offset is the
// position: applyOnce runs accept(group, stream, offset) in the same transaction as the effect,
// so the watermark moves with it, and a message at or below the watermark is skipped. The
// consumer starts after its watermark (START_OFFSET=first or a number overrides it: a replay
// from an older offset applies nothing twice), and acks after COMMIT (acks only pace a stream).
// A message whose effect fails is tried again, its failure counted on the key
// "<stream>@<offset>"; at MAX_ATTEMPTS the watermark moves past it with the failure recorded
// (idempotency.failed_keys) and the consumer goes on: a log cannot hold one message back.
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import amqp from 'amqplib';
import pg from 'pg';
import {
  applyOnce, ConnectionLostError, PoisonMessageError, watermark,
} from '@idempotency/client';
import {
  AMQP_URL, GROUP, MAX_ATTEMPTS, apply, declareStream, exitOnClose, log, noPhase,
} from './common.js';

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
  await declareStream(channel, STREAM);
  await channel.prefetch(100); // a stream consumer needs a prefetch
  const from = await startOffset(db);
  log(`consuming ${STREAM} as ${GROUP} from offset ${from.value ?? from}`);
  let chain = Promise.resolve();
  await channel.consume(STREAM, (msg) => {
    chain = chain.then(() => handle(msg)).catch((err) => {
      console.error(err);
      process.exit(1);
    });
  }, { arguments: { 'x-stream-offset': from } });

  async function handle(msg) {
    const offset = msg.properties.headers['x-stream-offset'];
    const id = msg.properties.messageId;
    await onPhase('received', id);
    for (let tries = 1; ; tries++) {
      let applied;
      try {
        applied = await applyOnce(db, GROUP, STREAM, offset, async () => {
          await apply(db, id, msg.content); // the key is the offset
          await onPhase('effect_written', id);
        }, { maxAttempts: MAX_ATTEMPTS });
      } catch (err) {
        if (err instanceof PoisonMessageError) {
          log(`dead-lettered ${id} at offset ${offset} after ${err.attempt} attempts: ` +
            `${err.error.error}`);
          await onPhase('dead_lettered', id);
          break;
        }
        if (err instanceof ConnectionLostError) throw err; // exit: a supervisor restarts us
        log(`failed ${id} at offset ${offset}, trying again: ${err.name}: ${err.message}`);
        await onPhase('failed', id);
        await sleep(Math.min(100 * tries, 2000)); // a transient failure (not counted) may pass
        continue;
      }
      log(applied ? `applied ${id} at offset ${offset}`
        : `skipped ${id} at offset ${offset}: at or below the watermark`);
      await onPhase(applied ? 'committed' : 'duplicate', id);
      break;
    }
    channel.ack(msg);
    await onPhase('acked', id);
  }
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) await main();
