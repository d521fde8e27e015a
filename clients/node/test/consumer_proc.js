// A consumer process for the SIGKILL tests: applies outbox messages into table `applied` of the
// target database (one row per application; the table has no unique constraint, so a message
// applied twice shows as two rows).
//   node consumer_proc.js SOURCE_DB TARGET_DB SLOT run|drain N|kill PHASE K
// run: forever; drain: until N rows are applied (exit 0) or 60 s pass (exit 3); kill: SIGKILL
// itself the K-th time it reaches PHASE (see OutboxConsumer's onPhase).
import { setTimeout as sleep } from 'node:timers/promises';
import { OutboxConsumer } from '../index.js';
import { connect } from './db.js';

const [sourceDb, targetDb, slot, mode, ...rest] = process.argv.slice(2);
const source = await connect(sourceDb);
const target = await connect(targetDb);
const seen = new Map();

function onPhase(phase) {
  if (mode !== 'kill' || phase !== rest[0]) return;
  seen.set(phase, (seen.get(phase) ?? 0) + 1);
  if (seen.get(phase) === Number(rest[1])) process.kill(process.pid, 'SIGKILL');
}

async function handle(client, message) {
  await client.query('INSERT INTO applied (key, payload_id) VALUES ($1, $2)',
    [message.key, message.payload.id]);
  if (Math.random() < 0.3) await sleep(Math.random() * 10);
}

const consumer = new OutboxConsumer(source, target, { slot, consumer: 'billing', batch: 20, onPhase });
const deadline = Date.now() + 60_000;
for (;;) {
  await consumer.poll(handle);
  if (mode === 'drain') {
    const { rows } = await target.query('SELECT count(*)::int AS n FROM applied');
    if (rows[0].n >= Number(rest[0])) process.exit(0);
    if (Date.now() > deadline) process.exit(3);
  }
  await sleep(20);
}
