// Exactly-once BullMQ jobs: exactlyOnceProcessor wraps a job's work into a Worker processor.
//
//   const worker = new Worker('payments', exactlyOnceProcessor(pool, async (job, client) => {
//     await client.query('INSERT INTO charges (order_id, amount) VALUES ($1, $2)',
//       [job.data.orderId, job.data.amount]);
//     return { charged: job.data.amount };
//   }), { connection });
//
// Each run takes a client from the pool, claims a key (scope: the queue's name unless
// options.scope says otherwise; key: the job id, or options.key(job) for a business key), runs
// work(job, client) inside the claim's transaction and stores its return value (JSON) as the
// key's answer in the same COMMIT. A rerun of a job that committed (the worker was killed
// after COMMIT and before BullMQ marked the job completed, so stalled-job recovery runs it
// again; or a producer added it twice under two job ids with one business key) resolves to the
// stored value without running work. A work that throws rolls its writes and the claim back
// together, and BullMQ retries the job by its attempts and backoff.
//
// The run owns the transaction: work gets the client behind a guard whose query() refuses a
// statement that ends the transaction (COMMIT, END, ABORT, ROLLBACK but ROLLBACK TO a
// savepoint, PREPARE TRANSACTION) and whose release() throws, both with
// InvalidTransactionTerminationError (2D000), before anything is sent: a COMMIT of the work's
// would commit its writes before the answer, and a worker killed in between would leave them
// without it, to be run again. Savepoints are the work's to use. A statement the guard cannot
// read (several in one text) that ends the transaction is seen after work returns: the answer
// is still stored (else the claim, committed in progress, would be run again once its lockTtl
// lapsed), then the processor throws InvalidTransactionTerminationError, not counted towards
// maxAttempts (BullMQ's retry replays the stored value).
//
// options.maxAttempts bounds a job that fails every time (a poison job) on the database side:
// each failure is recorded on the key; the maxAttempts-th records the key dead
// (idempotency.failed_keys) and throws a PoisonMessageError named 'UnrecoverableError', which
// BullMQ fails at once, without the attempts left. Give the job at least as many attempts
// (job options attempts) as maxAttempts.
import { isConnectionLost, transactionStatus } from './connection.js';
import { checkMaxAttempts, counted, recordFailure } from './consumer.js';
import { InvalidTransactionTerminationError, PoisonMessageError } from './errors.js';
import { lookup } from './keys.js';
import { runOnce } from './transactions.js';
import { DEFAULT_JOB_WAIT, DEFAULT_LOCK_TTL, DEFAULT_RETENTION } from './spec.js';

const STATUS = 200;

const pick = (v, job) => (typeof v === 'function' ? v(job) : v);

function isPool(db) {
  return db !== null && typeof db === 'object' && typeof db.connect === 'function' &&
    'totalCount' in db;
}

// A statement text that ends the transaction, after leading blanks and comments.
const ENDS_TRANSACTION = new RegExp('^(?:\\s+|--[^\\n]*(?:\\n|$)|/\\*[\\s\\S]*?\\*/)*' +
  '(commit|end|abort|prepare\\s+transaction|' +
  'rollback(?!\\s+(?:(?:work|transaction)\\s+)?to\\b))\\b', 'i');

// The statement's first words if text ends the transaction, else null.
const endsTransaction = (text) =>
  (typeof text === 'string' ? ENDS_TRANSACTION.exec(text)?.[1] ?? null : null);

const refused = (what) => new InvalidTransactionTerminationError(
  `${what} inside an exactly-once job: the run commits the work's writes with its answer, ` +
  'after work returns', { hint: 'return to commit, throw to roll back; SAVEPOINT for a part' });

// The client as work sees it: query() refuses a statement that ends the transaction, release()
// throws; everything else is the client's own (no round trip added).
function guarded(client) {
  function query(...args) {
    const text = typeof args[0] === 'string' ? args[0] : args[0]?.text;
    const ends = endsTransaction(text);
    if (ends === null) return client.query(...args);
    const err = refused(ends.toUpperCase());
    const callback = args.at(-1);
    if (typeof callback === 'function') {
      process.nextTick(callback, err);
      return undefined;
    }
    return Promise.reject(err);
  }
  const release = () => { throw refused('release()'); };
  return new Proxy(client, {
    get(target, prop) {
      if (prop === 'query') return query;
      if (prop === 'release') return release;
      const value = Reflect.get(target, prop, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

const endedError = (stored, cause) => new InvalidTransactionTerminationError(
  "the job's work ended the run's transaction with a statement of its own: its writes " +
  'before that were not committed together with the answer ' +
  (stored ? '(the answer is stored now: a rerun resolves to it)'
    : '(and the answer could not be stored after it)'),
  { hint: 'leave transaction control to the run: return to commit, throw to roll back',
    cause });

export function exactlyOnceProcessor(pool, work, options = {}) {
  if (!isPool(pool)) {
    throw new TypeError('exactlyOnceProcessor needs a pg.Pool: jobs run concurrently, each ' +
      'in a transaction of its own client');
  }
  if (typeof work !== 'function') throw new TypeError('exactlyOnceProcessor needs a work function');
  const {
    scope, key, maxAttempts = null, wait = DEFAULT_JOB_WAIT, lockTtl = DEFAULT_LOCK_TTL,
    retention = DEFAULT_RETENTION,
  } = options;
  checkMaxAttempts(maxAttempts);
  return async function processor(job, token) {
    const s = String(pick(scope, job) ?? job.queueName);
    const k = key === undefined ? job.id : pick(key, job);
    if (k === undefined || k === null) {
      throw new TypeError(`job ${job.id}: options.key gave no key`);
    }
    const client = await pool.connect();
    let broken = null;
    let ran = false;
    let ended = false;
    try {
      const r = await runOnce(client, { scope: s, key: String(k), wait, lockTtl, retention },
        async (c) => {
          ran = true;
          const value = await work(job, guarded(c), token);
          ended = transactionStatus(c) === 'I'; // a statement of its own ended the transaction
          return { statusCode: STATUS, response: { result: value === undefined ? null : value } };
        });
      if (ended) throw endedError(true);
      return r.response?.result ?? null;
    } catch (err) {
      if (isConnectionLost(err, client)) {
        broken = err;
        throw err;
      }
      if (ended) {
        throw err instanceof InvalidTransactionTerminationError ? err : endedError(false, err);
      }
      if (!ran || maxAttempts === null || !counted(client, err)) throw err;
      let failure;
      try {
        failure = await recordFailure(client, s, String(k), err,
          { maxAttempts, retention, wait });
      } catch (recordErr) {
        if (isConnectionLost(recordErr, client)) broken = recordErr;
        throw err;
      }
      if (failure.outcome === 'replay') {
        return (await storedResult(client, s, String(k))) ?? null; // a competing run applied it
      }
      if (failure.doc?.dead) {
        const poison = new PoisonMessageError(s, String(k), failure.attempt, failure.doc,
          { cause: err });
        poison.name = 'UnrecoverableError'; // BullMQ fails it without the attempts left
        throw poison;
      }
      throw err;
    } finally {
      client.release(broken ?? undefined);
    }
  };
}

// The return value stored for (scope, key), or undefined if the key is not completed.
export async function storedResult(db, scope, key) {
  const record = await lookup(db, scope, key);
  if (record?.state !== 'completed') return undefined;
  return record.response?.result ?? null;
}
