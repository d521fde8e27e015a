// The cost of the telemetry (lib/telemetry.js) on the statement form's throughput: runOnce with
// a statement, a new key per call, one connection, for SECONDS, in one of three modes:
//   absent  @opentelemetry/api cannot be imported (run with bench/hide-otel.mjs, see below)
//   api     the API is installed, no SDK registered (its no-op tracer and meter)
//   sdk     an SDK registered as NodeSDK would: the AsyncLocalStorage context manager, a
//           BasicTracerProvider with a BatchSpanProcessor into an exporter that drops the
//           spans, a MeterProvider with a reader that is never collected
//   sdk-off the same SDK, the helpers not observed (configureTelemetry({ enabled: false })):
//           what the application pays for its SDK (the context manager's promise hooks on
//           Node 20) without the client's instrumentation; sdk against sdk-off is the
//           instrumentation's own cost
//   sdk-entered  sdk-off, and one context entered (context.with) before the calls, as an
//           application whose HTTP server is traced enters one per request: the context
//           manager's AsyncLocalStorage has run once, which on Node 20 turns its promise hooks
//           on for the rest of the process; sdk against sdk-entered is what the
//           instrumentation adds once those hooks are on anyway
// Prints "MODE calls/s CPU-microseconds/call". bench/telemetry.sh runs the modes in rotated rounds.
import { randomUUID } from 'node:crypto';
import pg from 'pg';

const mode = process.argv[2];
const seconds = Number(process.argv[3] ?? 3);
if (mode === 'sdk' || mode === 'sdk-off' || mode === 'sdk-entered') {
  const api = await import('@opentelemetry/api');
  const { AsyncLocalStorageContextManager } = await import('@opentelemetry/context-async-hooks');
  const { BasicTracerProvider, BatchSpanProcessor } = await import('@opentelemetry/sdk-trace-base');
  api.context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  const { MeterProvider, MetricReader } = await import('@opentelemetry/sdk-metrics');
  const dropped = { export: (spans, done) => done({ code: 0 }), shutdown: async () => {} };
  api.trace.setGlobalTracerProvider(new BasicTracerProvider({
    spanProcessors: [new BatchSpanProcessor(dropped)] }));
  class Reader extends MetricReader {
    async onForceFlush() {}
    async onShutdown() {}
  }
  api.metrics.setGlobalMeterProvider(new MeterProvider({ readers: [new Reader()] }));
}
const { configureTelemetry, runOnce, telemetryAvailable } = await import('../index.js');
if (mode === 'sdk-off' || mode === 'sdk-entered') configureTelemetry({ enabled: false });
if (mode === 'sdk-entered') {
  const api = await import('@opentelemetry/api');
  api.context.with(api.context.active().setValue(Symbol('entered'), true), () => {});
}
if (telemetryAvailable() !== (mode !== 'absent')) throw new Error(`mode ${mode}: api found ${telemetryAvailable()}`);
const client = new pg.Client();
await client.connect();
const options = { scope: 'bench_telemetry', statement: 'SELECT $1::text AS item', params: ['x'] };
for (let i = 0; i < 200; i++) await runOnce(client, { ...options, key: randomUUID() }); // warm-up
let calls = 0;
const cpu = process.cpuUsage();
const end = performance.now() + seconds * 1000;
while (performance.now() < end) {
  await runOnce(client, { ...options, key: randomUUID() });
  calls += 1;
}
const used = process.cpuUsage(cpu);
await client.end();
// calls per second, and the client process's CPU microseconds per call (user + system): the
// instrumentation's own cost, less exposed to the machine's noise than the throughput
console.log(`${mode} ${(calls / seconds).toFixed(0)} ${((used.user + used.system) / calls).toFixed(1)}`);
