// Compiled (not run) by types.test.js with tsc --strict: the declarations describe the API as
// the tests use it. Each @ts-expect-error line must stay an error, or tsc fails.
import {
  exactlyOnceProcessor, storedResult, type PoolLike,
  accept, answerFor, applyOnce, checkExtension, claimOnce, consumeOnce, fingerprint, idempotencyMiddleware, idempotent, IdempotencyError,
  KeyInProgressError, lsnKeyParts, OutboxConsumer, PoisonMessageError, positionKey, type Queryable,
  reserveBegin, runExternal, runOnce,
  StaleAttemptError, watermark,
} from '@idempotency/client';
import {
  IdempotentAction, idempotentFetch, IdempotentFetchError, type IdempotentAnswer, uuidv7Time,
} from '@idempotency/client/action';

declare const client: Queryable;
declare const pool: { connect(): Promise<Queryable & { release(): void }> };

declare const jobPool: PoolLike;

export async function jobs(): Promise<void> {
  interface ChargeJob { id?: string; queueName: string; data: { orderId: string; amount: number } }
  const processor = exactlyOnceProcessor(jobPool, async (job: ChargeJob, c) => {
    await c.query('INSERT INTO charges (order_id, amount) VALUES ($1, $2)',
      [job.data.orderId, job.data.amount]);
    return { charged: job.data.amount };
  }, { key: (job) => job.data.orderId, maxAttempts: 5, wait: 30, prepare: false });
  const charged: { charged: number } | null = await processor(
    { id: '1', queueName: 'payments', data: { orderId: 'o-1', amount: 5 } });
  void charged;
  const stored: unknown = await storedResult(client, 'payments', 'o-1');
  void stored;
  // @ts-expect-error maxAttempts is a number
  exactlyOnceProcessor(jobPool, async () => 1, { maxAttempts: 'five' });
}

