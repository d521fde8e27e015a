// The client half of an idempotent request, for browsers and Node alike (no import, no
// dependency: a page can load this file as it is, as an ES module).
//   const action = new IdempotentAction();            // at the user's click: one key per action
//   const r = await action.fetch('/orders', { body: { item: 'widget', quantity: 2 } });
//   r.status, r.body, r.replayed                      // a final answer, first or replayed
// The key is a UUIDv7: the extension reads its creation time (key_time) and refuses a key older
// than the retention (too_old), so the retries of one action run under a budget shorter than
// the retention.

// A UUIDv7 (RFC 9562): 48-bit Unix milliseconds, version 7, variant 10, 74 random bits.
// `ms` lets tests make a key that looks old.
export function uuidv7(ms = Date.now()) {
  if (!Number.isInteger(ms) || ms < 0 || ms >= 2 ** 48)
    throw new RangeError('uuidv7: the time must be an integer number of ms from 0 to 2^48 - 1');
  const b = new Uint8Array(16);
  globalThis.crypto.getRandomValues(b);
  for (let i = 5, t = ms; i >= 0; i--, t = Math.floor(t / 256)) b[i] = t % 256;
  b[6] = 0x70 | (b[6] & 0x0f);
  b[8] = 0x80 | (b[8] & 0x3f);
  const h = Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

const UUIDV7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/i;

// The creation time (Unix ms) of a UUIDv7 key, as the extension's key_time reads it; null for
// any other key.
export function uuidv7Time(key) {
  if (typeof key !== 'string' || !UUIDV7.test(key)) return null;
  return parseInt(key.slice(0, 8) + key.slice(9, 13), 16);
}

const DAY_MS = 24 * 3600 * 1000;
const DEFAULTS = {
  method: 'POST',
  timeoutMs: 10_000, // per attempt, reading the body included
  budgetMs: 60_000, // all attempts and waits of one call
  retentionMs: DAY_MS, // the server's retention: a key older than this is refused (too_old)
  baseDelayMs: 250,
  maxDelayMs: 8_000,
  maxAttempts: Infinity,
};

// Why a call gave up without a final answer.
export class IdempotentFetchError extends Error {
  constructor(reason, message, { key, attempts, cause, lastResponse } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = 'IdempotentFetchError';
    this.reason = reason; // 'budget_exhausted' | 'max_attempts' | 'key_expired'
    this.key = key;
    this.attempts = attempts;
    this.lastResponse = lastResponse; // the last retryable answer, if one came back
  }
}

// The wait before attempt `attempt + 1`: exponential from baseDelayMs, capped at maxDelayMs,
// with jitter over its upper half (so clients that failed together do not retry together).
export function backoffDelay(attempt, { baseDelayMs = DEFAULTS.baseDelayMs,
  maxDelayMs = DEFAULTS.maxDelayMs, random = Math.random } = {}) {
  const ceiling = Math.min(maxDelayMs, baseDelayMs * 2 ** (attempt - 1));
  return ceiling / 2 + random() * (ceiling / 2);
}

// Retry-After in ms (delta seconds or an HTTP date), or null.
export function retryAfterMs(value, now = Date.now()) {
  if (value === null || value === undefined) return null;
  const text = String(value).trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  const at = Date.parse(text);
  return Number.isNaN(at) ? null : Math.max(0, at - now);
}

// Whether an answer is worth sending again with the same key: the key in use by an attempt
// still in flight (409 with Retry-After; a 409 without it is a conflict of the application),
// throttling, and transient server errors. Everything else is final: 2xx, 422 (the key was used
// with another body), other 4xx.
export function isRetryableStatus(status, headers) {
  if (status === 409) return headers?.get?.('retry-after') != null;
  return status === 408 || status === 429 || status === 500 || status === 502 ||
    status === 503 || status === 504;
}

function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => { signal?.removeEventListener('abort', stop); resolve(); }, ms);
    const stop = () => { clearTimeout(timer); reject(signal.reason); };
    signal?.addEventListener('abort', stop, { once: true });
  });
}

function parseJson(text) {
  try {
    return text === '' ? null : JSON.parse(text);
  } catch {
    return null;
  }
}

