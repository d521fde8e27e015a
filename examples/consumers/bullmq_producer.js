// Adds payment jobs to a BullMQ queue, and tells how many are left.
//   REDIS_PORT=6379 node bullmq_producer.js add QUEUE ID,ID,... [ID,...: added twice]
//   REDIS_PORT=6379 node bullmq_producer.js pending QUEUE   (waiting + active + delayed)
// Each job's id is the given id (BullMQ's dedup: a second add of a job id still in the queue
// is dropped); the second add of an id in the last list comes as a job of its own (id
// "<id>:again"), as a producer's retry under a fresh job id does, with the same payment key
// in its data. The worker's key is the job id unless it keys by data.key (a business key).
import { Queue } from 'bullmq';
import { redis } from './bullmq_worker.js';

const [command, name, ids = '', twice = ''] = process.argv.slice(2);
const queue = new Queue(name, { connection: redis() });
if (command === 'add') {
  const again = new Set(twice.split(',').filter(Boolean));
  const opts = { attempts: 1000, backoff: { type: 'fixed', delay: 100 }, removeOnComplete: false };
  const jobs = ids.split(',').filter(Boolean).flatMap((id) => {
    const job = { name: 'pay', data: { key: id, account: 'acct', amount: 1 }, opts: { ...opts, jobId: id } };
    return again.has(id) ? [job, { ...job, opts: { ...opts, jobId: `${id}:again` } }] : [job];
  });
  for (let i = 0; i < jobs.length; i += 500) await queue.addBulk(jobs.slice(i, i + 500));
} else if (command === 'pending') {
  const c = await queue.getJobCounts('waiting', 'active', 'delayed', 'prioritized', 'paused');
  process.stdout.write(`${Object.values(c).reduce((a, b) => a + b, 0)}\n`);
} else {
  throw new Error(`unknown command ${command}`);
}
await queue.close();