export async function usage(): Promise<void> {
  const serverVersion: string = await checkExtension(client, '0.3.0');
  void serverVersion;
  const h: Buffer = fingerprint('{"a": 1.10}', { exclude: ['sent_at'] });
  fingerprint({ a: 1, b: [true, null, 2n] });
  // @ts-expect-error exclude is a list of paths, not one
  fingerprint('{}', { exclude: 'sent_at' });

  const r = await runOnce(client, { scope: 'acct', key: 'k', request: { item: 'x' } },
    async (c, reservation) => ({ statusCode: 201, response: { id: reservation.attempt } }));
  const replayed: boolean = r.replayed;
  const status: number = r.statusCode;
  // @ts-expect-error the work answers with a status code
  await runOnce(client, { scope: 'acct', key: 'k' }, () => ({ response: {} }));

  const create = idempotent(async (c, account: string, key: string, body: { item: string }) =>
    [201, { account, item: body.item }] as [number, unknown],
  { scope: (account) => account, key: (_a, key) => key, request: (_a, _k, body) => body });
  await create(client, 'acct', 'k', { item: 'x' });
  // @ts-expect-error the wrapped function keeps its parameters
  await create(client, 'acct', 'k');

  await runExternal(client, { scope: 'acct', key: 'k',
    finish: async (c, res) => [res.statusCode, { stored: true }] as [number, unknown] },
    async (attempt) => {
      const fence: number = attempt.attempt;
      if (attempt.recoveryPoint === 'charged') return [200, { fence }];
      await attempt.checkpoint('charged');
      return { statusCode: 201, response: { fence } };
    });

  const w: bigint | null = await watermark(client, 'c', 'p');
  await accept(client, 'c', 'p', 5n);
  await applyOnce(client, 'c', 'p', '0000001600000000000000160000fff0', async (c) => c.query('SELECT 1'));
  const applied: boolean = await consumeOnce(client, 'orders', 'msg-1', async (c) => c.query('SELECT 1'),
    { retention: '7 days', wait: 2 });
  const claimed: boolean = await claimOnce(client, 'orders', 'msg-1');
  try {
    await consumeOnce(client, 'orders', 'msg-2', async (c) => c.query('SELECT 1'), { maxAttempts: 5 });
    await applyOnce(client, 'c', 'p', 7n, async (c) => c.query('SELECT 1'), { maxAttempts: 3, retention: '7 days' });
  } catch (err) {
    if (err instanceof PoisonMessageError) {
      const dead: boolean = err.error.dead;
      const at: number = err.attempt;
      const where: string = positionKey('p', 7n);
      console.log(dead, at, where, err.partition);
    }
  }
  // @ts-expect-error the work takes the client
  await consumeOnce(client, 'orders', 'msg-1', async (c: string) => c);
  const { commitLsn }: { commitLsn: bigint } = lsnKeyParts('00000016-b374-d848-0000-0016b374d000');

  const consumer = new OutboxConsumer(client, client, { slot: 's', consumer: 'billing' });
  await consumer.poll(async (target, message) => {
    const key: string = message.key;
    const lsn: bigint = message.lsn;
    await target.query('INSERT INTO applied VALUES ($1, $2)', [key, String(lsn)]);
  });

  try {
    await runOnce(client, { scope: 'a', key: 'k' }, () => [200, null]);
  } catch (err) {
    if (err instanceof KeyInProgressError) {
      const seconds: number = err.retryAfter;
      const answer = answerFor(err);
      if (answer) console.log(answer.status, answer.headers['Retry-After'], seconds);
    } else if (err instanceof StaleAttemptError || err instanceof IdempotencyError) {
      const sqlstate: string = err.code;
      console.log(sqlstate, err.detail, err.hint);
    }
  }

  const mw = idempotencyMiddleware({ pool, scope: (req) => String(req.headers['x-account']),
    exclude: ['sent_at'], lockTtl: 30, prepare: false });
  void mw;
  const byStatement = idempotencyMiddleware({ pool, scope: 'acct', statement: 'SELECT 1 AS one',
    params: (req) => [req.headers['x-account'] ?? null, 2, new Date(), Buffer.from('x')],
    status: 202 });
  void byStatement;
  const pipelined = { ...pool, options: { pipeline: true, max: 4 } };
  void idempotencyMiddleware({ pool: pipelined, scope: 'acct', statement: 'SELECT 1 AS one' });
  const once = await runOnce<{ id: number }>(client, { scope: 'acct', key: 'k',
    statement: 'INSERT INTO t (a) VALUES ($1) RETURNING id', params: [1, 'x', null, { a: 1 }] });
  const onceId: number = once.response.id;
  void onceId;
  // @ts-expect-error a statement parameter is not a function
  await runOnce(client, { scope: 'acct', key: 'k', statement: 'SELECT 1', params: [() => 1] });
  const opened = await reserveBegin(client, 'acct', 'k', fingerprint({ item: 'x' }), { prepare: true });
  const expires: Date | null = opened.expiresAt;
  void expires;
  void [h, replayed, status, w, commitLsn];
}

export async function browserHelper(): Promise<void> {
  const action = new IdempotentAction();
  const saved: string = JSON.stringify(action);
  const again = IdempotentAction.from(saved);
  const created: number | null = uuidv7Time(again.key);
  const r: IdempotentAnswer<{ id: number }> = await action.fetch<{ id: number }>('/orders', {
    body: (attempt: number) => ({ item: 'widget', attempt }),
    timeoutMs: 5000,
    budgetMs: 30_000,
    onAttempt: (a) => console.log(a.attempt, a.status, a.delayMs),
  });
  const id: number | undefined = r.body?.id;
  const replayed: boolean = r.replayed;
  try {
    await idempotentFetch('/orders', { key: 'k', method: 'PUT', headers: { 'X-A': 'b' } });
  } catch (err) {
    if (err instanceof IdempotentFetchError) console.log(err.reason, err.lastResponse?.status);
  }
  // @ts-expect-error the action holds its key: a call on it takes no other
  await action.fetch('/orders', { key: 'other' });
  // @ts-expect-error the key is read-only
  action.key = 'x';
  void [created, id, replayed];
}
