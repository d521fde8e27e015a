// Consumers: a key per message (claimOnce, consumeOnce), poison messages (maxAttempts on
// consumeOnce and applyOnce), and the reference outbox consumer.
//
// The outbox consumer reads an `idempotency` logical slot and confirms a transaction
// to the slot only after every message of it has been applied and committed in the consumer's
// database.
//
// How: it reads with pg_logical_slot_peek_changes, which does not move the slot, over an
// ordinary connection (pg has no replication protocol client), applies each message in its own
// transaction of the target connection under idempotency.accept (the watermark moves in the
// same transaction as the message's effects), and only after the target's COMMIT has returned
// for the last message of a source transaction moves the slot with pg_replication_slot_advance
// to that transaction's end. Whatever moment the process dies at:
// - before the target commit: nothing of the message is applied and the slot still holds it;
// - after the target commit, before the advance: the slot sends it again and accept() is false
//   for it (its key is at or below the watermark): skipped, not applied twice.
// pg_recvlogical, by contrast, confirms what it has written to its output, before the
// application downstream has applied anything: a crash there loses messages.
//
// The source role needs the REPLICATION attribute (or superuser) for the slot functions.
import { createHash } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  firstValue, isConnectionLost, query, transactionStatus, watchConnection,
} from './connection.js';
import {
  ConnectionLostError, KeyInProgressError, KeyTooOldError, PoisonMessageError,
} from './errors.js';
import { checkNames, interval, reserve } from './keys.js';
import {
  ADVANCE_SLOT, BEGIN, CLAIM_ONCE, COMMIT, CREATE_SLOT, FAIL_STAMPED, FAILURE_SAVEPOINT,
  PEEK_CHANGES, PEEK_CHANGES_OF_TOPICS, PREPARED, ROLLBACK, SLOT_EXISTS,
} from './statements.js';
import * as streams from './streams.js';
import { accept, lsnKey, lsnKeyParts } from './streams.js';
import { transactionWith } from './transactions.js';
import { DEFAULT_RETENTION, DEFAULT_WAIT } from './spec.js';

export class OutboxConsumer {
  // source: a connected pg client of the database with the slot (used outside transactions);
  // target: a connected pg client of the consumer's database (may be the same database, not
  // the same client). partition names the source in the watermark table: one per source
  // database, and a new one after a failover or restore (docs/outbox.md). onPhase(phase,
  // item) is called at every step ('peeked', 'applied_uncommitted', 'committed',
  // 'before_advance', 'advanced'), for logging and for crash tests.
  constructor(source, target, { slot, consumer, partition, topics, batch = 100, onPhase } = {}) {
    if (!slot || !consumer) throw new TypeError('OutboxConsumer needs a slot and a consumer name');
    if (source === target) throw new TypeError('source and target must be two connections');
    this.source = source;
    this.target = target;
    this.slot = slot;
    this.consumer = consumer;
    this.partition = partition ?? slot;
    this.topics = topics?.length ? topics.join(',') : null;
    this.batch = batch;
    this.onPhase = onPhase ?? (() => {});
  }

  async createSlot({ ifMissing = true } = {}) {
    const { rows } = await query(this.source, SLOT_EXISTS, [this.slot]);
    if (rows.length === 0 || !ifMissing) await query(this.source, CREATE_SLOT, [this.slot]);
  }

  async peek() {
    const { rows } = this.topics
      ? await query(this.source, PEEK_CHANGES_OF_TOPICS,
        [this.slot, this.batch, 'framing', 'on', 'topics', this.topics])
      : await query(this.source, PEEK_CHANGES, [this.slot, this.batch, 'framing', 'on']);
    return rows.map((row) => JSON.parse(row.data));
  }

  // Both connections are watched while the consumer uses them: a server or network that goes
  // away makes poll / run reject with ConnectionLostError (reconnect and run again: nothing is
  // lost or applied twice), never an unhandled 'error' event.
  async watched(fn) {
    const unwatch = [watchConnection(this.source), watchConnection(this.target)];
    try {
      return await fn();
    } finally {
      const lost = unwatch.map((stop) => stop()).find((err) => err !== null);
      if (lost) {
        throw new ConnectionLostError(`the connection to the server was lost: ${lost.message}`,
          { cause: lost });
      }
    }
  }

  // One batch: handle(targetClient, message) for each new message. Returns how many it applied.
  poll(handle) {
    return this.watched(() => this.pollWatched(handle));
  }

  async pollWatched(handle) {
    let applied = 0;
    const lines = await this.peek();
    await this.onPhase('peeked', lines);
    for (const line of lines) {
      if (line.action === 'begin') continue;
      if (line.action === 'commit') {
        // Every message of this transaction is committed in the target: confirm it.
        await this.onPhase('before_advance', line.end_lsn);
        await query(this.source, ADVANCE_SLOT, [this.slot, line.end_lsn]);
        await this.onPhase('advanced', line.end_lsn);
        continue;
      }
      const { commitLsn, lsn } = lsnKeyParts(line.key);
      const message = {
        key: lsnKey(commitLsn, lsn), topic: line.topic, payload: line.payload, commitLsn, lsn,
        xid: line.xid, commitTime: line.commit_time,
      };
      const ran = await streams.applyOnce(this.target, this.consumer, this.partition, message.key,
        async (client) => {
          await handle(client, message);
          await this.onPhase('applied_uncommitted', message);
        });
      if (ran) applied++;
      await this.onPhase('committed', message);
    }
    return applied;
  }

