// OpenTelemetry (lib/telemetry.js) with the SDK's in-memory exporters: a span per helper call,
// a child of the caller's span, with the claim's outcome, attempt and round trips, no key
// unless asked; a replay, a 409 and a 422 told apart; the counter and the histogram by
// outcome; and, without @opentelemetry/api installed, the helpers working with nothing
// measured.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import express from 'express';
import pg from 'pg';
import { context, SpanStatusCode, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  InMemoryMetricExporter, AggregationTemporality, MeterProvider, PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';
import {
  AlwaysOffSampler, BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import {
  applyOnce, claimOnce, configureTelemetry, consumeOnce, exactlyOnceProcessor,
  idempotencyMiddleware,
  KeyInProgressError, KeyMismatchError, PoisonMessageError, positionKey, reserve, runExternal,
  runOnce, telemetryAvailable,
} from '../index.js';
import { FAST_PATH } from '../lib/connection.js';
import { connect, databases, serve } from './db.js';
import { MANAGED } from './edition.js';

// consumeOnce's BEGIN and claim: one write on pg's fast path, two round trips on its public API.
const BEGIN_AND_CLAIM = FAST_PATH ? 1 : 2;

const spans = new InMemorySpanExporter();
const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] });
const metrics = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
const meterProvider = new MeterProvider({
  readers: [new PeriodicExportingMetricReader({ exporter: metrics, exportIntervalMillis: 3_600_000 })],
});
const STATEMENT = 'SELECT $1::text AS item';

let db;
let client;
let holder;

before(async () => {
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  db = (await databases('telemetry')).source;
  client = await connect(db);
  holder = await connect(db);
});

after(async () => {
  configureTelemetry();
  await client?.end();
  await holder?.end();
});

const attrs = (span) => span.attributes;
const finished = () => spans.getFinishedSpans().filter((s) => s.name.startsWith('idempotency '));

test('@opentelemetry/api is found', () => {
  assert.equal(telemetryAvailable(), true);
});

test('a span per call: outcome, attempt, round trips; replay, 409 and 422 told apart', async () => {
  configureTelemetry({ tracerProvider, meterProvider });
  spans.reset();
  const scope = 'telemetry';
  const key = randomUUID();
  const statement = { scope, key, request: { item: 'lamp' }, statement: STATEMENT, params: ['lamp'] };
  const parent = tracerProvider.getTracer('test').startSpan('POST /orders');
  await context.with(trace.setSpan(context.active(), parent), async () => {
    await runOnce(client, statement);                                    // new, one round trip
    await runOnce(client, statement);                                    // replay
    await assert.rejects(runOnce(client, { ...statement, request: { item: 'sofa' } }),
      KeyMismatchError);                                                 // 422
    const held = randomUUID();
    await holder.query('BEGIN');
    await reserve(holder, scope, held);
    await assert.rejects(runOnce(client, { ...statement, key: held }), KeyInProgressError); // 409
    await holder.query('ROLLBACK');
    await runOnce(client, { scope, key: randomUUID(), request: {} },
      async () => ({ statusCode: 201, response: { ok: true } }));       // the transaction form
    await runExternal(client, { scope, key: randomUUID() },
      async () => ({ statusCode: 200, response: null }));
  });
  parent.end();
  const got = finished();
  assert.deepEqual(got.map((s) => [s.name, attrs(s)['idempotency.outcome']]), [
    ['idempotency runOnce', 'new'], ['idempotency runOnce', 'replay'],
    ['idempotency runOnce', 'mismatch'], ['idempotency runOnce', 'in_progress'],
    ['idempotency runOnce', 'new'], ['idempotency runExternal', 'new'],
  ]);
  for (const s of got) {
    assert.equal(s.parentSpanContext?.spanId, parent.spanContext().spanId, `${s.name}'s parent`);
    assert.equal(attrs(s)['idempotency.scope'], scope);
    assert.equal(attrs(s)['idempotency.helper'], s.name.split(' ')[1]);
    assert.ok(!('idempotency.key' in attrs(s)), 'no key unless asked');
  }
  const [created, replay, mismatch, inProgress, transaction, external] = got;
  assert.equal(attrs(created)['idempotency.attempt'], 1);
  assert.equal(attrs(created)['idempotency.replayed'], false);
  assert.equal(attrs(created)['idempotency.round_trips'], 1);
  assert.equal(created.status.code, SpanStatusCode.UNSET);
  assert.equal(attrs(replay)['idempotency.replayed'], true);
  assert.equal(attrs(replay)['idempotency.round_trips'], 1);
  assert.equal(replay.status.code, SpanStatusCode.UNSET);
  for (const [span, status, type] of [[mismatch, 422, 'KeyMismatchError'],
    [inProgress, 409, 'KeyInProgressError']]) {
    assert.equal(attrs(span)['idempotency.http_status'], status);
    assert.equal(attrs(span)['error.type'], type);
    assert.equal(span.status.code, SpanStatusCode.ERROR);
    assert.equal(span.events[0]?.name, 'exception');
  }
  assert.ok(attrs(transaction)['idempotency.round_trips'] >= 2, 'claim, then complete + COMMIT');
  assert.equal(attrs(external)['idempotency.attempt'], 1);

  await meterProvider.forceFlush();
  const points = metrics.getMetrics().flatMap((r) => r.scopeMetrics)
    .filter((s) => s.scope.name === '@idempotency/client').flatMap((s) => s.metrics);
  const claims = points.find((m) => m.descriptor.name === 'idempotency.client.claims');
  const count = (helper, outcome) => claims.dataPoints.find((p) =>
    p.attributes['idempotency.helper'] === helper
    && p.attributes['idempotency.outcome'] === outcome)?.value;
  assert.equal(count('runOnce', 'new'), 2);
  assert.equal(count('runOnce', 'replay'), 1);
  assert.equal(count('runOnce', 'mismatch'), 1);
  assert.equal(count('runOnce', 'in_progress'), 1);
  assert.equal(count('runExternal', 'new'), 1);
  const duration = points.find((m) => m.descriptor.name === 'idempotency.client.duration');
  assert.equal(duration.descriptor.unit, 's');
  assert.equal(duration.dataPoints.reduce((n, p) => n + p.value.count, 0), 6);
});

