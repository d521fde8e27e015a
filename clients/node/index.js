// @idempotency/client: the Node.js client of the idempotency PostgreSQL extension.
export * from './lib/errors.js';
export {
  canonicalJson, canonicalNumber, compareNames, fingerprint, fingerprintValue, MAX_DEPTH,
  MAX_DIGITS,
} from './lib/fingerprint.js';
export {
  accept, checkpoint, claimOnce, complete, emit, fail, forget, formatLsn, idempotent, lookup,
  lsnKey, lsnKeyParts, nextKey, parseLsn, query, requestHash, reserve, reserveBegin, runExternal,
  runOnce, watermark,
} from './lib/client.js';
export {
  backoffDelay, IdempotentAction, idempotentFetch, IdempotentFetchError, isRetryableStatus,
  retryAfterMs, uuidv7, uuidv7Time,
} from './lib/action.js';
// consumeOnce / applyOnce with maxAttempts (poison messages) wrap client.js's.
export { applyOnce, consumeOnce, OutboxConsumer, positionKey } from './lib/consumer.js';
export {
  checkExtension, CLIENT_VERSION, Edition, EXTENSION_VERSIONS, ExtensionVersionError,
  serverEdition,
} from './lib/versions.js';
export {
  answerFor, IdempotencyKeyHeaderError, idempotencyMiddleware, parseIdempotencyKey, replayOf,
  STORED_MARK, storedAnswer,
} from './lib/middleware.js';
