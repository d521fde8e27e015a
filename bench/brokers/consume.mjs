// One benchmark consumer (Node): consume.py's twin (see its head for the modes and output).
//   node consume.mjs MODEL MODE COUNT BATCH   (AMQP_URL, NAME, PG* from the environment)
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { performance } from 'node:perf_hooks';

// The packages of examples/consumers (amqplib, pg, the client), installed from its lock file.
const require = createRequire(new URL('../../examples/consumers/package.json', import.meta.url));
const amqp = require('amqplib');
const pg = require('pg');
const { applyOnce, claimOnce, consumeOnce, runOnce, watermark } =
  await import(require.resolve('@idempotency/client'));

const [model, mode] = process.argv.slice(2, 4);
const count = Number(process.argv[4]);
const batch = mode.endsWith('-batch') ? Number(process.argv[5]) : 1;
const NAME = process.env.NAME;
const GROUP = 'bench';
const INSERT = 'INSERT INTO ledger (consumer, message_id, account, amount) VALUES ($1, $2, $3, $4)';

const db = new pg.Client();
await db.connect();
const backend = (await db.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
const connection = await amqp.connect(process.env.AMQP_URL);
const channel = await connection.createChannel();
await channel.prefetch(Math.max(200, 2 * batch));

const TICK_US = 1e6 / 100; // USER_HZ
function cpuUs() {
  const me = process.cpuUsage();
  const fields = readFileSync(`/proc/${backend}/stat`, 'utf8').split(')').pop().trim().split(' ');
  return me.user + me.system + (Number(fields[11]) + Number(fields[12])) * TICK_US;
}

const apply = (id) => db.query(INSERT, [GROUP, id, 'acct', 1]);
const offsetOf = (msg) => msg.properties.headers['x-stream-offset'];

async function handle(pending) {
  if (mode === 'bare' || mode === 'bare-batch') {
    await db.query('BEGIN');
    for (const msg of pending) await apply(msg.properties.messageId);
    await db.query('COMMIT');
  } else if (mode === 'ext' && model === 'queue') {
    const id = pending[0].properties.messageId;
    await consumeOnce(db, GROUP, id, () => apply(id));
  } else if (mode === 'ext-runonce') {
    const id = pending[0].properties.messageId;
    await runOnce(db, { scope: GROUP, key: id }, async () => {
      await apply(id);
      return { statusCode: 200, response: null };
    });
  } else if (mode === 'ext') {
    await applyOnce(db, GROUP, NAME, offsetOf(pending[0]),
      () => apply(pending[0].properties.messageId));
  } else if (model === 'queue') {
    await db.query('BEGIN');
    for (const msg of pending) {
      const id = msg.properties.messageId;
      if (await claimOnce(db, GROUP, id)) await apply(id);
    }
    await db.query('COMMIT');
  } else {
    await db.query('BEGIN');
    const w = await watermark(db, GROUP, NAME);
    for (const msg of pending) {
      if (w === null || BigInt(offsetOf(msg)) > w) await apply(msg.properties.messageId);
    }
    await db.query('SELECT idempotency.accept($1, $2, $3::bigint)',
      [GROUP, NAME, String(offsetOf(pending.at(-1)))]);
    await db.query('COMMIT');
  }
  channel.ack(pending.at(-1), true);
}

let pending = [];
let done = 0;
let began = null;
let chain = Promise.resolve();
const finished = new Promise((resolve, reject) => {
  const args = model === 'stream' ? { arguments: { 'x-stream-offset': 'first' } } : {};
  channel.consume(NAME, (msg) => {
    began ??= [performance.now(), cpuUs()];
    pending.push(msg);
    if (pending.length >= batch || done + pending.length >= count) {
      const work = pending;
      pending = [];
      chain = chain.then(() => handle(work)).then(() => {
        done += work.length;
        if (done >= count) resolve();
      }).catch(reject);
    }
  }, args);
});
await finished;
const [t0, c0] = began;
const seconds = ((performance.now() - t0) / 1000).toFixed(6);
console.log(`RESULT node ${model} ${mode} ${count} ${seconds} ${Math.round(cpuUs() - c0)}`);
await connection.close();
await db.end();
