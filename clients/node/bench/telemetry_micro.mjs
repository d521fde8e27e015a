// The telemetry's own cost per helper call, without the database: lib/telemetry.js's observed()
// around a call that resolves at once, with telemetry off (configureTelemetry({ enabled:
// false }), what a process without @opentelemetry/api runs: one boolean test) and with an SDK
// (the AsyncLocalStorage context manager, BatchSpanProcessor into an exporter that drops the
// spans, a MeterProvider), ROUNDS rounds alternating the two, N calls each. Prints each mode's
// median nanoseconds per call, of wall time and of the process's CPU time (process.cpuUsage:
// less exposed to other processes on a loaded machine); set beside a statement-form call's
// time (bench/telemetry.sh), it is the share of throughput the instrumentation costs.
import { context, metrics, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { BasicTracerProvider, BatchSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics';
import { configureTelemetry, observed } from '../lib/telemetry.js';

const rounds = Number(process.env.ROUNDS ?? 7);
const n = Number(process.env.N ?? 20000);
const dropped = { export: (spans, done) => done({ code: 0 }), shutdown: async () => {} };
class Reader extends MetricReader {
  async onForceFlush() {}
  async onShutdown() {}
}
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new BatchSpanProcessor(dropped)] }));
metrics.setGlobalMeterProvider(new MeterProvider({ readers: [new Reader()] }));
const result = { replayed: false, attempt: 1 };
const claimOf = (r) => ({ outcome: r.replayed ? 'replay' : 'new', attempt: r.attempt });
const work = async () => result;
// off: what a helper runs when not observing() (its bare function); sdk: observed() around it
const call = { off: () => work(), sdk: () => observed('runOnce', 'bench', 'k', work, claimOf) };
async function loop(mode) {
  const start = process.hrtime.bigint();
  const cpu = process.cpuUsage();
  for (let i = 0; i < n; i++) await call[mode]();
  const used = process.cpuUsage(cpu);
  return [Number(process.hrtime.bigint() - start) / n, (used.user + used.system) * 1000 / n];
}
const times = { off: [], sdk: [] };
const cpus = { off: [], sdk: [] };
for (let r = 0; r < rounds; r++) {
  for (const mode of r % 2 ? ['sdk', 'off'] : ['off', 'sdk']) {
    configureTelemetry({ enabled: mode === 'sdk' });
    const [wall, cpu] = await loop(mode);
    times[mode].push(wall);
    cpus[mode].push(cpu);
  }
}
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const list = (xs) => xs.map((t) => t.toFixed(0)).join(' ');
for (const mode of ['off', 'sdk']) {
  console.log(`${mode} median ${median(times[mode]).toFixed(0)} ns/call wall, ` +
    `${median(cpus[mode]).toFixed(0)} ns/call CPU; rounds wall ${list(times[mode])}, CPU ${list(cpus[mode])}`);
}
