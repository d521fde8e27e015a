// Type declarations of @idempotency/client. The functions take any pg client (pg.Client, a
// pool's client); Queryable is the part of it they use, so @types/pg is not needed.
import type { IncomingMessage, ServerResponse } from 'node:http';

// The browser-safe helper (also '@idempotency/client/action'): a key per user action, retries.
export {
  backoffDelay, IdempotentAction, idempotentFetch, IdempotentFetchError, isRetryableStatus,
  retryAfterMs, uuidv7, uuidv7Time,
} from './action.js';
export type {
  AttemptReport, BackoffOptions, IdempotentAnswer, IdempotentFetchOptions, SavedAction,
} from './action.js';

export interface QueryResultLike<R = any> {
  rows: R[];
}
/** A query as pg takes it: name makes it a prepared statement, types its row parsers. */
export interface QueryConfigLike {
  text: string;
  values?: unknown[];
  name?: string;
  types?: { getTypeParser(oid: number, format?: string): (text: string) => unknown };
}
export interface Queryable {
  query(text: string, values?: unknown[]): Promise<QueryResultLike>;
  query(config: QueryConfigLike): Promise<QueryResultLike>;
  /** 'I' idle, 'T' in a transaction, 'E' in a failed one (pg 8.14 and later). */
  getTransactionStatus?(): string | null;
}
export interface PoolClientLike extends Queryable {
  release(err?: Error | boolean): void;
}
export interface PoolLike {
  connect(): Promise<PoolClientLike>;
  /** A pg.Pool's: with pipeline true, the statement form shares its connections. */
  options?: { pipeline?: boolean; max?: number };
}

/** A JSON value as the fingerprint accepts it. */
export type JsonValue =
  | null | boolean | number | bigint | string | JsonValue[] | { [name: string]: JsonValue | undefined }
  | { toJSON(key?: string): unknown };
/** A JSON text (a string, or UTF-8 bytes), or a value (not a string: that is a text). */
export type Body = string | Uint8Array | JsonValue;

/** Dotted member paths left out of the fingerprint, e.g. ['sent_at', 'meta.trace_id']. */
export type ExcludePaths = readonly string[] | ReadonlySet<string>;

export interface FingerprintOptions {
  exclude?: ExcludePaths;
  /** true: a string is a JSON string value, not a JSON text. */
  asValue?: boolean;
}

/** SHA-256 of the canonical form (docs/fingerprint.md): equal to SQL fingerprint(body::jsonb). */
export function fingerprint(body: Body, options?: FingerprintOptions): Buffer;
export function fingerprintValue(value: JsonValue, options?: { exclude?: ExcludePaths }): Buffer;
export function canonicalJson(body: Body, options?: FingerprintOptions): Buffer;
export function canonicalNumber(text: string): string;
export function compareNames(a: string, b: string): number;
export const MAX_DEPTH: number;
export const MAX_DIGITS: number;

// ---- errors ----

export interface ErrorFields {
  code?: string;
  detail?: string;
  hint?: string;
  cause?: unknown;
}
export class IdempotencyError extends Error {
  constructor(message: string, fields?: ErrorFields);
  /** The SQLSTATE. */
  code: string;
  detail?: string;
  hint?: string;
  static sqlstate?: string;
  static description?: string;
}
export class NullValueNotAllowedError extends IdempotencyError {}
export class InvalidParameterValueError extends IdempotencyError {}
export class ProgramLimitExceededError extends IdempotencyError {}
export class ArraySubscriptError extends IdempotencyError {}
export class ObjectNotInPrerequisiteStateError extends IdempotencyError {}
export class StaleAttemptError extends IdempotencyError {}
export class ResultConflictError extends IdempotencyError {}
export class ReadOnlySqlTransactionError extends IdempotencyError {}
export class SerializationFailureError extends IdempotencyError {}
export class LockNotAvailableError extends IdempotencyError {}
export class QueryCanceledError extends IdempotencyError {}
export class UndefinedObjectError extends IdempotencyError {}
export class DuplicateObjectError extends IdempotencyError {}
export class SequenceGeneratorLimitExceededError extends IdempotencyError {}
export class FeatureNotSupportedError extends IdempotencyError {}
/** execute_once's statement is not one statement, or does not parse (42601). */
export class StatementSyntaxError extends IdempotencyError {}
/** execute_once's statement is transaction control (2D000). */
export class InvalidTransactionTerminationError extends IdempotencyError {}
/** execute_once's statement returned more than one row (21000). */
export class CardinalityViolationError extends IdempotencyError {}
/** execute_once called from a statement of execute_once for the same key (55006). */
export class ObjectInUseError extends IdempotencyError {}
export class InvalidJsonError extends IdempotencyError {}
export class TransactionAbortedError extends IdempotencyError {}
export class TransactionOpenError extends IdempotencyError {}
/** The session's client_encoding is not UTF8 (SET client_encoding on this connection): node-postgres
 * sends values as UTF-8. Refused before anything is sent; code 22021. */
