// A BullMQ worker that applies each job exactly once (by its data.key, else its job id).
//   BULLMQ_QUEUE=payments REDIS_PORT=6379 PGDATABASE=... node bullmq_worker.js
// exactlyOnceProcessor runs the job's effect inside a claim of its key and stores the return
// value in the same COMMIT. A worker killed before COMMIT leaves nothing; after COMMIT and
// before BullMQ marked the job completed, the job stalls, another worker (or this one,
// restarted) takes it over, and the rerun resolves to the stored value without applying it.
// A job whose effect fails is retried by its attempts and backoff, its failures counted on its
// key; at MAX_ATTEMPTS it is failed for good (BullMQ's failed set), and
// idempotency.failed_keys keeps its error.
// Worker options that matter: maxStalledCount must be large (BullMQ fails a job that stalled
// more often, and a failed job is a lost one); lockDuration is how long a killed worker's jobs
// wait before another worker takes them over.
// DEDUP=bullmq runs the same effect without the wrapper, with BullMQ's own dedup (the job id)
// only: the jobs suite counts what that applies twice.
import { pathToFileURL } from 'node:url';
import { Worker } from 'bullmq';
import pg from 'pg';
import { exactlyOnceProcessor } from '@idempotency/client';
import { GROUP, MAX_ATTEMPTS, apply, log, noPhase } from './common.js';

const QUEUE = process.env.BULLMQ_QUEUE ?? 'payments';
export const redis = () => ({
  host: '127.0.0.1', port: Number(process.env.REDIS_PORT ?? 6379), maxRetriesPerRequest: null,
});

export async function main(onPhase = noPhase) {
  const pool = new pg.Pool({ max: 4 }); // PG* environment
  pool.on('error', (err) => log(`pg pool: ${err.message}`)); // an idle client lost: replaced
  // The payment's key: data.key when the producer gives one (a producer's retry may come as a
  // job of another id), else the job id.
  const keyOf = (job) => job.data.key ?? job.id;
  const effect = async (job, client) => {
    await onPhase('received', keyOf(job));
    await apply(client, keyOf(job), JSON.stringify(job.data));
    await onPhase('effect_written', keyOf(job));
    return { account: job.data.account, amount: job.data.amount };
  };
  const processor = process.env.DEDUP === 'bullmq'
    ? async (job) => { // the framework only: the effect in a transaction of its own
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        const out = await effect(job, client);
        await client.query('COMMIT');
        return out;
      } finally {
        client.release();
      }
    }
    : exactlyOnceProcessor(pool, effect, { scope: GROUP, key: keyOf, maxAttempts: MAX_ATTEMPTS });
  const worker = new Worker(QUEUE, processor, {
    connection: redis(),
    concurrency: Number(process.env.CONCURRENCY ?? 4),
    lockDuration: Number(process.env.LOCK_MS ?? 30000),
    stalledInterval: Number(process.env.STALLED_MS ?? 30000),
    maxStalledCount: 1000,
  });
  worker.on('completed', (job) => onPhase('completed', job.id));
  worker.on('failed', (job, err) => log(`failed ${job?.id}: ${err.message}`));
  worker.on('error', (err) => log(`worker: ${err.message}`)); // Redis away: it reconnects
  log(`processing ${QUEUE} as ${GROUP}`);
  return worker;
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) await main();
