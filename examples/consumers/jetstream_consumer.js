// A NATS JetStream durable pull consumer that applies each message exactly once.
//   NATS_URL=127.0.0.1:4222 STREAM=payments DURABLE=ledger PGDATABASE=... \
//     node jetstream_consumer.js
// JetStream redelivers a message whose ack it has not received within ack_wait (the consumer
// died, or was slow). Two ways to key a message, KEY_BY:
// - sequence (the default): applyOnce on the stream sequence, the partition being the stream:
//   one watermark row per (consumer, stream), constant space, as the RabbitMQ stream consumer
//   does. The durable allows one unacked message (max_ack_pending 1), so messages are applied
//   in stream order even across a crash; a redelivery at or below the watermark is only
//   acknowledged. A producer's retry is one message only inside
//   the stream's duplicate window (Nats-Msg-Id), where JetStream drops the second publish.
// - msgid: consumeOnce on the Nats-Msg-Id header, a key per message: a producer's retry
//   after the duplicate window is still applied once; keys are kept for their retention.
// The ack goes out only after COMMIT. A message whose effect fails MAX_ATTEMPTS times is
// recorded dead (idempotency.failed_keys) and terminated (msg.term()): JetStream stops
// redelivering it.
import { pathToFileURL } from 'node:url';
import { AckPolicy, connect, DeliverPolicy, nanos } from 'nats';
import pg from 'pg';
import { applyOnce, ConnectionLostError, consumeOnce, PoisonMessageError } from '@idempotency/client';
import { GROUP, MAX_ATTEMPTS, apply, log, noPhase } from './common.js';

const NATS_URL = process.env.NATS_URL ?? '127.0.0.1:4222';
const STREAM = process.env.STREAM ?? 'payments';
const DURABLE = process.env.DURABLE ?? GROUP;
const KEY_BY = process.env.KEY_BY ?? 'sequence';
const ACK_WAIT_MS = Number(process.env.ACK_WAIT_MS ?? 30000);

// The stream (file storage: it survives a server restart) and the durable consumer, declared
// alike by producer and consumer.
export async function declareStream(nc, stream = STREAM) {
  const jsm = await nc.jetstreamManager();
  try {
    await jsm.streams.info(stream);
  } catch {
    await jsm.streams.add({ name: stream, subjects: [`${stream}.>`], storage: 'file' });
  }
  return jsm;
}

export async function main(onPhase = noPhase) {
  const db = new pg.Client(); // PG* environment
  await db.connect();
  db.on('error', (err) => { log(`pg: ${err.message}`); process.exit(4); }); // restarted later
  const nc = await connect({ servers: NATS_URL, maxReconnectAttempts: -1, reconnectTimeWait: 200 });
  const jsm = await declareStream(nc);
  await jsm.consumers.add(STREAM, {
    durable_name: DURABLE, ack_policy: AckPolicy.Explicit, deliver_policy: DeliverPolicy.All,
    ack_wait: nanos(ACK_WAIT_MS),
    // By sequence, one message in flight: JetStream delivers new messages before it redelivers
    // the unacked ones of a consumer that died, and a watermark moved past them would skip
    // them. With one in flight, the unacked one comes again before anything after it.
    max_ack_pending: KEY_BY === 'msgid' ? 100 : 1,
  });
  const consumer = await nc.jetstream().consumers.get(STREAM, DURABLE);
  log(`consuming ${STREAM} as ${DURABLE} (${GROUP}), keyed by ${KEY_BY}`);
  const messages = await consumer.consume({ max_messages: 20 });
  for await (const m of messages) {
    const id = m.headers?.get('Nats-Msg-Id') || `${STREAM}-${m.seq}`;
    await onPhase('received', id);
    const work = async (c) => {
      await apply(c, id, m.data);
      await onPhase('effect_written', id);
    };
    let applied;
    try {
      applied = KEY_BY === 'msgid'
        ? await consumeOnce(db, GROUP, id, work, { wait: '30 seconds', maxAttempts: MAX_ATTEMPTS })
        : await applyOnce(db, GROUP, STREAM, m.seq, work, { maxAttempts: MAX_ATTEMPTS });
    } catch (err) {
      if (err instanceof PoisonMessageError) {
        log(`dead ${id} after ${err.attempt} attempts: ${err.error.error}`);
        m.term(); // no more redeliveries; idempotency.failed_keys keeps it
        await onPhase('terminated', id);
        continue;
      }
      if (err instanceof ConnectionLostError) throw err; // exit, unacked: redelivered
      log(`failed ${id}, redelivered later: ${err.name}: ${err.message}`);
      m.nak(1000);
      await onPhase('requeued', id);
      continue;
    }
    log(applied ? `applied ${id}` : `skipped ${id}: applied before`);
    await onPhase(applied ? 'committed' : 'duplicate', id);
    await m.ackAck(); // only now: after COMMIT (and confirmed by the server)
    await onPhase('acked', id);
  }
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) await main();