export class ClientEncodingError extends IdempotencyError {}
/** The connection broke or could not be made (code 08006); answer 503 and retry. */
export class ConnectionLostError extends IdempotencyError {
  readonly httpStatus: 503;
}
/** Whether err means the connection is gone (or client, if given, is no longer queryable). */
export function isConnectionLost(err: unknown, client?: unknown): boolean;
export const BY_SQLSTATE: Readonly<Record<string, typeof IdempotencyError>>;
/** The typed error for a pg error (the error itself for an unlisted SQLSTATE);
 * ConnectionLostError for a connection that is gone. */
export function translate(err: unknown, client?: unknown): unknown;
/** For the package itself: what translate makes of an unlisted SQLSTATE (lib/versions.js sets
 * it to name the extension version a missing function or schema needs). */
export function setUnlistedTranslator(fn: (err: unknown) => Error | undefined): void;

/** This client's version. */
export const CLIENT_VERSION: string;
/** The oldest and the newest extension version this client works with. */
export const EXTENSION_VERSIONS: readonly [string, string];
/** The server's idempotency extension is missing or older than this client needs (code 42883
 * from checkExtension or for a missing function, 3F000 for a missing schema). */
export class ExtensionVersionError extends IdempotencyError {
  /** The installed version; null: not installed, or unknown. */
  readonly serverVersion: string | null;
  /** The oldest extension version that serves the call. */
  readonly needed: string | null;
  readonly httpStatus: 500;
}
/** The server's extension version once it is at least `needed` (default: the oldest this
 * client supports); rejects with ExtensionVersionError, naming both versions, otherwise. */
export function checkExtension(client: Queryable, needed?: string): Promise<string>;

/** What the server offers (serverEdition). */
export class Edition {
  /** 'extension' (the C++ extension), 'managed' (the managed edition), null (not installed). */
  readonly name: 'extension' | 'managed' | null;
  /** The installed version; null when not installed. */
  readonly version: string | null;
  /** 'extension' (CREATE EXTENSION, through pg_tle for the managed edition), 'script' (the
   * managed edition run with psql -f); null when not installed. */
  readonly installedAs: 'extension' | 'script' | null;
  /** The functions of schema idempotency this session may execute. */
  readonly functions: readonly string[];
  /** Whether idempotency.<fn> exists and this session may execute it. */
  offers(fn: string): boolean;
}
/** The edition of the database of client (a Client, PoolClient or Pool): one query the first
 * time, cached for that object (refresh: ask again). */
export function serverEdition(client: Queryable, options?: { refresh?: boolean }): Promise<Edition>;

/** reserve's outcomes as errors; also claimOnce's IK003 / IK004, with reservation null. */
export class OutcomeError extends IdempotencyError {
  constructor(scope: string, key: string, reservation: Reservation | null, message: string);
  scope: string;
  key: string;
  reservation: Reservation | null;
  readonly httpStatus: number;
  static outcome: Outcome;
}
export class KeyInProgressError extends OutcomeError {
  /** Seconds to put in Retry-After: what is left of the holder's lease (at least 1). */
  readonly retryAfter: number;
}
export class KeyMismatchError extends OutcomeError {}
export class KeyTooOldError extends OutcomeError {}
/** A key or scope over 255 bytes, refused before any query: a 400 for answerFor. */
export class KeyTooLongError extends ProgramLimitExceededError {
  constructor(what: 'key' | 'scope', bytes: number);
  httpError: 'idempotency_key_malformed' | 'idempotency_scope_malformed';
  readonly httpStatus: 400;
}
/** An empty key or scope, refused before any query: a 400 for answerFor. */
export class KeyEmptyError extends InvalidParameterValueError {
  constructor(what: 'key' | 'scope');
  httpError: 'idempotency_key_malformed' | 'idempotency_scope_malformed';
  readonly httpStatus: 400;
}
/** applyOnce(..., { strict: true }) with a position below the watermark. */
export class PositionBelowWatermarkError extends IdempotencyError {
  constructor(consumer: string, partition: string, position: Position, watermark: bigint);
  consumer: string;
  partition: string;
  position: Position;
  watermark: bigint;
}
/** consumeOnce / applyOnce with maxAttempts: the work failed for the last allowed time; the
 * failure is recorded dead on the key (idempotency.failed_keys), a stream's watermark moved
 * past position. Dead-letter the message; cause is the work's error. */
