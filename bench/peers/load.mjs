// The load generator: keep-alive HTTP clients in a loop, bounded in time and count.
//   node load.mjs URL MODE CONNECTIONS SECONDS MAX_REQUESTS [KEYFILE [SENTFILE]]
// MODE new: a new key each request; replay: keys of KEYFILE (completed before) again and again;
// mix: 80% new keys, 20% a key this run sent before (a retry); burst: one key from every
// connection at once, again and again. Prints one JSON line: requests, ok (2xx), statuses,
// seconds, throughput, p50 / p99 / p99.9 in ms. With KEYFILE and MODE new, writes the
// completed keys there (for replay). With SENTFILE, writes every key sent (once each), so that
// the harness can count the orders each got.
import { randomUUID } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import http from 'node:http';

const [url, mode, conns, seconds, maxRequests, keyFile, sentFile] = process.argv.slice(2);
const agent = new http.Agent({ keepAlive: true, maxSockets: Number(conns) });
const target = new URL(url);
const bodyOf = (key) => JSON.stringify({ item: `sku-${key.slice(0, 6)}`, qty: 1 });

function post(key) {
  return new Promise((resolve) => {
    const body = bodyOf(key);
    const req = http.request({ host: target.hostname, port: target.port, path: '/orders',
      method: 'POST', agent, headers: { 'content-type': 'application/json',
        'content-length': Buffer.byteLength(body), 'idempotency-key': key } }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode));
    });
    req.on('error', () => resolve(0));
    req.end(body);
  });
}

const replayKeys = mode === 'replay'
  ? readFileSync(keyFile, 'utf8').split('\n').filter(Boolean) : [];
const sent = [];
const done = [];
const latencies = [];
const statuses = {};
let issued = 0;
const deadline = Date.now() + Number(seconds) * 1000;
const more = () => issued < Number(maxRequests) && Date.now() < deadline;

async function one(key) {
  issued++;
  const t0 = process.hrtime.bigint();
  const status = await post(key);
  latencies.push(Number(process.hrtime.bigint() - t0) / 1e6);
  statuses[status] = (statuses[status] ?? 0) + 1;
  if (status >= 200 && status < 300) done.push(key);
}

async function worker(i) {
  while (more()) {
    let key;
    if (mode === 'replay') key = replayKeys[(issued + i) % replayKeys.length];
    else if (mode === 'mix' && sent.length > 0 && Math.random() < 0.2)
      key = sent[Math.floor(Math.random() * sent.length)];
    else key = randomUUID();
    sent.push(key);
    await one(key);
  }
}

const t0 = Date.now();
if (mode === 'burst') {
  while (more()) {
    const key = randomUUID();
    sent.push(key);
    await Promise.all(Array.from({ length: Number(conns) }, () => one(key)));
  }
} else {
  await Promise.all(Array.from({ length: Number(conns) }, (_, i) => worker(i)));
}
const secs = (Date.now() - t0) / 1000;
latencies.sort((a, b) => a - b);
const pct = (p) => latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * p))] ?? 0;
if (sentFile) writeFileSync(sentFile, `${[...new Set(sent)].join('\n')}\n`);
if (keyFile && mode === 'new') writeFileSync(keyFile, `${[...new Set(done)].join('\n')}\n`);
console.log(JSON.stringify({ requests: latencies.length, ok: done.length, statuses, seconds: secs,
  rps: latencies.length / secs, p50: pct(0.5), p99: pct(0.99), p999: pct(0.999) }));
agent.destroy();