test('the middleware: a span per request with the outcome and the status it answered', async () => {
  configureTelemetry({ tracerProvider, meterProvider });
  spans.reset();
  const pool = new pg.Pool({ database: db, max: 2 });
  const app = express();
  app.use(express.json());
  app.post('/orders', idempotencyMiddleware({ pool, scope: 'telemetry_http' }),
    (req, res) => { res.status(201).json({ item: req.body.item }); });
  const served = await serve(app);
  const post = (key, item) => fetch(`${served.base}/orders`, { method: 'POST',
    headers: { 'Idempotency-Key': key, 'Content-Type': 'application/json' },
    body: JSON.stringify({ item }) });
  try {
    const key = randomUUID();
    assert.equal((await post(key, 'lamp')).status, 201);
    assert.equal((await post(key, 'lamp')).status, 201);
    assert.equal((await post(key, 'sofa')).status, 422);
    const held = randomUUID();
    await holder.query('BEGIN');
    await reserve(holder, 'telemetry_http', held);
    assert.equal((await post(held, 'lamp')).status, 409);
    await holder.query('ROLLBACK');
  } finally {
    await served.close();
    await pool.end();
  }
  const got = finished().filter((s) => s.name === 'idempotency middleware');
  assert.deepEqual(got.map((s) => [attrs(s)['idempotency.outcome'],
    attrs(s)['http.response.status_code'], attrs(s)['idempotency.replayed']]), [
    ['new', 201, false], ['replay', 201, true], ['mismatch', 422, false],
    ['in_progress', 409, false],
  ]);
  for (const s of got) {
    assert.equal(attrs(s)['idempotency.scope'], 'telemetry_http');
    assert.ok(!('idempotency.key' in attrs(s)));
  }
});

test('the BullMQ processor: a span per job, "idempotency bullmq", with its own round trips',
  async () => {
    configureTelemetry({ tracerProvider, meterProvider });
    spans.reset();
    const pool = new pg.Pool({ database: db, max: 1 });
    const processor = exactlyOnceProcessor(pool, async (job, c) => {
      await c.query('SELECT 1'); // the work's: not counted
      return { done: job.id };
    }, { scope: 'telemetry_jobs', wait: '0 seconds' });
    const job = { id: randomUUID(), queueName: 'q', data: {} };
    try {
      assert.deepEqual(await processor(job), { done: job.id });                  // new
      assert.deepEqual(await processor(job), { done: job.id });                  // rerun
      const held = { id: randomUUID(), queueName: 'q', data: {} };
      await holder.query('BEGIN');
      await reserve(holder, 'telemetry_jobs', held.id);
      await assert.rejects(processor(held), KeyInProgressError);                 // 409
      await holder.query('ROLLBACK');
    } finally {
      await pool.end();
    }
    const got = finished();
    assert.deepEqual(got.map((s) => [s.name, attrs(s)['idempotency.outcome'],
      attrs(s)['idempotency.replayed']]), [
      ['idempotency bullmq', 'new', false], ['idempotency bullmq', 'replay', true],
      ['idempotency bullmq', 'in_progress', false],
    ]);
    for (const s of got) assert.equal(attrs(s)['idempotency.scope'], 'telemetry_jobs');
    const [created, replay] = got;
    assert.equal(attrs(created)['idempotency.attempt'], 1);
    if (FAST_PATH && !MANAGED) {
      // reserve_begin; complete + COMMIT. A rerun: reserve_begin alone.
      assert.equal(attrs(created)['idempotency.round_trips'], 2);
      assert.equal(attrs(replay)['idempotency.round_trips'], 1);
    } else {
      // BEGIN and reserve (one write on the fast path), complete and COMMIT; a rerun's
      // ROLLBACK (no reserve_begin on the managed edition)
      assert.ok(attrs(created)['idempotency.round_trips'] >= 2);
      assert.ok(attrs(replay)['idempotency.round_trips'] >= 1);
    }
  });