export class PoisonMessageError extends IdempotencyError {
  constructor(scope: string, key: string, attempt: number, error: PoisonMessageRecord,
    options?: { partition?: string | null; position?: Position | null; cause?: unknown });
  scope: string;
  key: string;
  attempt: number;
  error: PoisonMessageRecord;
  partition: string | null;
  position: Position | null;
}
/** The error document a consumer helper stores with fail(). */
export interface PoisonMessageRecord {
  error: string;
  type: string;
  attempt: number;
  dead: boolean;
  sqlstate?: string;
  partition?: string;
  position?: string;
}

// ---- keys ----

export type Outcome = 'new' | 'replay' | 'in_progress' | 'mismatch' | 'too_old';
/** An interval as PostgreSQL reads it ('5 minutes'), or seconds. */
export type Interval = string | number;

export interface Reservation {
  outcome: Outcome;
  statusCode: number | null;
  response: any;
  attempt: number | null;
  recoveryPoint: string | null;
  firstSeenAt: Date | null;
  lockedUntil: Date | null;
  expiresAt: Date | null;
}
export interface ReserveOptions {
  lockTtl?: Interval;
  retention?: Interval;
  wait?: Interval;
}
export interface KeyRecord {
  state: 'processing' | 'completed' | 'failed';
  statusCode: number | null;
  response: any;
  requestHash: Buffer | null;
  attempt: number;
  recoveryPoint: string | null;
  lastError: any;
  firstSeenAt: Date;
  completedAt: Date | null;
  lockedUntil: Date | null;
  expiresAt: Date;
}
/** What the work returns: an object, or a [statusCode, response] pair. */
export type Answer<R = any> = { statusCode: number; response?: R } | [number, R];
export interface Result<R = any> {
  statusCode: number;
  response: R;
  replayed: boolean;
  attempt: number | null;
}
export interface RequestOptions extends ReserveOptions {
  scope: string;
  key: string;
  /** Fingerprinted (a JSON text or a value); null / undefined: no fingerprint check. */
  request?: Body | null;
  exclude?: ExcludePaths;
}

export function query(client: Queryable, text: string, values?: unknown[]): Promise<QueryResultLike>;
export function requestHash(request: Body | null | undefined, exclude?: ExcludePaths): Buffer | null;
export function reserve(client: Queryable, scope: string, key: string,
  requestHash?: Buffer | null, options?: ReserveOptions): Promise<Reservation>;
/**
 * idempotency.reserve_begin on a client with no transaction open: the outcome 'new' leaves a
 * transaction open (complete + COMMIT follow in it), any other leaves none. prepare: as a
 * prepared statement (on pg's own client, complete's is parsed in the same round trip).
 */
export function reserveBegin(client: Queryable, scope: string, key: string,
  requestHash?: Buffer | null, options?: ReserveOptions & { prepare?: boolean }): Promise<Reservation>;
/** A statement parameter as execute_once receives it: text, or null for NULL. */
export type StatementParam = string | number | bigint | boolean | Date | Uint8Array |
  Record<string, unknown> | unknown[] | null | undefined;
/** The text the server reads for a statement parameter (null: NULL); TypeError for others. */
export function statementParam(value: StatementParam): string | null;
/**
 * idempotency.execute_once in the client's current transaction (autocommit with none open):
 * the claim, the statement (params bound as one text[]) and its answer in one round trip.
 * prepare (default true): with no transaction open, as a prepared statement (parsed once per
 * connection; after a 26000 / 42P05 from a pooler, unnamed for that client from then on).
 */
export function executeOnce(client: Queryable, scope: string, key: string, statement: string,
  params?: readonly StatementParam[], requestHash?: Buffer | null,
  options?: ReserveOptions & { statusCode?: number; prepare?: boolean }): Promise<Reservation>;
