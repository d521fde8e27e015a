// OpenTelemetry for the helpers, through @opentelemetry/api when the application has it (an
// optional peer dependency): a span per claim and a counter and a duration histogram by
// outcome, recorded by whatever SDK the application registered. Without the package nothing
// is measured and the helpers run as they would without this module.
//
// A span "idempotency <helper>" (runOnce, runExternal, middleware, claimOnce, consumeOnce,
// applyOnce, the outbox consumer's included, bullmq: a BullMQ processor's run), a child of the active span, with the attributes
//   idempotency.helper, idempotency.scope, idempotency.key (only with recordKeys: keys may
//   carry customer data), idempotency.outcome (new, replay, in_progress, mismatch, too_old;
//   absent when the call failed before the server answered the claim), idempotency.replayed,
//   idempotency.attempt (the claim's; claimOnce, consumeOnce and applyOnce have none but a
//   poison message's), idempotency.round_trips (the helper's own, not the work's),
//   idempotency.http_status (409, 422, ... for an error that has one), error.type, and for
//   the middleware ("idempotency middleware") http.response.status_code, the status it
//   answered with (a 409 or 422 of its own is an answer there, not an error);
// an error thrown to the caller (the 409 of a key in progress, the 422 of a mismatch
// included) is recorded on the span, whose status is then ERROR.
// Metrics (OpenTelemetry's names): idempotency.client.claims (an observable counter) and
// idempotency.client.duration (seconds, a histogram), with idempotency.helper and
// idempotency.outcome ("error" when there is none).
import { AsyncLocalStorage } from 'node:async_hooks';
import { performance } from 'node:perf_hooks';
import { CLIENT_VERSION } from './versions.js';

let api = null;
try {
  api = await import('@opentelemetry/api');
} catch {
  // not installed: every call below is skipped
}

const NAME = '@idempotency/client';
const settings = { recordKeys: false, tracerProvider: undefined, meterProvider: undefined };
let enabled = api !== null;
let instruments = null; // made on the first observed call, again after configureTelemetry
const roundTrips = new AsyncLocalStorage();

// configureTelemetry({ recordKeys, tracerProvider, meterProvider, enabled }): the providers to
// use instead of the global ones, whether spans carry the key, and a switch (enabled: false
// measures nothing). Instruments are made on the next call: the global MeterProvider must be
// registered before the first call, or configureTelemetry() called after registering it.
export function configureTelemetry(options = {}) {
  settings.recordKeys = options.recordKeys === true;
  settings.tracerProvider = options.tracerProvider;
  settings.meterProvider = options.meterProvider;
  enabled = api !== null && options.enabled !== false;
  instruments = null;
}

// Whether @opentelemetry/api was found (the helpers are then observed unless disabled).
export const telemetryAvailable = () => api !== null;

// The claims per helper and outcome since the process started: { labels, n } by helper, then
// by outcome. The counter idempotency.client.claims is an observable one that reads them when
// the SDK collects, so a call adds 1 to a number instead of hashing its attributes a second
// time (the SDK hashes them on each record: the histogram's is the call's one).
const claimCounts = new Map();

function claimCount(helper, outcome) {
  let byOutcome = claimCounts.get(helper);
  if (byOutcome === undefined) claimCounts.set(helper, byOutcome = new Map());
  let count = byOutcome.get(outcome);
  if (count === undefined) {
    count = { labels: Object.freeze({ 'idempotency.helper': helper, 'idempotency.outcome': outcome }),
      n: 0 };
    byOutcome.set(outcome, count);
  }
  return count;
}

function observeClaims(result) {
  for (const byOutcome of claimCounts.values())
    for (const { labels, n } of byOutcome.values()) result.observe(n, labels);
}

function makeInstruments() {
  instruments?.claims.removeCallback(observeClaims);
  const tracer = (settings.tracerProvider ?? api.trace).getTracer(NAME, CLIENT_VERSION);
  const meter = (settings.meterProvider ?? api.metrics).getMeter(NAME, CLIENT_VERSION);
  const claims = meter.createObservableCounter('idempotency.client.claims', {
    description: 'Calls of the helpers by outcome of their claim', unit: '{claim}' });
  claims.addCallback(observeClaims);
  return {
    tracer,
    claims,
    duration: meter.createHistogram('idempotency.client.duration', {
      description: 'Time of a helper call, the work included', unit: 's' }),
  };
}

