// The reference outbox consumer: reads an `idempotency` logical slot and confirms a transaction
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
import * as client from './client.js';
import { lsnKey, lsnKeyParts, query, transactionStatus, watchConnection } from './client.js';
import {
  ConnectionLostError, isConnectionLost, KeyInProgressError, PoisonMessageError,
} from './errors.js';

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
    const { rows } = await query(this.source,
      'SELECT 1 FROM pg_replication_slots WHERE slot_name = $1', [this.slot]);
    if (rows.length === 0 || !ifMissing) {
      await query(this.source,
        "SELECT pg_create_logical_replication_slot($1, 'idempotency')", [this.slot]);
    }
  }

  async peek() {
    const options = ['framing', 'on'];
    if (this.topics) options.push('topics', this.topics);
    const params = options.map((_, i) => `$${i + 3}`).join(', ');
    const { rows } = await query(this.source,
      `SELECT data FROM pg_logical_slot_peek_changes($1, NULL, $2, ${params})`,
      [this.slot, this.batch, ...options]);
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
        await query(this.source, 'SELECT pg_replication_slot_advance($1, $2::pg_lsn)',
          [this.slot, line.end_lsn]);
        await this.onPhase('advanced', line.end_lsn);
        continue;
      }
      const { commitLsn, lsn } = lsnKeyParts(line.key);
      const message = {
        key: lsnKey(commitLsn, lsn), topic: line.topic, payload: line.payload, commitLsn, lsn,
        xid: line.xid, commitTime: line.commit_time,
      };
      const ran = await client.applyOnce(this.target, this.consumer, this.partition, message.key,
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
const FAIL = `SELECT idempotency.fail($1, $2, $3::jsonb || pg_catalog.jsonb_build_object(
    'failed_at', pg_catalog.now()), $4::integer)`;

function counted(c, err) {
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
  await query(c, nested ? 'SAVEPOINT idempotency_failure' : 'BEGIN');
  let out;
  try {
    out = await fn();
  } catch (err) {
    await undoQuietly(c, nested
      ? 'ROLLBACK TO SAVEPOINT idempotency_failure; RELEASE SAVEPOINT idempotency_failure'
      : 'ROLLBACK');
    throw err;
  }
  await query(c, nested ? 'RELEASE SAVEPOINT idempotency_failure' : 'COMMIT');
  return out;
}

// Reserves the key and fails it with err's error: { outcome, attempt, doc } (doc null unless
// the outcome is 'new'); whenDead() runs in the same transaction at the last attempt.
function recordFailure(c, scope, key, err, { maxAttempts, retention, wait, where = {},
  whenDead = async () => {} }) {
  return ownTransaction(c, async () => {
    const r = await client.reserve(c, scope, key, null, { lockTtl: '1 minute', retention, wait });
    if (r.outcome !== 'new') return { outcome: r.outcome, attempt: r.attempt, doc: null };
    const doc = errorDocument(err, r.attempt, r.attempt >= maxAttempts, where);
    await query(c, FAIL, [scope, key, JSON.stringify(doc), r.attempt]);
    if (doc.dead) await whenDead();
    return { outcome: r.outcome, attempt: r.attempt, doc };
  });
}

function checkMaxAttempts(maxAttempts) {
  if (maxAttempts !== undefined && maxAttempts !== null &&
    !(Number.isSafeInteger(maxAttempts) && maxAttempts >= 1))
    throw new TypeError('maxAttempts must be a positive integer (or null)');
}

// client.js's consumeOnce (work(client) in one transaction with claim_once: true if it ran,
// false for a redelivery), and with { maxAttempts } a poison message does not come back for
// ever: each failure of work is recorded on the key, and the maxAttempts-th throws
// PoisonMessageError (reject the message without requeue, to a dead-letter exchange). A message
// redelivered after it was recorded dead (a replay after a fix) gets one more attempt;
// idempotency.forget(scope, key) first gives it maxAttempts again.
export async function consumeOnce(c, scope, key, work, options = {}) {
  const { maxAttempts = null, retention = '24 hours', wait = '0' } = options;
  checkMaxAttempts(maxAttempts);
  if (maxAttempts === null) return client.consumeOnce(c, scope, key, work, options);
  let ran = false;
  try {
    return await client.consumeOnce(c, scope, key, async (tx) => {
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

// client.js's applyOnce (fn(client) in one transaction with accept: true if it ran, false for
// a position at or below the watermark), and with { maxAttempts } a position whose fn fails
// again and again does not stop the partition: each failure is recorded on the key
// (consumer, positionKey(partition, position)), kept for retention; the maxAttempts-th moves
// the watermark past the position in the same transaction and throws PoisonMessageError
// (acknowledge the message and go on: the failure stays in idempotency.failed_keys).
export async function applyOnce(c, consumer, partition, position, fn, options = {}) {
  const { maxAttempts = null, retention = '24 hours', strict = false } = options;
  checkMaxAttempts(maxAttempts);
  if (maxAttempts === null) return client.applyOnce(c, consumer, partition, position, fn, { strict });
  let ran = false;
  try {
    return await client.applyOnce(c, consumer, partition, position, async (tx) => {
      ran = true;
      await fn(tx);
    }, { strict });
  } catch (err) {
    if (!ran || !counted(c, err)) throw err;
    const key = positionKey(partition, position);
    client.checkNames(consumer, key);
    const { attempt, doc } = await recordFailure(c, consumer, key, err, {
      maxAttempts, retention, wait: '0',
      where: { partition: String(partition), position: String(position) },
      whenDead: () => client.accept(c, consumer, partition, position),
    });
    if (doc?.dead) {
      throw new PoisonMessageError(consumer, key, attempt, doc, { partition, position, cause: err });
    }
    throw err;
  }
}