export function complete(client: Queryable, scope: string, key: string, statusCode: number,
  response: unknown, attempt?: number | null): Promise<void>;
export function fail(client: Queryable, scope: string, key: string, error?: unknown,
  attempt?: number | null): Promise<void>;
export function checkpoint(client: Queryable, scope: string, key: string, recoveryPoint: string,
  attempt?: number | null): Promise<void>;
export function lookup(client: Queryable, scope: string, key: string): Promise<KeyRecord | null>;
export function forget(client: Queryable, scope: string, key: string): Promise<boolean>;

/** reserve, work and complete in one transaction (a savepoint inside an open one). */
export function runOnce<R = any>(client: Queryable, options: RequestOptions,
  work: (client: Queryable, reservation: Reservation) => Answer<R> | Promise<Answer<R>>):
  Promise<Result<R>>;
export interface StatementOptions extends RequestOptions {
  /** One SQL statement with PostgreSQL's placeholders ($1, $2, ...). */
  statement: string;
  params?: readonly StatementParam[];
  /** The status stored with the statement's result (default 201). */
  status?: number;
}
/** The statement form: claim, statement and answer in one call of execute_once. */
export function runOnce<R = any>(client: Queryable, options: StatementOptions):
  Promise<Result<R>>;

type FromArgs<A extends unknown[], T> = T | ((...args: A) => T);
export function idempotent<A extends unknown[], R = any>(
  fn: (client: Queryable, ...args: A) => Answer<R> | Promise<Answer<R>>,
  options: ReserveOptions & {
    scope: FromArgs<A, string>;
    key: FromArgs<A, string>;
    request?: FromArgs<A, Body | null | undefined>;
    exclude?: ExcludePaths;
  }): (client: Queryable, ...args: A) => Promise<Result<R>>;

export interface Attempt {
  /** The fencing token. */
  attempt: number;
  /** The last checkpoint of an earlier attempt (a takeover), or null. */
  recoveryPoint: string | null;
  reservation: Reservation;
  /** Records progress in a transaction of its own. */
  checkpoint(recoveryPoint: string): Promise<void>;
}
/** The claim commits, work runs with no transaction open, complete is fenced by the attempt. */
export function runExternal<R = any>(client: Queryable,
  options: RequestOptions & {
    /** The business writes, in complete's transaction; may return the result to store. */
    finish?: (client: Queryable, result: { statusCode: number; response: R }) =>
      void | Answer<R> | Promise<void | Answer<R>>;
    /** What fail stores when work throws; default { error: err.name, message }. */
    failWith?: (err: unknown) => unknown;
  },
  work: (attempt: Attempt) => Answer<R> | Promise<Answer<R>>): Promise<Result<R>>;

// ---- telemetry ----

/**
 * OpenTelemetry through @opentelemetry/api (an optional peer dependency): a span per helper
 * call ("idempotency runOnce", ...) with the claim's outcome, attempt and round trips, and the
 * counter idempotency.client.claims and histogram idempotency.client.duration by outcome.
 */
export interface TelemetryOptions {
  /** Put the key on spans as idempotency.key (default false: keys may carry customer data). */
  recordKeys?: boolean;
  /** A TracerProvider to use instead of the global one. */
  tracerProvider?: { getTracer(name: string, version?: string): unknown };
  /** A MeterProvider to use instead of the global one. */
  meterProvider?: { getMeter(name: string, version?: string): unknown };
  /** false: measure nothing (default true when @opentelemetry/api is installed). */
  enabled?: boolean;
}
/** Sets the telemetry options; instruments are made again on the next call. */
export function configureTelemetry(options?: TelemetryOptions): void;
/** Whether @opentelemetry/api was found. */
export function telemetryAvailable(): boolean;

// ---- streams, watermarks, outbox ----

/** A bigint position, a safe integer, a decimal string, or a UUID (an outbox key). */
export type Position = bigint | number | string;
export function accept(client: Queryable, consumer: string, partition: string,
  position: Position): Promise<boolean>;
export function watermark(client: Queryable, consumer: string, partition: string):
  Promise<bigint | null>;
