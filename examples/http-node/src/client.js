// Client helper: one Idempotency-Key (UUIDv7) per logical action, reused on every retry.
//   const orders = new OrdersClient({ baseUrl, token });
//   const { status, body, replayed } = await orders.createOrder({ item: 'widget', quantity: 2 });
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';

// A UUIDv7 (RFC 9562): 48-bit Unix milliseconds, version 7, variant 10, 74 random bits.
// `ms` lets tests make a key that looks old.
export function uuidv7(ms = Date.now()) {
  const b = randomBytes(16);
  b.writeUIntBE(ms, 0, 6);
  b[6] = 0x70 | (b[6] & 0x0f);
  b[8] = 0x80 | (b[8] & 0x3f);
  const h = b.toString('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

// Statuses worth retrying with the same key: in progress, throttled, transient server errors.
const RETRYABLE = new Set([409, 429, 500, 502, 503, 504]);

// Sends one logical request until it gets a final answer or runs out of attempts.
// Retries network errors, timeouts and RETRYABLE statuses with exponential backoff and
// jitter, honouring Retry-After. Returns { status, headers, body, replayed, key, attempts },
// the last response if attempts run out; throws the last network error if none came back.
export async function sendIdempotent(url, {
  method = 'POST',
  token,
  key = uuidv7(),
  body, // a function (attempt number -> body) or a value
  timeoutMs = 5000,
  maxAttempts = 6,
  baseDelayMs = 100,
  maxDelayMs = 5000,
  onAttempt = () => {}, // ({ attempt, status, error, retryAfter }) after each attempt
} = {}) {
  let last;
  for (let attempt = 1; attempt <= maxAttempts; attempt++) {
    let retryAfterS = null;
    try {
      const payload = typeof body === 'function' ? body(attempt) : body;
      const res = await fetch(url, {
        method,
        headers: {
          'Content-Type': 'application/json',
          'Idempotency-Key': key,
          ...(token ? { Authorization: `Bearer ${token}` } : {}),
        },
        body: payload === undefined ? undefined : JSON.stringify(payload),
        signal: AbortSignal.timeout(timeoutMs),
      });
      const text = await res.text(); // still under the timeout signal
      last = {
        status: res.status,
        headers: res.headers,
        text,
        body: text ? JSON.parse(text) : null,
        replayed: res.headers.get('idempotent-replayed') === 'true',
        key,
        attempts: attempt,
      };
      const header = res.headers.get('retry-after');
      retryAfterS = header !== null && /^\d+$/.test(header) ? Number(header) : null;
      onAttempt({ attempt, status: res.status, retryAfter: retryAfterS, response: last });
      if (!RETRYABLE.has(res.status)) return last;
    } catch (error) {
      // Timeout, refused or reset connection: the request may or may not have been handled,
      // which is exactly what the key is for.
      onAttempt({ attempt, error });
      if (attempt === maxAttempts && !last) throw error;
    }
    if (attempt < maxAttempts) {
      const backoff = Math.min(maxDelayMs, baseDelayMs * 2 ** (attempt - 1));
      const jittered = backoff / 2 + Math.random() * (backoff / 2);
      const wait = retryAfterS === null ? jittered : Math.min(maxDelayMs, retryAfterS * 1000);
      await sleep(wait);
    }
  }
  return last;
}

export class OrdersClient {
  constructor({ baseUrl, token, ...retryOptions }) {
    this.baseUrl = baseUrl.replace(/\/$/, '');
    this.token = token;
    this.retryOptions = retryOptions;
  }

  // One logical "create order": the same key on every attempt; client_sent_at is fresh on
  // each attempt and left out of the server's fingerprint.
  createOrder(order, { key = uuidv7(), query = '', ...options } = {}) {
    return sendIdempotent(`${this.baseUrl}/orders${query ? `?${query}` : ''}`, {
      ...this.retryOptions,
      ...options,
      token: this.token,
      key,
      body: () => ({ ...order, client_sent_at: new Date().toISOString() }),
    });
  }

  async orderByKey(key) {
    const res = await fetch(`${this.baseUrl}/orders/by-key/${encodeURIComponent(key)}`, {
      headers: { Authorization: `Bearer ${this.token}` },
    });
    return { status: res.status, body: await res.json() };
  }
}