// The round trips of the helper call being observed ({ n }): a value of the call's
// OpenTelemetry context (the context manager the application registered carries it, no
// second AsyncLocalStorage per call), or, with no context manager registered (the API's
// default keeps no context) but a span that records, in roundTrips. A span that does not
// record (no SDK, or sampled out) counts none: on Node 20 the first AsyncLocalStorage.run
// turns on promise hooks for the whole process, a cost of tens of microseconds per request
// for nothing.
const ROUND_TRIPS = api?.createContextKey('idempotency round trips');

// Counts one round trip of the helper being observed (connection.js calls it per statement or
// batch sent); nothing when no helper is observed.
export function noteRoundTrip() {
  if (!enabled) return;
  const count = api.context.active().getValue(ROUND_TRIPS) ?? roundTrips.getStore();
  if (count !== undefined) count.n += 1;
}

function runCounted(context, count, run) {
  if (api.context.active() === context) return run();
  return roundTrips.run(count, run);
}

// The API's own no-ops, which its global providers hand out until an SDK registers real ones.
// A provider that is not one of them records: only then is a helper call observed, so an
// application that has the API (a dependency of a dependency, say) and no SDK pays nothing per
// call. Were these no longer the API's singletons, every call would be observed, as before.
const NOOP_TRACER_PROVIDER = api && new api.ProxyTracerProvider().getDelegate();
const NOOP_METER = api?.createNoopMeter();

function providersRecord() {
  const traces = settings.tracerProvider ?? api.trace.getTracerProvider();
  if ((traces.getDelegate?.() ?? traces) !== NOOP_TRACER_PROVIDER) return true;
  const metrics = settings.meterProvider ?? api.metrics.getMeterProvider();
  return metrics.getMeter(NAME, CLIENT_VERSION) !== NOOP_METER;
}

// Whether helper calls are observed now: the helpers call their bare function when not (no
// wrapper, no closure, nothing allocated), and observed() when they are.
export const observing = () => enabled && providersRecord();

// observed(helper, scope, key, run, outcomeOf): run()'s promise inside a span (call it only when
// observing()). key: the key or a function giving it (computed only with recordKeys).
// outcomeOf(result) gives { outcome, attempt, status } of a call that returned (status: the
// HTTP status the middleware answered with).
export async function observed(helper, scope, key, run, outcomeOf) {
  if (instruments === null) instruments = makeInstruments();
  const attributes = { 'idempotency.helper': helper, 'idempotency.scope': scope };
  if (settings.recordKeys) attributes['idempotency.key'] = typeof key === 'function' ? key() : key;
  const started = performance.now();
  const parent = api.context.active();
  const span = instruments.tracer.startSpan(spanName(helper), { attributes }, parent);
  const count = { n: 0 };
  let result;
  try {
    // A span the sampler dropped records nothing: the call runs in the caller's context (no
    // context entered, no round trips counted), and only the metrics see it.
    if (!span.isRecording()) result = await run();
    else {
      const context = api.trace.setSpan(parent, span).setValue(ROUND_TRIPS, count);
      result = await api.context.with(context, runCounted, undefined, context, count, run);
    }
  } catch (err) {
    finish(span, helper, err?.constructor?.outcome, err?.reservation?.attempt ?? err?.attempt,
      count.n, started, err);
    throw err;
  }
  const { outcome, attempt, status } = outcomeOf(result);
  if (status !== undefined) span.setAttribute('http.response.status_code', status);
  finish(span, helper, outcome, attempt, count.n, started, null);
  return result;
}

const spanNames = new Map();
function spanName(helper) {
  let name = spanNames.get(helper);
  if (name === undefined) spanNames.set(helper, name = `idempotency ${helper}`);
  return name;
}

function finish(span, helper, outcome, attempt, trips, started, err) {
  if (outcome !== undefined) {
    span.setAttribute('idempotency.outcome', outcome);
    span.setAttribute('idempotency.replayed', outcome === 'replay');
  }
  if (attempt !== undefined && attempt !== null) span.setAttribute('idempotency.attempt', attempt);
  span.setAttribute('idempotency.round_trips', trips);
  if (err !== null) {
    span.setAttribute('error.type', err?.name ?? 'Error');
    if (err?.httpStatus !== undefined) span.setAttribute('idempotency.http_status', err.httpStatus);
    span.recordException(err);
    span.setStatus({ code: api.SpanStatusCode.ERROR, message: String(err?.message ?? err) });
  }
  span.end();
  const count = claimCount(helper, outcome ?? 'error');
  count.n += 1;
  instruments.duration.record((performance.now() - started) / 1000, count.labels);
}
