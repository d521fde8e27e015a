// Type declarations of @idempotency/client/action (lib/action.js): the browser-safe helper,
// also exported by the package's main entry.

/** A UUIDv7 (RFC 9562) made at `ms` (default now). */
export function uuidv7(ms?: number): string;
/** The creation time (Unix ms) of a UUIDv7 key, as the extension's key_time reads it; else null. */
export function uuidv7Time(key: string): number | null;

export interface BackoffOptions {
  baseDelayMs?: number;
  maxDelayMs?: number;
  /** A number in [0, 1): Math.random by default. */
  random?: () => number;
}
/** The wait (ms) after failed attempt `attempt` (1, 2, ...): exponential, capped, jittered. */
export function backoffDelay(attempt: number, options?: BackoffOptions): number;
/** Retry-After (delta seconds or an HTTP date) in ms, or null. */
export function retryAfterMs(value: string | null | undefined, now?: number): number | null;
/** 409 with Retry-After, 408, 429, 500, 502, 503 and 504: worth sending again with the same key. */
export function isRetryableStatus(status: number,
  headers?: { get(name: string): string | null }): boolean;

export interface IdempotentAnswer<B = any> {
  status: number;
  ok: boolean;
  headers: Headers;
  text: string;
  /** The body parsed as JSON; null when empty or not JSON. */
  body: B | null;
  /** `Idempotent-Replayed: true`: the stored answer of an earlier attempt. */
  replayed: boolean;
  key: string;
  attempts: number;
}

export interface AttemptReport {
  attempt: number;
  key: string;
  status?: number;
  /** The network error or timeout of an attempt that got no answer. */
  error?: unknown;
  retryAfterMs: number | null;
  response?: IdempotentAnswer;
  /** This answer ends the call. */
  final: boolean;
  /** The wait before the next attempt, when there is one. */
  delayMs?: number;
}

export interface IdempotentFetchOptions extends BackoffOptions {
  /** The action whose key is sent; a new one (a new key) when neither it nor `key` is given. */
  action?: IdempotentAction;
  key?: string;
  method?: string;
  headers?: HeadersInit;
  /** A string is sent as it is; another value as JSON; a function is called per attempt. */
  body?: unknown | ((attempt: number) => unknown);
  /** Per attempt, the body's reading included (default 10 s). */
  timeoutMs?: number;
  /** All attempts and waits of one call (default 60 s); must be below retentionMs. */
  budgetMs?: number;
  /** The server's retention (default 24 h): an older key is not sent. */
  retentionMs?: number;
  maxAttempts?: number;
  signal?: AbortSignal;
  onAttempt?: (report: AttemptReport) => void;
  fetch?: typeof fetch;
}

export function idempotentFetch<B = any>(url: string | URL,
  options?: IdempotentFetchOptions): Promise<IdempotentAnswer<B>>;

export class IdempotentFetchError extends Error {
  constructor(reason: IdempotentFetchError['reason'], message: string, fields?: {
    key?: string; attempts?: number; cause?: unknown; lastResponse?: IdempotentAnswer;
  });
  reason: 'budget_exhausted' | 'max_attempts' | 'key_expired';
  key?: string;
  attempts?: number;
  lastResponse?: IdempotentAnswer;
}

export interface SavedAction {
  key: string;
  createdAt: number;
}
export class IdempotentAction {
  constructor(options?: { key?: string; createdAt?: number });
  readonly key: string;
  /** Unix ms: the UUIDv7's time, else when the action was made. */
  readonly createdAt: number;
  age(now?: number): number;
  fetch<B = any>(url: string | URL,
    options?: Omit<IdempotentFetchOptions, 'action' | 'key'>): Promise<IdempotentAnswer<B>>;
  toJSON(): SavedAction;
  static from(saved: SavedAction | string): IdempotentAction;
}
