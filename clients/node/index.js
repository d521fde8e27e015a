// @idempotency/client: the Node.js client of the idempotency PostgreSQL extension.
export * from './lib/errors.js';
export {
  canonicalJson, canonicalNumber, compareNames, fingerprint, fingerprintValue, MAX_DEPTH,
  MAX_DIGITS,
} from './lib/fingerprint.js';
export {
  accept, applyOnce, checkpoint, claimOnce, complete, consumeOnce, emit, fail, forget, formatLsn,
  idempotent, lookup, lsnKey, lsnKeyParts, nextKey, parseLsn, query, requestHash, reserve,
  reserveBegin, runExternal, runOnce, watermark,
} from './lib/client.js';
export {
  backoffDelay, IdempotentAction, idempotentFetch, IdempotentFetchError, isRetryableStatus,
  retryAfterMs, uuidv7, uuidv7Time,
} from './lib/action.js';
export { OutboxConsumer } from './lib/consumer.js';
export {
  answerFor, IdempotencyKeyHeaderError, idempotencyMiddleware, parseIdempotencyKey, replayOf,
  STORED_MARK, storedAnswer,
} from './lib/middleware.js';
