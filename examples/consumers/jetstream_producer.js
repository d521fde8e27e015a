// Publishes payments to a JetStream stream, and tells how many its consumer has left.
//   NATS_URL=127.0.0.1:4222 node jetstream_producer.js publish STREAM ID,ID,... [ID,...]
//   NATS_URL=127.0.0.1:4222 node jetstream_producer.js pending STREAM DURABLE
// Each message carries its id as Nats-Msg-Id; the ids of the last list are published twice,
// as a producer's retry does (inside the duplicate window JetStream drops the second).
import { connect, headers } from 'nats';
import { declareStream } from './jetstream_consumer.js';

const [command, stream, ids = '', twice = ''] = process.argv.slice(2);
const nc = await connect({ servers: process.env.NATS_URL ?? '127.0.0.1:4222' });
const jsm = await declareStream(nc, stream);
if (command === 'publish') {
  const js = nc.jetstream();
  const again = new Set(twice.split(',').filter(Boolean));
  for (const id of ids.split(',').filter(Boolean)) {
    for (let n = again.has(id) ? 2 : 1; n > 0; n--) {
      const h = headers();
      h.set('Nats-Msg-Id', id);
      await js.publish(`${stream}.pay`, JSON.stringify({ account: 'acct', amount: 1 }), { headers: h });
    }
  }
} else if (command === 'pending') {
  const info = await jsm.consumers.info(stream, ids);
  process.stdout.write(`${info.num_pending + info.num_ack_pending}\n`);
} else {
  throw new Error(`unknown command ${command}`);
}
await nc.close();
