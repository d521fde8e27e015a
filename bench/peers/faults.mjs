// The fault driver: clients that retry each key with the same body until they get an answer
// (2xx), while a fault hits. It starts the service itself (service.mjs, or fastify.mjs for a
// STRATEGY fastify-...), so that it can SIGKILL and restart it.
//   node faults.mjs FAULT KEYS CLIENTS      FAULT: kill | redis | pg
// kill: the service is SIGKILLed and restarted every ~1.5 s, at least 4 times; redis / pg:
// FAULT_CMD (a shell command that restarts Redis without saving, or PostgreSQL with -m
// immediate) runs once a third of the keys are answered. Clients take new keys until KEYS are
// done and the faults have happened. Afterwards, per key: lost (answered, no order), doubled (more
// than one order), wrong (the answer names an order that does not exist). Prints one JSON line.
import { execSync, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import http from 'node:http';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import pg from 'pg';

const [fault, nKeys, nClients] = process.argv.slice(2);
const SERVICE = fileURLToPath(new URL(
  process.env.STRATEGY?.startsWith('fastify-') ? 'fastify.mjs' : 'service.mjs', import.meta.url));
const port = Number(process.env.PORT);
const deadline = Date.now() + Number(process.env.FAULT_SECONDS ?? 120) * 1000;
let service;
let kills = 0;

async function start() {
  service = spawn(process.execPath, [SERVICE], { stdio: ['ignore', 'pipe', 'ignore'] });
  const lines = createInterface({ input: service.stdout });
  await Promise.race([once(lines, 'line'), once(service, 'exit')]);
}

const agent = new http.Agent({ keepAlive: true });
function post(key, body) {
  return new Promise((resolve) => {
    const req = http.request({ host: '127.0.0.1', port, path: '/orders', method: 'POST', agent,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body),
        'idempotency-key': key }, timeout: 10000 }, (res) => {
      let text = '';
      res.on('data', (c) => { text += c; });
      res.on('end', () => resolve({ status: res.statusCode, text }));
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve({ status: 0 }));
    req.end(body);
  });
}

const MIN_FAULTS = fault === 'kill' ? Number(process.env.FAULT_MIN_KILLS ?? 4) : 1;
const keys = [];
const answers = new Map();
let unanswered = 0;
let faulting = true;
async function client() {
  while ((keys.length < Number(nKeys) || (faulting && kills < MIN_FAULTS)) &&
    Date.now() < deadline) {
    const key = randomUUID();
    keys.push(key);
    const body = JSON.stringify({ item: `sku-${key.slice(0, 6)}`, qty: 1 });
    for (;;) {
      if (Date.now() > deadline) { unanswered++; break; }
      const r = await post(key, body);
      if (r.status >= 200 && r.status < 300) {
        try { answers.set(key, JSON.parse(r.text).id ?? null); } catch { answers.set(key, null); }
        break;
      }
      await sleep(r.status === 409 ? 100 : 20);
    }
  }
}

await start();
const faulter = (async () => {
  if (fault === 'kill') {
    while (faulting) {
      await sleep(1000 + Math.random() * 1000);
      if (!faulting) break;
      service.kill('SIGKILL');
      kills++;
      await once(service, 'exit');
      await start();
    }
  } else {
    while (faulting && answers.size < Number(nKeys) / 3) await sleep(10);
    if (faulting) {
      execSync(process.env.FAULT_CMD, { stdio: 'ignore', shell: '/bin/bash' });
      kills++;
    }
  }
})();
await Promise.all(Array.from({ length: Number(nClients) }, client));
faulting = false;
await faulter;
service.kill('SIGKILL');
agent.destroy();

const db = new pg.Client();
await db.connect();
const { rows } = await db.query(
  'SELECT k, array_agg(id) AS ids FROM bench_orders WHERE k = ANY($1) GROUP BY k', [keys]);
await db.end();
const orders = new Map(rows.map((r) => [r.k, r.ids.map(Number)]));
let lost = 0;
let doubled = 0;
let wrong = 0;
for (const key of keys) {
  const ids = orders.get(key) ?? [];
  if (!answers.has(key)) continue;
  if (ids.length === 0) lost++;
  if (ids.length > 1) doubled++;
  const id = answers.get(key);
  if (id === null || !ids.includes(Number(id))) wrong++;
}
console.log(JSON.stringify({ fault, keys: keys.length, answered: answers.size, unanswered,
  faults: kills, lost, doubled, wrong }));
