// @idempotency/client: the Node.js client of the idempotency PostgreSQL extension.
export {
  ArraySubscriptError, BY_SQLSTATE, CardinalityViolationError, ClientEncodingError,
  ConnectionLostError, InvalidTransactionTerminationError, ObjectInUseError, StatementSyntaxError,
  DuplicateObjectError, FeatureNotSupportedError, IdempotencyError, InvalidJsonError,
  InvalidParameterValueError, KeyEmptyError, KeyInProgressError, KeyMismatchError,
  KeyTooLongError, KeyTooOldError, LockNotAvailableError, NullValueNotAllowedError,
  ObjectNotInPrerequisiteStateError, OutcomeError, PoisonMessageError,
  PositionBelowWatermarkError, ProgramLimitExceededError, QueryCanceledError,
  ReadOnlySqlTransactionError, ResultConflictError, SequenceGeneratorLimitExceededError,
  SerializationFailureError, setUnlistedTranslator, StaleAttemptError, TransactionAbortedError,
  TransactionOpenError, UndefinedObjectError,
} from './lib/errors.js';
export {
  canonicalJson, canonicalNumber, compareNames, fingerprint, fingerprintValue, MAX_DEPTH,
  MAX_DIGITS,
} from './lib/fingerprint.js';
export { isConnectionLost, query, translate } from './lib/connection.js';
export {
  checkpoint, complete, executeOnce, fail, forget, lookup, requestHash, reserve, reserveBegin,
  statementParam,
} from './lib/keys.js';
export { idempotent, runExternal, runOnce } from './lib/transactions.js';
export { configureTelemetry, telemetryAvailable } from './lib/telemetry.js';
export {
  accept, emit, formatLsn, lsnKey, lsnKeyParts, nextKey, parseLsn, watermark,
} from './lib/streams.js';
export {
  backoffDelay, IdempotentAction, idempotentFetch, IdempotentFetchError, isRetryableStatus,
  retryAfterMs, uuidv7, uuidv7Time,
} from './lib/action.js';
// applyOnce: streams.js's, with maxAttempts (poison messages).
export {
  applyOnce, claimOnce, consumeOnce, OutboxConsumer, positionKey,
} from './lib/consumer.js';
export {
  checkExtension, CLIENT_VERSION, Edition, EXTENSION_VERSIONS, ExtensionVersionError,
  serverEdition,
} from './lib/versions.js';
export {
  answerFor, IdempotencyKeyHeaderError, idempotencyMiddleware, parseIdempotencyKey, replayOf,
  STORED_MARK, storedAnswer,
} from './lib/middleware.js';
// BullMQ: a Worker processor that runs each job exactly once.
export { exactlyOnceProcessor, storedResult } from './lib/bullmq.js';