  // poll forever, sleeping idleMs after an empty batch, until signal (an AbortSignal) aborts.
  run(handle, { idleMs = 200, signal } = {}) {
    return this.watched(() => this.runWatched(handle, { idleMs, signal }));
  }

  async runWatched(handle, { idleMs, signal }) {
    while (!signal?.aborted) {
      if (isConnectionLost(null, this.source) || isConnectionLost(null, this.target))
        throw new ConnectionLostError('the connection to the server was lost');
      if ((await this.pollWatched(handle)) === 0) {
        try {
          await sleep(idleMs, undefined, { signal });
        } catch (err) {
          if (err.name !== 'AbortError') throw err;
        }
      }
    }
  }
}

// ---- a key per message: queue consumers ----

// idempotency.claim_once in the caller's transaction: true the first time (the key is now
// completed in this transaction: apply the message in it), false for a redelivery.
// KeyInProgressError (IK003) if another holder has the key after wait, KeyTooOldError (IK004)
// for a UUIDv7 / ULID key older than retention; KeyEmptyError / KeyTooLongError before any query.
function withKey(err, scope, key) {
  if ((err instanceof KeyInProgressError || err instanceof KeyTooOldError) && err.key === null)
    Object.assign(err, { scope, key });
  return err;
}

export async function claimOnce(client, scope, key, { retention = DEFAULT_RETENTION, wait = DEFAULT_WAIT } = {}) {
  checkNames(scope, key);
  try {
    return firstValue(await query(client, CLAIM_ONCE,
      [scope, key, interval(retention), interval(wait)]));
  } catch (err) {
    throw withKey(err, scope, key);
  }
}

// Runs work(client) in one transaction with claimOnce(scope, key): true if it ran, false for a
// redelivery (the key is completed: acknowledge the message without running work). A savepoint
// if the caller has a transaction open, else a transaction committed before this resolves:
// acknowledge the message after that. An error in work rolls the claim back with it (the
// redelivery is applied), and so does a work that resolves inside a failed transaction
// (TransactionAbortedError); a connection that breaks rejects with ConnectionLostError (nothing
// of the transaction was kept, unless it broke during COMMIT: the redelivery then gives false).
async function consumeOnceBare(client, scope, key, work,
  { retention = DEFAULT_RETENTION, wait = DEFAULT_WAIT } = {}) {
  checkNames(scope, key);
  try {
    return await transactionWith(client, PREPARED.claim_once,
      [scope, key, interval(retention), interval(wait)], async (claimed) => {
        if (claimed) await work(client);
        return claimed;
      });
  } catch (err) {
    throw withKey(err, scope, key);
  }
}

// ---- poison messages: a message whose work fails every time ----
//
// consumeOnce and applyOnce with maxAttempts count the failed attempts of a message's work on
// a key of its own (the message id, or "<partition>@<offset>" for a stream position). A
// failure of the work rolls its transaction back as before, and then, in a transaction of its
// own (a savepoint inside the caller's), the key is reserved and failed with the error: the
// record keeps the attempt number and the error, and nothing on the success path costs more.
// Below maxAttempts the work's error is thrown again (leave the message for a redelivery); at
// maxAttempts the error is stored with "dead": true (idempotency.failed_keys), for a stream the
// watermark moves past the position in the same transaction, and PoisonMessageError is
// thrown: dead-letter the message. A lost connection, a competing holder of the key and a
// transient server error (serialization failure, deadlock, shutdown) are not the message's
// fault and are not counted.

const ERROR_TEXT_LIMIT = 2000;
const TRANSIENT_SQLSTATE = /^(08|40|53|57)[0-9A-Z]{3}$/;

export function counted(c, err) {
  if (isConnectionLost(null, c) || err instanceof ConnectionLostError ||
    err instanceof KeyInProgressError) return false;
  return !(typeof err?.code === 'string' && TRANSIENT_SQLSTATE.test(err.code));
}

function errorDocument(err, attempt, dead, where) {
  let text = String(err?.message || err?.name || err).replaceAll('\0', '\ufffd');
  if (text.length > ERROR_TEXT_LIMIT) text = `${text.slice(0, ERROR_TEXT_LIMIT)}...`;
  const doc = { error: text, type: err?.name ?? typeof err, attempt, dead };
  if (typeof err?.code === 'string' && /^[0-9A-Z]{5}$/.test(err.code)) doc.sqlstate = err.code;
  return { ...doc, ...where };
}

async function undoQuietly(c, sql) {
  if (isConnectionLost(null, c)) return;
  try {
    await c.query(sql);
  } catch {
    // the connection is broken: the server has rolled back already
  }
}

