// A RabbitMQ queue consumer that applies each message exactly once (by its message id).
//   QUEUE=payments AMQP_URL=amqp://... PGDATABASE=... node queue_consumer.js
// The broker redelivers a message whose ack it has not received (the consumer died, its channel
// closed), perhaps to another consumer and out of order. The message id is the key: consumeOnce
// claims it and marks it done (idempotency.claim_once, one statement) in the same transaction
// as the effect, and the ack goes out only after COMMIT. Died before COMMIT: nothing of it is
// stored, the redelivery applies it. Died after COMMIT, before the ack: the redelivery finds the
// key completed (consumeOnce resolves false) and is only acknowledged.
// A message whose effect fails is requeued, its failure counted on its key; at MAX_ATTEMPTS it
// is rejected without requeue, to the queue's dead-letter exchange (<queue>.dlx, then the queue
// <queue>.dead), and idempotency.failed_keys keeps its error.
// Producers must set a message id that stays the same on every retry of theirs.
import { pathToFileURL } from 'node:url';
import amqp from 'amqplib';
import pg from 'pg';
import { ConnectionLostError, consumeOnce, PoisonMessageError } from '@idempotency/client';
import {
  AMQP_URL, GROUP, MAX_ATTEMPTS, apply, declareQueue, exitOnClose, log, noPhase,
} from './common.js';

const QUEUE = process.env.QUEUE ?? 'payments';

export async function main(onPhase = noPhase) {
  const db = new pg.Client(); // PG* environment
  await db.connect();
  const connection = await amqp.connect(AMQP_URL);
  exitOnClose(connection);
  const channel = await connection.createChannel();
  await declareQueue(channel, QUEUE);
  await channel.prefetch(10);
  log(`consuming ${QUEUE} as ${GROUP}`);
  // One message at a time on the one database connection, in delivery order.
  let chain = Promise.resolve();
  await channel.consume(QUEUE, (msg) => {
    chain = chain.then(() => handle(msg)).catch((err) => {
      console.error(err);
      process.exit(1); // unacked: the broker redelivers it
    });
  });

  async function handle(msg) {
    const id = msg.properties.messageId;
    await onPhase('received', id);
    let applied;
    try {
      // wait: a competing consumer may hold the key (its transaction still open) for a moment.
      applied = await consumeOnce(db, GROUP, id, async (c) => {
        await apply(c, id, msg.content);
        await onPhase('effect_written', id);
      }, { wait: '30 seconds', maxAttempts: MAX_ATTEMPTS });
    } catch (err) {
      if (err instanceof PoisonMessageError) {
        log(`dead-lettered ${id} after ${err.attempt} attempts: ${err.error.error}`);
        await onPhase('dead_lettered', id);
        channel.reject(msg, false); // to <queue>.dlx
        await onPhase('rejected', id);
        return;
      }
      if (err instanceof ConnectionLostError) throw err; // exit, unacked: a supervisor restarts us
      log(`failed ${id}, requeued: ${err.name}: ${err.message}`); // counted on the key
      await onPhase('failed', id);
      channel.nack(msg, false, true);
      await onPhase('requeued', id);
      return;
    }
    log(applied ? `applied ${id}` : `skipped ${id}: applied before`);
    await onPhase(applied ? 'committed' : 'duplicate', id);
    channel.ack(msg); // only now: after COMMIT
    await onPhase('acked', id);
  }
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) await main();