export interface ApplyOnceOptions {
  /** A position below the watermark throws PositionBelowWatermarkError. */
  strict?: boolean;
  /** Failures of fn counted per position; the last one moves the watermark past it and throws
   * PoisonMessageError (default null: not counted). */
  maxAttempts?: number | null;
  /** How long a position's failure record is kept (default '24 hours'). */
  retention?: Interval;
}
export function applyOnce(client: Queryable, consumer: string, partition: string,
  position: Position, fn: (client: Queryable) => unknown,
  options?: ApplyOnceOptions): Promise<boolean>;
/** The key a stream position's failures are counted on (scope: the consumer). */
export function positionKey(partition: string, position: Position): string;

// ---- a key per message: queue consumers ----

export interface ClaimOnceOptions {
  /** How long the key is kept (default '24 hours'); a number is seconds. */
  retention?: Interval;
  /** How long to wait for another holder (default '0'); a number is seconds. */
  wait?: Interval;
}
/** idempotency.claim_once in the caller's transaction: true the first time, false for a
 * redelivery; KeyInProgressError (IK003) / KeyTooOldError (IK004). */
export function claimOnce(client: Queryable, scope: string, key: string,
  options?: ClaimOnceOptions): Promise<boolean>;
export interface ConsumeOnceOptions extends ClaimOnceOptions {
  /** Failures of work counted per key; the last one throws PoisonMessageError (default null:
   * not counted). */
  maxAttempts?: number | null;
}
/** work(client) in one transaction with claimOnce: true if it ran, false for a redelivery. */
export function consumeOnce(client: Queryable, scope: string, key: string,
  work: (client: Queryable) => unknown, options?: ConsumeOnceOptions): Promise<boolean>;

// ---- BullMQ: a Worker processor that runs each job exactly once ----

/** The part of a BullMQ Job the processor reads. */
export interface ExactlyOnceJob {
  id?: string;
  queueName: string;
  data: any;
}
export interface ExactlyOnceProcessorOptions<J extends ExactlyOnceJob> {
  /** The scope of the keys (default: the queue's name). */
  scope?: string | ((job: J) => string);
  /** A business key of the job (default: the job id). */
  key?: string | ((job: J) => string);
  /** Failures of work counted per key; the last one records the key dead and throws a
   * PoisonMessageError named 'UnrecoverableError' (BullMQ fails the job at once). Default null:
   * BullMQ's attempts alone bound the retries. */
  maxAttempts?: number | null;
  /** How long a run waits for another run holding the same key (default '30 seconds'). */
  wait?: Interval;
  /** How long a claim is held before another run may take it over (default '5 minutes'). */
  lockTtl?: Interval;
  /** How long a completed key is kept (default '24 hours'): reruns within it replay. */
  retention?: Interval;
  /** false: reserve_begin and complete unprepared (default true: prepared once per connection;
   * a server connection that lacks them, behind a transaction-mode pooler, switches to
   * unprepared by itself). */
  prepare?: boolean;
}
/** A BullMQ processor: work(job, client, token) runs in the claim's transaction, its return
 * value (JSON) is stored with the key and is what a rerun resolves to without running work.
 * work's client refuses COMMIT / ROLLBACK / END / ABORT / PREPARE TRANSACTION and release()
 * with InvalidTransactionTerminationError (2D000). */
export function exactlyOnceProcessor<J extends ExactlyOnceJob, R = unknown>(
  pool: PoolLike,
  work: (job: J, client: Queryable, token?: string) => R | Promise<R>,
  options?: ExactlyOnceProcessorOptions<J>): (job: J, token?: string) => Promise<R | null>;
/** The return value stored for (scope, key), or undefined if the key is not completed. */
export function storedResult(client: Queryable, scope: string, key: string):
  Promise<unknown | undefined>;
export function nextKey(client: Queryable, stream: string): Promise<bigint>;
export function emit(client: Queryable, topic: string, payload: unknown): Promise<bigint>;
export function parseLsn(text: string): bigint;
export function formatLsn(lsn: bigint | number): string;
export function lsnKey(commitLsn: bigint | number, lsn: bigint | number): string;
export function lsnKeyParts(key: string): { commitLsn: bigint; lsn: bigint };