test('the consumers: claimOnce, consumeOnce, applyOnce; a redelivery, a 409, a poison message',
  async () => {
    configureTelemetry({ tracerProvider, meterProvider });
    spans.reset();
    const scope = 'telemetry_queue';
    const key = randomUUID();
    const work = async (c) => { await c.query('SELECT 1'); };
    assert.equal(await consumeOnce(client, scope, key, work), true);           // new
    assert.equal(await consumeOnce(client, scope, key, work), false);          // redelivery
    const held = randomUUID();
    await holder.query('BEGIN');
    await reserve(holder, scope, held);
    await assert.rejects(consumeOnce(client, scope, held, work), KeyInProgressError); // 409
    await holder.query('ROLLBACK');
    const poison = async () => { throw new SyntaxError('not JSON'); };
    const dead = randomUUID();
    await assert.rejects(consumeOnce(client, scope, dead, poison, { maxAttempts: 1 }),
      PoisonMessageError);
    await client.query('BEGIN');
    assert.equal(await claimOnce(client, scope, randomUUID()), true);
    await client.query('COMMIT');
    assert.equal(await applyOnce(client, 'telemetry_stream', 'p0', 7, work), true);
    assert.equal(await applyOnce(client, 'telemetry_stream', 'p0', 7, work), false);
    const got = finished();
    assert.deepEqual(got.map((s) => [s.name, attrs(s)['idempotency.outcome'],
      attrs(s)['idempotency.replayed']]), [
      ['idempotency consumeOnce', 'new', false], ['idempotency consumeOnce', 'replay', true],
      ['idempotency consumeOnce', 'in_progress', false],
      ['idempotency consumeOnce', undefined, undefined],
      ['idempotency claimOnce', 'new', false],
      ['idempotency applyOnce', 'new', false], ['idempotency applyOnce', 'replay', true],
    ]);
    const [created, redelivery, inProgress, poisoned, claimed, applied] = got;
    assert.equal(attrs(created)['idempotency.scope'], scope);
    assert.equal(attrs(created)['idempotency.round_trips'], BEGIN_AND_CLAIM + 1,
      'BEGIN + claim, COMMIT');
    assert.equal(attrs(redelivery)['idempotency.round_trips'], BEGIN_AND_CLAIM + 1);
    assert.equal(attrs(claimed)['idempotency.round_trips'], 1);
    assert.equal(attrs(inProgress)['idempotency.http_status'], 409);
    assert.equal(inProgress.status.code, SpanStatusCode.ERROR);
    assert.equal(attrs(poisoned)['error.type'], 'PoisonMessageError');
    assert.equal(attrs(poisoned)['idempotency.attempt'], 1);
    assert.equal(poisoned.status.code, SpanStatusCode.ERROR);
    assert.equal(attrs(applied)['idempotency.scope'], 'telemetry_stream');
    assert.ok(!('idempotency.key' in attrs(applied)), 'no key unless asked');
    configureTelemetry({ tracerProvider, meterProvider, recordKeys: true });
    spans.reset();
    await applyOnce(client, 'telemetry_stream', 'p0', 8, work);
    assert.equal(attrs(finished()[0])['idempotency.key'], positionKey('p0', 8));
  });

test('round trips are counted without a context manager too', async () => {
  configureTelemetry({ tracerProvider, meterProvider });
  context.disable(); // the API's default: no context is kept across calls
  spans.reset();
  try {
    await runOnce(client, { scope: 'telemetry', key: randomUUID(), statement: STATEMENT, params: ['x'] });
    await consumeOnce(client, 'telemetry_queue', randomUUID(), async () => {});
  } finally {
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  }
  assert.deepEqual(finished().map((s) => attrs(s)['idempotency.round_trips']),
    [1, BEGIN_AND_CLAIM + 1]);
});

