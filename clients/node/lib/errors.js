// Typed errors: one class per SQLSTATE of the error table of docs/reference.md, the reserve outcomes an HTTP
// layer answers with 409 / 422, and the misuse of a connection.

import { IdempotencyError, sqlstateError } from './error_base.js';
import {
  InvalidParameterValueError, OUTCOME_SQLSTATES, ProgramLimitExceededError, SQLSTATE_ALIASES,
  TRANSLATED_ERRORS, TransactionAbortedError,
} from './spec.js';

export { IdempotencyError } from './error_base.js';
// The classes of one SQLSTATE with nothing more to them (NullValueNotAllowedError,
// StaleAttemptError, ...), generated from test/vectors/client.json.
export {
  ArraySubscriptError, CardinalityViolationError, DuplicateObjectError, FeatureNotSupportedError,
  InvalidJsonError, InvalidParameterValueError, InvalidTransactionTerminationError,
  LockNotAvailableError, NullValueNotAllowedError, ObjectInUseError,
  ObjectNotInPrerequisiteStateError, ProgramLimitExceededError, QueryCanceledError,
  ReadOnlySqlTransactionError, ResultConflictError, SequenceGeneratorLimitExceededError,
  SerializationFailureError, StaleAttemptError, StatementSyntaxError, TransactionAbortedError,
  TransactionOpenError, UndefinedObjectError,
} from './spec.js';

// The session's client_encoding is not UTF8 (the application ran SET client_encoding on this
// connection): node-postgres sends every value as UTF-8, which the server would read as that
// other encoding and store as other characters. Refused before anything is sent.
export const ClientEncodingError = sqlstateError('ClientEncodingError', '22021',
  "the session's client_encoding is not UTF8, the encoding node-postgres sends");

// The connection to the server broke (the server restarted or was stopped, the backend was
// terminated, the network cut it, or no connection could be made). The transaction in flight
// is rolled back by the server, unless the break came while COMMIT was under way: then it
// may have committed, and a retry with the same key tells which (it replays). httpStatus 503.
export class ConnectionLostError extends IdempotencyError {
  static sqlstate = '08006';
  static description = 'the connection to the server was lost or could not be made';
  get httpStatus() { return 503; }
}

// A server error of these SQLSTATEs becomes the class (the aliases count as the SQLSTATE they
// stand for; claim_once's IK003 / IK004, the outcomes' errors, are added below).
export const BY_SQLSTATE = Object.fromEntries(TRANSLATED_ERRORS.map((cls) => [cls.sqlstate, cls]));
for (const [alias, code] of Object.entries(SQLSTATE_ALIASES)) BY_SQLSTATE[alias] = BY_SQLSTATE[code];

// For a server error of an unlisted SQLSTATE: a typed error, or undefined. lib/versions.js sets
// it (a missing function or schema of the extension), so that this module need not import it.
let unlistedTranslator = () => undefined;
export function setUnlistedTranslator(fn) {
  unlistedTranslator = fn;
}

// The typed error for a server error of pg (the error itself for an unlisted SQLSTATE, or for
// something that is not a server error). connection.js's translate calls it once it has told a
// lost connection apart.
export function typedError(err) {
  const cls = typeof err.code === 'string' ? BY_SQLSTATE[err.code] : undefined;
  if (err.severity === undefined) return err;
  if (cls === undefined) return unlistedTranslator(err) ?? err;
  if (cls.prototype instanceof OutcomeError) {
    // claimOnce's IK003 / IK004: reserve's outcomes as errors (no reservation to carry).
    const typed = new cls(null, null, null, err.message);
    return Object.assign(typed, { code: err.code, detail: err.detail, hint: err.hint, cause: err });
  }
  const typed = new cls(err.message, { code: err.code, detail: err.detail, hint: err.hint,
    cause: err });
  if (cls === TransactionAbortedError && typed.hint === undefined)
    typed.hint = 'roll the transaction back before calling the idempotency helpers';
  return typed;
}

// ---- reserve outcomes that are not errors of the server ----

