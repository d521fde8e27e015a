// Streams and the outbox: accept and watermark (a partition's position, moved in the same
// transaction as the message's effects), applyOnce, next_key, emit, and the outbox's LSN keys.
import { firstValue, query } from './connection.js';
import { PositionBelowWatermarkError } from './errors.js';
import { json } from './keys.js';
import { EMIT, NEXT_KEY, PREPARED, WATERMARK } from './statements.js';
import { transactionWith } from './transactions.js';

const UUID = /^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$/i;

function positionParam(position) {
  if (typeof position === 'bigint' || Number.isSafeInteger(position))
    return [String(position), 'bigint'];
  if (typeof position === 'string' && /^[0-9]+$/.test(position)) return [position, 'bigint'];
  if (typeof position === 'string' && UUID.test(position)) return [position, 'uuid'];
  throw new TypeError('position must be a bigint, a safe integer, or a UUID string');
}

// accept's statement ({ name, text } of PREPARED) for position, and its values.
function acceptQuery(consumer, partition, position) {
  const [value, type] = positionParam(position);
  return [type === 'uuid' ? PREPARED.accept_uuid : PREPARED.accept_bigint,
    [consumer, partition, value]];
}

// idempotency.accept: true if position is above the watermark (and moves it there).
export async function accept(client, consumer, partition, position) {
  const [{ text }, values] = acceptQuery(consumer, partition, position);
  return firstValue(await query(client, text, values));
}

// The stored position as a bigint (a 128-bit position for UUID keys), or null.
export async function watermark(client, consumer, partition) {
  const mark = firstValue(await query(client, WATERMARK, [consumer, partition]));
  return mark === null ? null : BigInt(mark);
}

const positionValue = (p) => (typeof p === 'string' && UUID.test(p)
  ? BigInt(`0x${p.replaceAll('-', '')}`) : BigInt(p));

// Runs fn(client) in one transaction with accept(consumer, partition, position): true if it
// ran, false for a position at or below the watermark (a redelivery). An error in fn rolls the
// watermark move back too, so the message is applied again next time. { strict: true }: a
// position below the watermark (not equal to it) throws PositionBelowWatermarkError instead of
// returning false, for partitions that must arrive in order.
export async function applyOnce(client, consumer, partition, position, fn, { strict = false } = {}) {
  const [statement, values] = acceptQuery(consumer, partition, position);
  return transactionWith(client, statement, values, async (accepted) => {
    if (!accepted) {
      if (strict) {
        const mark = await watermark(client, consumer, partition);
        if (mark !== null && positionValue(position) < mark)
          throw new PositionBelowWatermarkError(consumer, partition, position, mark);
      }
      return false;
    }
    await fn(client);
    return true;
  });
}

// idempotency.next_key: the stream's next key as a bigint.
export async function nextKey(client, stream) {
  return BigInt(firstValue(await query(client, NEXT_KEY, [stream])));
}

// idempotency.emit: the message's LSN as a bigint (formatLsn prints it as pg_lsn does).
export async function emit(client, topic, payload) {
  return parseLsn(firstValue(await query(client, EMIT, [topic, json(payload)])));
}

const MASK64 = (1n << 64n) - 1n;

// '16/B374D848' -> 0x16B374D848n
export function parseLsn(text) {
  const m = /^([0-9A-Fa-f]{1,8})\/([0-9A-Fa-f]{1,8})$/.exec(text);
  if (m === null) throw new TypeError(`not an LSN: "${text}"`);
  return (BigInt(`0x${m[1]}`) << 32n) | BigInt(`0x${m[2]}`);
}

export function formatLsn(lsn) {
  const v = BigInt(lsn);
  return `${(v >> 32n).toString(16).toUpperCase()}/${(v & 0xffffffffn).toString(16).toUpperCase()}`;
}

// The outbox key (as idempotency.lsn_key): commit LSN then LSN, each 64-bit big-endian, as a
// UUID string.
export function lsnKey(commitLsn, lsn) {
  const c = BigInt(commitLsn);
  const l = BigInt(lsn);
  if (c < 0n || l < 0n || c > MASK64 || l > MASK64) throw new RangeError('an LSN is 64 bits');
  if (l > c) throw new RangeError('lsn must not exceed commitLsn');
  const hex = ((c << 64n) | l).toString(16).padStart(32, '0');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

// { commitLsn, lsn } of an outbox key (a UUID string, with or without dashes).
export function lsnKeyParts(key) {
  if (typeof key !== 'string' || !UUID.test(key)) throw new TypeError(`not a UUID: "${key}"`);
  const v = BigInt(`0x${key.replaceAll('-', '')}`);
  return { commitLsn: v >> 64n, lsn: v & MASK64 };
}
