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
import { setTimeout as sleep } from 'node:timers/promises';
import { applyOnce, lsnKey, lsnKeyParts, query, watchConnection } from './client.js';
import { ConnectionLostError, isConnectionLost } from './errors.js';

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
      const ran = await applyOnce(this.target, this.consumer, this.partition, message.key,
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