// fn() in a transaction of its own, or a savepoint inside the caller's.
async function ownTransaction(c, fn) {
  const nested = transactionStatus(c) === 'T';
  await query(c, nested ? FAILURE_SAVEPOINT.open : BEGIN);
  let out;
  try {
    out = await fn();
  } catch (err) {
    await undoQuietly(c, nested ? FAILURE_SAVEPOINT.undo : ROLLBACK);
    throw err;
  }
  await query(c, nested ? FAILURE_SAVEPOINT.close : COMMIT);
  return out;
}

// Reserves the key and fails it with err's error: { outcome, attempt, doc } (doc null unless
// the outcome is 'new'); whenDead() runs in the same transaction at the last attempt.
export function recordFailure(c, scope, key, err, { maxAttempts, retention, wait, where = {},
  whenDead = async () => {} }) {
  return ownTransaction(c, async () => {
    const r = await reserve(c, scope, key, null, { lockTtl: '1 minute', retention, wait });
    if (r.outcome !== 'new') return { outcome: r.outcome, attempt: r.attempt, doc: null };
    const doc = errorDocument(err, r.attempt, r.attempt >= maxAttempts, where);
    await query(c, FAIL_STAMPED, [scope, key, JSON.stringify(doc), r.attempt]);
    if (doc.dead) await whenDead();
    return { outcome: r.outcome, attempt: r.attempt, doc };
  });
}

export function checkMaxAttempts(maxAttempts) {
  if (maxAttempts !== undefined && maxAttempts !== null &&
    !(Number.isSafeInteger(maxAttempts) && maxAttempts >= 1))
    throw new TypeError('maxAttempts must be a positive integer (or null)');
}

// consumeOnceBare (work(client) in one transaction with claim_once: true if it ran, false for
// a redelivery), and with { maxAttempts } a poison message does not come back for
// ever: each failure of work is recorded on the key, and the maxAttempts-th throws
// PoisonMessageError (reject the message without requeue, to a dead-letter exchange). A message
// redelivered after it was recorded dead (a replay after a fix) gets one more attempt;
// idempotency.forget(scope, key) first gives it maxAttempts again.
export async function consumeOnce(c, scope, key, work, options = {}) {
  const { maxAttempts = null, retention = DEFAULT_RETENTION, wait = DEFAULT_WAIT } = options;
  checkMaxAttempts(maxAttempts);
  if (maxAttempts === null) return consumeOnceBare(c, scope, key, work, options);
  let ran = false;
  try {
    return await consumeOnceBare(c, scope, key, async (tx) => {
      ran = true;
      await work(tx);
    }, options);
  } catch (err) {
    if (!ran || !counted(c, err)) throw err;
    const { outcome, attempt, doc } = await recordFailure(c, scope, key, err,
      { maxAttempts, retention, wait });
    if (outcome === 'replay') return false; // a competing consumer has applied it meanwhile
    if (doc?.dead) throw new PoisonMessageError(scope, key, attempt, doc, { cause: err });
    throw err;
  }
}

// The key applyOnce({ maxAttempts }) counts a stream position's failures on (scope: the
// consumer): "<partition>@<position>", or the partition's SHA-256 in hex in its place when that
// would pass the 255 bytes of a key.
export function positionKey(partition, position) {
  const key = `${partition}@${position}`;
  if (Buffer.byteLength(key, 'utf8') <= 255) return key;
  return `${createHash('sha256').update(String(partition), 'utf8').digest('hex')}@${position}`;
}

// streams.js's applyOnce (fn(client) in one transaction with accept: true if it ran, false
// for a position at or below the watermark), and with { maxAttempts } a position whose fn fails
// again and again does not stop the partition: each failure is recorded on the key
// (consumer, positionKey(partition, position)), kept for retention; the maxAttempts-th moves
// the watermark past the position in the same transaction and throws PoisonMessageError
// (acknowledge the message and go on: the failure stays in idempotency.failed_keys).
export async function applyOnce(c, consumer, partition, position, fn, options = {}) {
  const { maxAttempts = null, retention = DEFAULT_RETENTION, strict = false } = options;
  checkMaxAttempts(maxAttempts);
  if (maxAttempts === null) return streams.applyOnce(c, consumer, partition, position, fn, { strict });
  let ran = false;
  try {
    return await streams.applyOnce(c, consumer, partition, position, async (tx) => {
      ran = true;
      await fn(tx);
    }, { strict });
  } catch (err) {
    if (!ran || !counted(c, err)) throw err;
    const key = positionKey(partition, position);
    checkNames(consumer, key);
    const { attempt, doc } = await recordFailure(c, consumer, key, err, {
      maxAttempts, retention, wait: DEFAULT_WAIT,
      where: { partition: String(partition), position: String(position) },
      whenDead: () => accept(c, consumer, partition, position),
    });
    if (doc?.dead) {
      throw new PoisonMessageError(consumer, key, attempt, doc, { partition, position, cause: err });
    }
    throw err;
  }
}
