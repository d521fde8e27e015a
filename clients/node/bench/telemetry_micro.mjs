// The telemetry's own cost per helper call, without the database: lib/telemetry.js's observed()
// around a call that resolves at once, with telemetry off (configureTelemetry({ enabled:
// false }), what a process without @opentelemetry/api runs: one boolean test) and with an SDK
// (BatchSpanProcessor into an exporter that drops the spans, a MeterProvider), ROUNDS rounds
// alternating the two, N calls each. Prints each mode's median nanoseconds per call; set beside
// a statement-form call's time (bench/telemetry.sh), it is the share of throughput the
// instrumentation costs.
import { metrics, trace } from '@opentelemetry/api';
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
trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new BatchSpanProcessor(dropped)] }));
metrics.setGlobalMeterProvider(new MeterProvider({ readers: [new Reader()] }));
const result = { replayed: false, attempt: 1 };
const claimOf = (r) => ({ outcome: r.replayed ? 'replay' : 'new', attempt: r.attempt });
async function loop() {
  const start = process.hrtime.bigint();
  for (let i = 0; i < n; i++) await observed('runOnce', 'bench', 'k', async () => result, claimOf);
  return Number(process.hrtime.bigint() - start) / n;
}
const times = { off: [], sdk: [] };
for (let r = 0; r < rounds; r++) {
  for (const mode of r % 2 ? ['sdk', 'off'] : ['off', 'sdk']) {
    configureTelemetry({ enabled: mode === 'sdk' });
    times[mode].push(await loop());
  }
}
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
for (const mode of ['off', 'sdk'])
  console.log(`${mode} median ${median(times[mode]).toFixed(0)} ns/call, rounds ${times[mode].map((t) => t.toFixed(0)).join(' ')}`);
