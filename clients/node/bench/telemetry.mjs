// The cost of the telemetry (lib/telemetry.js) on the statement form's throughput: runOnce with
// a statement, a new key per call, one connection, for SECONDS, in one of these modes:
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
//   sdk-app-span  sdk-off, and the application makes one span of its own per call
//           (tracer.startActiveSpan around runOnce, ended when it settles): the SDK's own cost
//           of one active span per call, which any instrumented library pays, without the
//           client's instrumentation
// A warm-up of WARMUP seconds (default 2) runs first: V8 compiles the SDK's code on helper
// threads during the first seconds, CPU that process.cpuUsage counts and a steady process
// does not pay. Prints "MODE calls/s CPU-microseconds/call main-thread-CPU-microseconds/call"
// (the main thread's from /proc/thread-self/stat, 10 ms ticks). bench/telemetry.sh runs the
// modes in rotated rounds.
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import pg from 'pg';

const mode = process.argv[2];
const seconds = Number(process.argv[3] ?? 3);
const warmup = Number(process.env.WARMUP ?? 2);
const withSdk = ['sdk', 'sdk-off', 'sdk-entered', 'sdk-app-span'].includes(mode);
if (withSdk) {
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
if (withSdk && mode !== 'sdk') configureTelemetry({ enabled: false });
if (mode === 'sdk-entered') {
  const api = await import('@opentelemetry/api');
  api.context.with(api.context.active().setValue(Symbol('entered'), true), () => {});
}
if (telemetryAvailable() !== (mode !== 'absent')) throw new Error(`mode ${mode}: api found ${telemetryAvailable()}`);
const client = new pg.Client();
await client.connect();
const options = { scope: 'bench_telemetry', statement: 'SELECT $1::text AS item', params: ['x'] };
let call = () => runOnce(client, { ...options, key: randomUUID() });
if (mode === 'sdk-app-span') {
  const api = await import('@opentelemetry/api');
  const tracer = api.trace.getTracer('bench');
  const plain = call;
  call = () => tracer.startActiveSpan('app call', (span) => plain().finally(() => span.end()));
}
// the main thread's user + system CPU, microseconds (Linux: clock ticks of 10 ms)
const mainCpu = () => {
  const fields = readFileSync('/proc/thread-self/stat', 'utf8').split(') ')[1].split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10000;
};
const warmEnd = performance.now() + warmup * 1000;
while (performance.now() < warmEnd) await call();
let calls = 0;
const cpu = process.cpuUsage();
const main = mainCpu();
const end = performance.now() + seconds * 1000;
while (performance.now() < end) {
  await call();
  calls += 1;
}
const used = process.cpuUsage(cpu);
const usedMain = mainCpu() - main;
await client.end();
// calls per second, and the client process's and its main thread's CPU microseconds per call
// (user + system): the instrumentation's own cost, less exposed to the machine's noise than
// the throughput
console.log(`${mode} ${(calls / seconds).toFixed(0)} ${((used.user + used.system) / calls).toFixed(1)} ` +
  `${(usedMain / calls).toFixed(1)}`);