// A reserve that did not give the caller the key. httpStatus is what to answer.
export class OutcomeError extends IdempotencyError {
  constructor(scope, key, reservation, message) {
    super(message);
    this.scope = scope;
    this.key = key;
    this.reservation = reservation;
  }
}

// Another holder's claim is live: 409, retry after retryAfter seconds (the time left on the
// holder's lease, or 1 while the holder is still inside its transaction). Also the server's
// IK003 (claim_once of a key another holder has; reservation is null).
export class KeyInProgressError extends OutcomeError {
  static outcome = 'in_progress';
  get httpStatus() { return 409; }
  get retryAfter() {
    const until = this.reservation?.lockedUntil;
    if (!until) return 1;
    return Math.max(1, Math.ceil((until.getTime() - Date.now()) / 1000));
  }
}

// The key was used before with a different request: 422.
export class KeyMismatchError extends OutcomeError {
  static outcome = 'mismatch';
  get httpStatus() { return 422; }
}

// The key embeds a creation time older than the retention window: 422. Also the server's IK004
// (claim_once of such a key; reservation is null).
export class KeyTooOldError extends OutcomeError {
  static outcome = 'too_old';
  get httpStatus() { return 422; }
}

const OUTCOME_ERRORS = { in_progress: KeyInProgressError, too_old: KeyTooOldError };
for (const [code, outcome] of Object.entries(OUTCOME_SQLSTATES)) BY_SQLSTATE[code] = OUTCOME_ERRORS[outcome];
Object.freeze(BY_SQLSTATE);

// ---- refused by the helpers before any query ----

// A key or scope the server would refuse, refused before any query: KeyTooLongError (over 255
// bytes, the server's 54000) or KeyEmptyError (22023). answerFor makes it a 400 whose error is
// `httpError`: idempotency_key_malformed or idempotency_scope_malformed.
export class KeyTooLongError extends ProgramLimitExceededError {
  constructor(what, bytes) {
    super(`the idempotency ${what} is ${bytes} bytes, over the limit of 255`);
    this.httpError = `idempotency_${what}_malformed`;
  }
  get httpStatus() { return 400; }
}

export class KeyEmptyError extends InvalidParameterValueError {
  constructor(what) {
    super(`the idempotency ${what} must not be empty`);
    this.httpError = `idempotency_${what}_malformed`;
  }
  get httpStatus() { return 400; }
}

// applyOnce(..., { strict: true }) got a position below the partition's watermark: a message
// that arrived out of order (or an older one redelivered), which accept would skip without a
// word. Nothing was applied; watermark is the stored position (a bigint).
export class PositionBelowWatermarkError extends IdempotencyError {
  constructor(consumer, partition, position, watermark) {
    super(`position ${position} of partition "${partition}" (consumer "${consumer}") is below ` +
      `its watermark ${watermark}`, {
      hint: 'accept fits partitions delivered in order; for messages that arrive out of order, ' +
        'reserve one key per message id instead',
    });
    Object.assign(this, { consumer, partition, position, watermark });
  }
}

// consumeOnce / applyOnce with maxAttempts: the message's work failed for the attempt-th time,
// its last allowed one. The failure is recorded on the key (scope, key; idempotency.failed_keys
// lists it as dead, with error, the document stored), and for a stream the watermark has moved
// past position: dead-letter the message (a queue: reject it without requeue; a stream:
// acknowledge it and go on). cause is the work's error. Replaying it after a fix:
// docs/consumers.md, "Poison messages".
export class PoisonMessageError extends IdempotencyError {
  constructor(scope, key, attempt, error, { partition = null, position = null, cause } = {}) {
    const where = partition !== null ? `position ${position} of partition "${partition}"`
      : `message "${key}"`;
    super(`${where} (consumer "${scope}") failed ${attempt} times: ${error?.error}`,
      { hint: 'dead-letter it; idempotency.failed_keys lists it with its error', cause });
    Object.assign(this, { scope, key, attempt, error, partition, position });
  }
}
