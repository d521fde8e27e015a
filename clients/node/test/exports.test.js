// The public API by name: what index.js, lib/action.js, lib/fastify.js and lib/nestjs.js (the
// package's entry points) export at run time, and what their .d.ts files declare,
// against fixed lists. Moving code between the modules of lib/ must leave these lists as they
// are; a change to them is a change to the package's API.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import * as action from '../lib/action.js';
import * as fastify from '../lib/fastify.js';
import * as nestjs from '../lib/nestjs.js';
import * as api from '../index.js';

const ACTION = [
  'backoffDelay', 'IdempotentAction', 'idempotentFetch', 'IdempotentFetchError',
  'isRetryableStatus', 'retryAfterMs', 'uuidv7', 'uuidv7Time',
];

const FASTIFY = ['idempotencyPlugin'];
const FASTIFY_TYPES = ['IdempotencyPluginOptions'];

const NESTJS = ['IDEMPOTENCY_OPTIONS', 'IDEMPOTENT_ROUTE', 'Idempotency', 'IdempotencyInterceptor',
  'IdempotencyModule', 'Idempotent'];
const NESTJS_TYPES = ['IdempotencyModuleAsyncOptions', 'IdempotentOptions', 'IdempotentRequest'];

const INDEX = [
  ...ACTION,
  // errors
  'ArraySubscriptError', 'BY_SQLSTATE', 'CardinalityViolationError', 'ClientEncodingError',
  'ConnectionLostError', 'InvalidTransactionTerminationError', 'ObjectInUseError',
  'StatementSyntaxError',
  'DuplicateObjectError', 'FeatureNotSupportedError', 'IdempotencyError', 'InvalidJsonError',
  'InvalidParameterValueError', 'isConnectionLost', 'KeyEmptyError', 'KeyInProgressError',
  'KeyMismatchError', 'KeyTooLongError', 'KeyTooOldError', 'LockNotAvailableError',
  'NullValueNotAllowedError', 'ObjectNotInPrerequisiteStateError', 'OutcomeError',
  'PoisonMessageError', 'PositionBelowWatermarkError', 'ProgramLimitExceededError',
  'QueryCanceledError', 'ReadOnlySqlTransactionError', 'ResultConflictError',
  'SequenceGeneratorLimitExceededError', 'SerializationFailureError', 'setUnlistedTranslator',
  'StaleAttemptError', 'TransactionAbortedError', 'TransactionOpenError', 'translate',
  'UndefinedObjectError',
  // fingerprint
  'canonicalJson', 'canonicalNumber', 'compareNames', 'fingerprint', 'fingerprintValue',
  'MAX_DEPTH', 'MAX_DIGITS',
  // key calls and request helpers
  'checkpoint', 'complete', 'executeOnce', 'fail', 'forget', 'idempotent', 'lookup', 'query',
  'requestHash', 'reserve', 'reserveBegin', 'runExternal', 'runOnce', 'statementParam',
  // telemetry
  'configureTelemetry', 'telemetryAvailable',
  // streams and consumers
  'accept', 'applyOnce', 'claimOnce', 'consumeOnce', 'emit', 'formatLsn', 'lsnKey',
  'lsnKeyParts', 'nextKey', 'OutboxConsumer', 'parseLsn', 'positionKey', 'watermark',
  // job frameworks
  'exactlyOnceProcessor', 'storedResult',
  // versions
  'checkExtension', 'CLIENT_VERSION', 'Edition', 'EXTENSION_VERSIONS', 'ExtensionVersionError',
  'serverEdition',
  // middleware
  'answerFor', 'IdempotencyKeyHeaderError', 'idempotencyMiddleware', 'parseIdempotencyKey',
  'replayOf', 'STORED_MARK', 'storedAnswer',
];

// The names the typings declare as types only (interfaces and type aliases).
const ACTION_TYPES = [
  'AttemptReport', 'BackoffOptions', 'IdempotentAnswer', 'IdempotentFetchOptions', 'SavedAction',
];
const INDEX_TYPES = [
  ...ACTION_TYPES,
  'Answer', 'ApplyOnceOptions', 'Attempt', 'Body', 'ClaimOnceOptions', 'ConsumeOnceOptions',
  'ErrorFields', 'ExactlyOnceJob', 'ExactlyOnceProcessorOptions', 'ExcludePaths', 'FingerprintOptions', 'HttpAnswer', 'IdempotencyContext',
  'Interval', 'JsonValue', 'KeyRecord', 'Message', 'MiddlewareOptions', 'Outcome',
  'OutboxConsumerOptions', 'Phase', 'PoisonMessageRecord', 'PoolClientLike', 'PoolLike',
  'Position', 'QueryConfigLike', 'Queryable', 'QueryResultLike', 'Reservation',
  'RequestOptions', 'ReserveOptions', 'Result', 'StatementOptions', 'StatementParam',
  'StoredAnswer', 'TelemetryOptions',
];

const sorted = (names) => [...names].sort();

// { values, types }: the names a declaration file exports (re-exports followed), as the
// TypeScript compiler reads it.
function declared(file) {
  const path = fileURLToPath(new URL(`../${file}`, import.meta.url));
  const program = ts.createProgram([path], { noEmit: true, types: ['node'] });
  const checker = program.getTypeChecker();
  const module = checker.getSymbolAtLocation(program.getSourceFile(path));
  const values = [];
  const types = [];
  for (const symbol of checker.getExportsOfModule(module)) {
    const target = symbol.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(symbol) : symbol;
    (target.flags & ts.SymbolFlags.Value ? values : types).push(symbol.name);
  }
  return { values: sorted(values), types: sorted(types) };
}

test('index.js exports exactly the listed names', () => {
  assert.deepEqual(sorted(Object.keys(api)), sorted(INDEX));
});

test('lib/action.js (@idempotency/client/action) exports exactly the listed names', () => {
  assert.deepEqual(sorted(Object.keys(action)), sorted(ACTION));
});

test('index.d.ts declares exactly the listed names: the run-time ones as values', () => {
  const { values, types } = declared('index.d.ts');
  assert.deepEqual(values, sorted(INDEX));
  assert.deepEqual(types, sorted(INDEX_TYPES));
});

test('action.d.ts declares exactly the listed names: the run-time ones as values', () => {
  const { values, types } = declared('action.d.ts');
  assert.deepEqual(values, sorted(ACTION));
  assert.deepEqual(types, sorted(ACTION_TYPES));
});

test('lib/fastify.js (@idempotency/client/fastify) exports exactly the listed names', () => {
  assert.deepEqual(sorted(Object.keys(fastify)), sorted(FASTIFY));
});

test('fastify.d.ts declares exactly the listed names: the run-time ones as values', () => {
  const { values, types } = declared('fastify.d.ts');
  assert.deepEqual(values, sorted(FASTIFY));
  assert.deepEqual(types, sorted(FASTIFY_TYPES));
});

test('lib/nestjs.js (@idempotency/client/nestjs) exports exactly the listed names', () => {
  assert.deepEqual(sorted(Object.keys(nestjs)), sorted(NESTJS));
});

test('nestjs.d.ts declares exactly the listed names: the run-time ones as values', () => {
  const { values, types } = declared('nestjs.d.ts');
  assert.deepEqual(values, sorted(NESTJS));
  assert.deepEqual(types, sorted(NESTJS_TYPES));
});