export interface Message {
  /** The outbox key as a UUID string: increasing in stream order, the same on redelivery. */
  key: string;
  topic: string;
  payload: any;
  commitLsn: bigint;
  lsn: bigint;
  xid: number;
  commitTime: string;
}
export type Phase = 'peeked' | 'applied_uncommitted' | 'committed' | 'before_advance' | 'advanced';
export interface OutboxConsumerOptions {
  slot: string;
  consumer: string;
  /** Names the source in the watermark table; default: the slot's name. */
  partition?: string;
  topics?: string[];
  batch?: number;
  onPhase?: (phase: Phase, item: unknown) => unknown;
}
export class OutboxConsumer {
  constructor(source: Queryable, target: Queryable, options: OutboxConsumerOptions);
  slot: string;
  consumer: string;
  partition: string;
  createSlot(options?: { ifMissing?: boolean }): Promise<void>;
  /** One batch; returns how many messages it applied. */
  poll(handle: (target: Queryable, message: Message) => unknown): Promise<number>;
  run(handle: (target: Queryable, message: Message) => unknown,
    options?: { idleMs?: number; signal?: AbortSignal }): Promise<void>;
}

// ---- HTTP ----

export class IdempotencyKeyHeaderError extends Error {
  code: 'idempotency_key_missing' | 'idempotency_key_malformed' | 'idempotency_scope_missing';
  httpStatus: 400;
}
export function parseIdempotencyKey(raw: string | string[] | undefined): string;
export interface HttpAnswer {
  status: number;
  body: { error: string; message: string };
  headers: Record<string, string>;
}
export function answerFor(err: unknown): HttpAnswer | null;

/** What the middleware stores for an answer (docs/clients-node.md#replays). */
export interface StoredAnswer {
  idempotency_http: 1;
  /** Content-Type, Location and the keepHeaders option's, as the first answer set them. */
  headers: Record<string, string>;
  /** One of: the JSON value of a JSON answer, any other UTF-8 text, other bytes. */
  body?: unknown;
  text?: string;
  base64?: string;
}
export const STORED_MARK: 'idempotency_http';
/** The stored form of an answer: its body's bytes and its [name, value] header pairs. */
export function storedAnswer(body: Uint8Array, headers: Iterable<[string, unknown]>,
  keep?: string[]): StoredAnswer;
/** What a replay of a stored response sends (a response stored without the mark: JSON). */
export function replayOf(response: unknown): {
  headers: Record<string, string>; body: Buffer; value: unknown };

export interface IdempotencyContext {
  /** The pooled client whose transaction holds the claim: run the handler's writes on it. */
  client: PoolClientLike;
  scope: string;
  key: string;
  attempt: number;
  recoveryPoint: string | null;
  reservation: Reservation;
}
declare module 'node:http' {
  interface IncomingMessage {
    idempotency?: IdempotencyContext;
  }
}
export interface MiddlewareOptions<Req extends IncomingMessage = IncomingMessage> extends ReserveOptions {
  /**
   * A pool without an 'error' listener gets one that logs (see docs/clients-node.md). Made
   * with pg's pipeline: true, the statement form's calls share its connections.
   */
  pool: PoolLike;
  /** undefined or null (a header it reads is missing): 400 idempotency_scope_missing. */
  scope: string | ((req: Req) => string | null | undefined);
  key?: (req: Req) => string;
  request?: (req: Req) => Body | null | undefined;
  exclude?: ExcludePaths;
  store?: (statusCode: number) => boolean;
  /** Headers of the first answer that its replays carry besides Content-Type and Location. */
  keepHeaders?: string[];
  replayHeaders?: (statusCode: number, response: any) => Record<string, string>;
  /**
   * The address of the service's idempotency documentation: the middleware's own answers then
   * carry Link: <address>; rel="describedby".
   */
  documentation?: string;
  /**
   * true: the middleware's own answers have the body of 0.3.0, { error, message } as
   * application/json, instead of RFC 9457 problem details (application/problem+json).
   */
  legacyAnswers?: boolean;
  /** The largest body the middleware reads itself, in bytes (413 above); default 1 MiB. */
  limit?: number;
  /**
   * false: reserve_begin (execute_once in the statement form) unnamed (values bound), never a
   * prepared statement (default true).
   */
  prepare?: boolean;
  /** The statement form: this one statement answers a new key; the handler is not called. */
  statement?: string;
  /** The statement's parameters from the request (default none). */
  params?: (req: Req) => readonly StatementParam[] | Promise<readonly StatementParam[]>;
  /** The status of a new key's answer in the statement form (default 201). */
  status?: number;
}
export function idempotencyMiddleware<Req extends IncomingMessage = IncomingMessage>(
  options: MiddlewareOptions<Req>):
  (req: Req, res: ServerResponse, next: (err?: unknown) => unknown) => Promise<void>;