// Sends one logical request until it gets a final answer. The same Idempotency-Key on every
// attempt; retries network errors, timeouts and retryable statuses with backoff and jitter,
// waiting Retry-After when the server gives it, all within budgetMs. Resolves to
// { status, ok, headers, text, body, replayed, key, attempts }; rejects with an
// IdempotentFetchError when the budget or the attempts run out, and with the signal's reason
// when the caller aborts.
export async function idempotentFetch(url, options = {}) {
  const o = { ...DEFAULTS, ...options };
  const action = o.action ?? new IdempotentAction(o.key === undefined ? {} : { key: o.key });
  const fetchImpl = o.fetch ?? globalThis.fetch.bind(globalThis);
  if (!(o.budgetMs > 0 && o.budgetMs < o.retentionMs))
    throw new RangeError('idempotentFetch: budgetMs must be positive and below retentionMs');
  const started = Date.now();
  const deadline = started + o.budgetMs;
  const giveUp = (reason, message, extra) =>
    new IdempotentFetchError(reason, message, { key: action.key, ...extra });
  let lastError;
  let lastResponse;
  for (let attempt = 1; ; attempt++) {
    if (Date.now() - action.createdAt >= o.retentionMs)
      throw giveUp('key_expired', 'the key is older than the retention: the server would ' +
        'refuse it; find out what became of the action before making a new one',
      { attempts: attempt - 1, cause: lastError, lastResponse });
    const controller = new AbortController();
    const onAbort = () => controller.abort(o.signal.reason);
    o.signal?.addEventListener('abort', onAbort, { once: true });
    if (o.signal?.aborted) onAbort();
    const timer = setTimeout(() => controller.abort(new Error('timeout')),
      Math.max(0, Math.min(o.timeoutMs, deadline - Date.now())));
    let answer;
    let error;
    try {
      const payload = typeof o.body === 'function' ? o.body(attempt) : o.body;
      const headers = new Headers(o.headers);
      headers.set('Idempotency-Key', action.key);
      let body = payload;
      if (payload !== undefined && typeof payload !== 'string') {
        body = JSON.stringify(payload);
        if (!headers.has('content-type')) headers.set('Content-Type', 'application/json');
      }
      const res = await fetchImpl(url, { method: o.method, headers, body,
        signal: controller.signal });
      const text = await res.text(); // a body cut off midway is a network error too
      answer = { status: res.status, ok: res.ok, headers: res.headers, text,
        body: parseJson(text), replayed: res.headers.get('idempotent-replayed') === 'true',
        key: action.key, attempts: attempt };
    } catch (err) {
      error = err;
    } finally {
      clearTimeout(timer);
      o.signal?.removeEventListener('abort', onAbort);
    }
    if (o.signal?.aborted) throw o.signal.reason;
    const retryable = answer ? isRetryableStatus(answer.status, answer.headers) : true;
    const serverWait = answer ? retryAfterMs(answer.headers.get('retry-after')) : null;
    const wait = serverWait ?? backoffDelay(attempt, o);
    o.onAttempt?.({ attempt, key: action.key, status: answer?.status, error,
      retryAfterMs: serverWait, response: answer, final: !retryable,
      delayMs: retryable ? wait : undefined });
    if (!retryable) return answer;
    if (answer) lastResponse = answer;
    else lastError = error;
    const extra = { attempts: attempt, cause: lastError, lastResponse };
    if (attempt >= o.maxAttempts)
      throw giveUp('max_attempts', `no final answer after ${attempt} attempts`, extra);
    if (Date.now() + wait >= deadline)
      throw giveUp('budget_exhausted', `no final answer within ${o.budgetMs} ms`, extra);
    await sleep(wait, o.signal);
  }
}

// One user action (one click on "Place order"): its key is made once, at the click, and sent
// unchanged on every retry, across a page reload too (toJSON / from, e.g. in sessionStorage).
// A second deliberate action is a new IdempotentAction with a new key.
export class IdempotentAction {
  constructor({ key, createdAt } = {}) {
    this.key = key ?? uuidv7();
    if (typeof this.key !== 'string' || this.key === '')
      throw new TypeError('IdempotentAction: the key must be a non-empty string');
    this.createdAt = createdAt ?? uuidv7Time(this.key) ?? Date.now();
  }

  age(now = Date.now()) {
    return now - this.createdAt;
  }

  fetch(url, options = {}) {
    return idempotentFetch(url, { ...options, action: this });
  }

  toJSON() {
    return { key: this.key, createdAt: this.createdAt };
  }

  static from(saved) {
    const value = typeof saved === 'string' ? JSON.parse(saved) : saved;
    return new IdempotentAction({ key: value.key, createdAt: value.createdAt });
  }
}