test('a call the sampler drops: counted by the metrics, run in the caller\'s context', async () => {
  const sampledOut = new BasicTracerProvider({ sampler: new AlwaysOffSampler(),
    spanProcessors: [new SimpleSpanProcessor(spans)] });
  const exported = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
  const ownMeters = new MeterProvider({
    readers: [new PeriodicExportingMetricReader({ exporter: exported, exportIntervalMillis: 3_600_000 })],
  });
  configureTelemetry({ tracerProvider: sampledOut, meterProvider: ownMeters });
  spans.reset();
  const caller = tracerProvider.getTracer('test').startSpan('POST /orders');
  let active;
  await context.with(trace.setSpan(context.active(), caller), () => runOnce(client,
    { scope: 'telemetry', key: randomUUID(), request: {} }, async () => {
      active = trace.getSpan(context.active());
      return { statusCode: 201, response: null };
    }));
  caller.end();
  assert.equal(active, caller, 'the work runs in the caller\'s context');
  assert.equal(finished().length, 0);
  await ownMeters.forceFlush();
  const metric = (name) => exported.getMetrics().at(-1).scopeMetrics.flatMap((s) => s.metrics)
    .find((m) => m.descriptor.name === name);
  const created = (points) => points.find((p) => p.attributes['idempotency.helper'] === 'runOnce'
    && p.attributes['idempotency.outcome'] === 'new');
  // the claims counter counts since the process started; the histogram since this provider
  const claimsBefore = created(metric('idempotency.client.claims').dataPoints).value;
  assert.equal(created(metric('idempotency.client.duration').dataPoints).value.count, 1);
  await runOnce(client, { scope: 'telemetry', key: randomUUID(), statement: STATEMENT, params: ['x'] });
  await ownMeters.forceFlush();
  assert.equal(created(metric('idempotency.client.claims').dataPoints).value, claimsBefore + 1);
  assert.equal(created(metric('idempotency.client.duration').dataPoints).value.count, 2);
  assert.equal(finished().length, 0);
  await ownMeters.shutdown();
});

test('the key only when asked; nothing when disabled', async () => {
  configureTelemetry({ tracerProvider, meterProvider, recordKeys: true });
  spans.reset();
  const key = randomUUID();
  await runOnce(client, { scope: 'telemetry', key, statement: STATEMENT, params: ['x'] });
  assert.equal(attrs(finished()[0])['idempotency.key'], key);
  configureTelemetry({ tracerProvider, meterProvider, enabled: false });
  spans.reset();
  await runOnce(client, { scope: 'telemetry', key: randomUUID(), statement: STATEMENT, params: ['x'] });
  assert.equal(finished().length, 0);
});

test('with the API and no SDK registered, calls are not observed; a registered provider is', () => {
  // A child process: the providers registered here are global and stay for the process.
  const script = `
    import { metrics, trace } from '@opentelemetry/api';
    import { MeterProvider } from '@opentelemetry/sdk-metrics';
    import { BasicTracerProvider } from '@opentelemetry/sdk-trace-base';
    import { configureTelemetry } from './index.js';
    import { observing } from './lib/telemetry.js';
    const seen = [observing()];
    configureTelemetry({ meterProvider: new MeterProvider() });
    seen.push(observing());
    configureTelemetry();
    metrics.setGlobalMeterProvider(new MeterProvider());
    seen.push(observing());
    metrics.disable();
    seen.push(observing());
    trace.setGlobalTracerProvider(new BasicTracerProvider());
    seen.push(observing());
    console.log(JSON.stringify(seen));`;
  const out = execFileSync(process.execPath, ['--input-type=module', '-e', script],
    { cwd: new URL('..', import.meta.url), encoding: 'utf8' });
  assert.deepEqual(JSON.parse(out.trim().split('\n').pop()), [false, true, true, false, true]);
});

test('without @opentelemetry/api the helpers run and measure nothing', () => {
  // A child process whose module resolution refuses @opentelemetry/api, as when the
  // application never installed it.
  const hooks = `export async function resolve(specifier, context, next) {
    if (specifier.startsWith('@opentelemetry/')) {
      const err = new Error('Cannot find package ' + specifier);
      err.code = 'ERR_MODULE_NOT_FOUND';
      throw err;
    }
    return next(specifier, context);
  }`;
  const register = `import { register } from 'node:module';
    register('data:text/javascript,' + encodeURIComponent(${JSON.stringify(hooks)}));`;
  const script = `
    import { runOnce, telemetryAvailable } from './index.js';
    import pg from 'pg';
    const client = new pg.Client({ database: ${JSON.stringify(db)} });
    await client.connect();
    const r = await runOnce(client, { scope: 'telemetry', key: '${randomUUID()}',
      statement: ${JSON.stringify(STATEMENT)}, params: ['x'] });
    await client.end();
    console.log(JSON.stringify({ available: telemetryAvailable(), replayed: r.replayed }));`;
  const out = execFileSync(process.execPath, ['--import', `data:text/javascript,${encodeURIComponent(register)}`,
    '--input-type=module', '-e', script], { cwd: new URL('..', import.meta.url), encoding: 'utf8' });
  assert.deepEqual(JSON.parse(out.trim().split('\n').pop()), { available: false, replayed: false });
});
