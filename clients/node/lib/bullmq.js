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
// Round trips to PostgreSQL: a new job's claim opens the transaction in one
// (idempotency.reserve_begin, prepared; BEGIN + reserve where the server does not offer it),
// then work's own statements, then complete + COMMIT in one; a rerun of a committed job is
// the claim alone. options.prepare false sends reserve_begin and complete unprepared (a
// prepared statement the server connection does not have as ours, behind a transaction-mode
// pooler, switches to that by itself).
//
// options.maxAttempts bounds a job that fails every time (a poison job) on the database side:
// each failure is recorded on the key; the maxAttempts-th records the key dead
// (idempotency.failed_keys) and throws a PoisonMessageError named 'UnrecoverableError', which
// BullMQ fails at once, without the attempts left. Give the job at least as many attempts
// (job options attempts) as maxAttempts.
import {
  isConnectionLost, query, transactionStatus, translate, watchConnection,
} from './connection.js';
import { checkMaxAttempts, counted, recordFailure } from './consumer.js';
import { InvalidTransactionTerminationError, PoisonMessageError } from './errors.js';
import { completeThen, lookup, preparedStatementUnusable } from './keys.js';
import { OpeningClaim } from './opening_claim.js';
import { DEFAULT_JOB_WAIT, DEFAULT_LOCK_TTL, DEFAULT_RETENTION } from './spec.js';
import { COMMIT, ROLLBACK } from './statements.js';
import { observed, observing } from './telemetry.js';
import { raiseFor, rollbackQuietly } from './transactions.js';

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
    retention = DEFAULT_RETENTION, prepare = true,
  } = options;
  checkMaxAttempts(maxAttempts);
  // shared by the processor's runs: what the server offers, and whether prepared statements
  // are usable on the pool's connections
  const claims = new OpeningClaim({ lockTtl, retention, wait, prepare });

  // One run of a job on client: the claim opening the transaction (one round trip), work, and
  // complete + COMMIT (one round trip); a replay is the claim alone. run gets the claim's
  // outcome and attempt (for telemetry.js), whether work ran and whether a statement of its own
  // ended the transaction. An error rolls back whatever is open and comes out typed.
  async function runJob(client, job, token, s, k, run) {
    let claimed = false;
    try {
      const [r, prepared] = await claims.reserve(client, s, k);
      claimed = true;
      run.outcome = r.outcome;
      run.attempt = r.attempt;
      if (r.outcome !== 'new') {
        // reserve_begin left no transaction open; BEGIN + reserve did
        if (transactionStatus(client) !== 'I') await query(client, ROLLBACK);
        raiseFor(s, k, r);
        return r.response?.result ?? null;
      }
      run.ran = true;
      const value = await work(job, guarded(client), token);
      run.ended = transactionStatus(client) === 'I';
      try {
        await completeThen(client, COMMIT, s, k, STATUS,
          { result: value === undefined ? null : value }, r.attempt,
          { prepare: prepared && claims.opts.prepare });
      } catch (err) {
        if (preparedStatementUnusable(err)) claims.opts.prepare = false; // the next runs' too
        throw err;
      }
      if (run.ended) throw endedError(true);
      return value === undefined ? null : value;
    } catch (err) {
      // a failed claim: pg may not have read the ReadyForQuery after the error of BEGIN +
      // reserve yet (its status still says idle), so ROLLBACK in any case
      if (!claimed || transactionStatus(client) !== 'I') await rollbackQuietly(client);
      throw translate(err, client);
    }
  }

  // runJob with what its failure means for BullMQ: a lost connection is thrown as it is (an
  // attempt, retried by backoff), a failure of work counted towards maxAttempts.
  async function processJob(job, token, s, k, run) {
    const client = await pool.connect();
    const unwatch = watchConnection(client);
    let broken = null;
    try {
      return await runJob(client, job, token, s, k, run);
    } catch (err) {
      if (isConnectionLost(err, client)) {
        broken = err;
        throw err;
      }
      if (run.ended) {
        throw err instanceof InvalidTransactionTerminationError ? err : endedError(false, err);
      }
      // not the job's failure: a prepared statement of ours its server connection lost (the
      // next runs send them unprepared)
      if (!run.ran || maxAttempts === null || !counted(client, err) ||
        preparedStatementUnusable(err)) throw err;
      let failure;
      try {
        failure = await recordFailure(client, s, k, err, { maxAttempts, retention, wait });
      } catch (recordErr) {
        if (isConnectionLost(recordErr, client)) broken = recordErr;
        throw err;
      }
      if (failure.outcome === 'replay') {
        return (await storedResult(client, s, k)) ?? null; // a competing run applied it
      }
      if (failure.doc?.dead) {
        const poison = new PoisonMessageError(s, k, failure.attempt, failure.doc, { cause: err });
        poison.name = 'UnrecoverableError'; // BullMQ fails it without the attempts left
        throw poison;
      }
      throw err;
    } finally {
      const lost = unwatch(broken); // an 'error' of the connection while the run held it
      client.release(broken ?? lost ?? undefined);
    }
  }

  return async function processor(job, token) {
    const s = String(pick(scope, job) ?? job.queueName);
    const k = key === undefined ? job.id : pick(key, job);
    if (k === undefined || k === null) {
      throw new TypeError(`job ${job.id}: options.key gave no key`);
    }
    const run = { outcome: undefined, attempt: undefined, ran: false, ended: false };
    if (!observing()) return processJob(job, token, s, String(k), run);
    return observed('bullmq', s, String(k), () => processJob(job, token, s, String(k), run),
      () => run);
  };
}

// The return value stored for (scope, key), or undefined if the key is not completed.
export async function storedResult(db, scope, key) {
  const record = await lookup(db, scope, key);
  if (record?.state !== 'completed') return undefined;
  return record.response?.result ?? null;
}
