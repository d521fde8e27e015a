// Client of the orders API, on the package's helper (@idempotency/client/action, the same file
// the order page loads in the browser): one Idempotency-Key (UUIDv7) per logical action, reused
// on every retry.
//   const orders = new OrdersClient({ baseUrl, token });
//   const { status, body, replayed } = await orders.createOrder({ item: 'widget', quantity: 2 });
import { IdempotentAction, idempotentFetch, uuidv7 } from '@idempotency/client/action';

export { uuidv7 };

export class OrdersClient {
  // retryOptions: those of idempotentFetch (timeoutMs, budgetMs, baseDelayMs, maxDelayMs,
  // maxAttempts, onAttempt).
  constructor({ baseUrl, token, ...retryOptions }) {
    this.baseUrl = baseUrl.replace(/\/$/, '');
    this.token = token;
    this.retryOptions = retryOptions;
  }

  // One logical "create order": the same key on every attempt; client_sent_at is fresh on
  // each attempt and left out of the server's fingerprint. Resolves to the final answer
  // ({ status, body, text, replayed, key, attempts }); rejects with IdempotentFetchError when
  // the retries run out.
  createOrder(order, { key = uuidv7(), query = '', ...options } = {}) {
    return idempotentFetch(`${this.baseUrl}/orders${query ? `?${query}` : ''}`, {
      ...this.retryOptions,
      ...options,
      action: new IdempotentAction({ key }),
      headers: { Authorization: `Bearer ${this.token}` },
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
