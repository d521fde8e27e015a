// The Node half of bench/clients.sh: @idempotency/client's runOnce against the bare SQL calls,
// over one pg.Client, and the client-side fingerprint's share of a request.
//
//   node node_overhead.mjs --bodies DIR --rounds 5 --requests 2000 --requests-100k 100 \
//       --out result.json
//
// The client package is clients/node of this checkout (IDEM_NODE_CLIENT_DIR: another folder
// with the same layout); `pg` is resolved from that package's node_modules. Connects with the
// PG* environment. As py_overhead.py: every request timed on its own (process.hrtime.bigint),
// the two variants taking turns request by request (the first of each turn alternating):
//   bare         fingerprint(body) with the package's fingerprint (timed on its own too: fp_1k /
//                fp_100k, the fingerprint within a request), then BEGIN; SELECT * FROM
//                idempotency.reserve($1, $2, $3); W2's INSERT ... RETURNING id;
//                SELECT idempotency.complete($1, $2, 201, $3); COMMIT
//   helper       runOnce(client, { scope, key, request: body }, work), the same INSERT in work
// --requests turns with the 1 KB body (bare, helper), then --requests-100k turns with the
// 100 KB body (bare_100k, helper_100k); the body is a JSON text, as an HTTP handler has it.
// Then fp_1k_loop, fp_100k_loop: fingerprint(body) called in a loop (warm caches, JIT-compiled).
// Writes each round's median per variant (microseconds) as JSON, in py_overhead.py's layout.
import { readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

const here = dirname(fileURLToPath(import.meta.url));
const clientDir = resolve(process.env.IDEM_NODE_CLIENT_DIR
  ?? join(here, '..', '..', 'clients', 'node'));
const pkg = JSON.parse(readFileSync(join(clientDir, 'package.json'), 'utf8'));
const require = createRequire(join(clientDir, 'package.json'));
const pg = require('pg');
const pgVersion = JSON.parse(readFileSync(require.resolve('pg/package.json'), 'utf8')).version;

// The package's entry point: exports "." (a string, or its import / default condition), else main.
function entry() {
  let e = pkg.exports;
  if (e && typeof e === 'object' && '.' in e) e = e['.'];
  if (e && typeof e === 'object') e = e.import ?? e.default ?? e.node;
  return e ?? pkg.main ?? 'index.js';
}
const { fingerprint, runOnce } = await import(pathToFileURL(join(clientDir, entry())).href);

const { values: opt } = parseArgs({
  options: {
    bodies: { type: 'string' },
    rounds: { type: 'string', default: '5' },
    requests: { type: 'string', default: '2000' },
    'requests-100k': { type: 'string', default: '100' },
    out: { type: 'string' },
  },
});
const num = (name) => Number.parseInt(opt[name], 10);

const SCOPE = 'bench-clients-node';
// W2's business write (bench/workloads/w2_extension.sql); client 1 is Python, 2 Node.
const INSERT =
  "INSERT INTO bench.orders (client, amount, note) VALUES (2, $1, 'order') RETURNING id";

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const now = () => process.hrtime.bigint();
const us = (ns) => Number(ns) / 1000;

const bodies = {};
for (const name of ['1k', '100k']) {
  bodies[name] = readFileSync(join(opt.bodies, `body-${name}.json`), 'utf8');
}

const client = new pg.Client();
await client.connect();
// Same bytes as the server's fingerprint (a check, not a timing).
for (const [name, body] of Object.entries(bodies)) {
  const { rows } = await client.query('SELECT idempotency.fingerprint($1::jsonb) AS fp', [body]);
  if (!Buffer.from(fingerprint(body)).equals(rows[0].fp)) {
    throw new Error(`fingerprint of body-${name}: client and server differ`);
  }
}

const runId = `${process.pid}-${Date.now()}`;
let seq = 0;
let completed = 0;
const nextKey = (variant) => `${runId}-${variant}-${++seq}`;

async function businessInsert(c) {
  const { rows } = await c.query(INSERT, [seq]);
  return { order_id: rows[0].id, status: 'created' };
}

// Each runs one request and returns its time in microseconds; bare: [request, fingerprint].
async function bare(body) {
  const key = nextKey('bare');
  const t0 = now();
  const fp = fingerprint(body);
  const t1 = now();
  await client.query('BEGIN');
  const { rows } = await client.query('SELECT * FROM idempotency.reserve($1, $2, $3)',
    [SCOPE, key, fp]);
  if (rows[0].outcome !== 'new') {
    throw new Error(`bare: reserve of a fresh key gave ${rows[0].outcome}`);
  }
  const response = await businessInsert(client);
  await client.query('SELECT idempotency.complete($1, $2, $3, $4)', [SCOPE, key, 201, response]);
  await client.query('COMMIT');
  const t2 = now();
  completed += 1;
  return [us(t2 - t0), us(t1 - t0)];
}

async function helper(body) {
  const key = nextKey('helper');
  const t0 = now();
  const result = await runOnce(client, { scope: SCOPE, key, request: body }, async (c) => ({
    statusCode: 201,
    response: await businessInsert(c),
  }));
  const spent = us(now() - t0);
  if (result.replayed || result.statusCode !== 201) {
    throw new Error(`helper: a fresh key gave ${JSON.stringify(result)}`);
  }
  completed += 1;
  return spent;
}

// n turns of a bare and a helper request, the first of each turn alternating: the medians of
// the bare requests, the helper requests and the bare requests' fingerprints.
async function takeTurns(body, n) {
  const bareTimes = [];
  const helperTimes = [];
  const fpTimes = [];
  for (let i = 0; i < n; i++) {
    if (i % 2) helperTimes.push(await helper(body));
    const [spent, fpSpent] = await bare(body);
    bareTimes.push(spent);
    fpTimes.push(fpSpent);
    if (!(i % 2)) helperTimes.push(await helper(body));
  }
  return [median(bareTimes), median(helperTimes), median(fpTimes)];
}

// The median of fingerprint(body) called n times in a row.
function loop(body, n) {
  const times = [];
  for (let i = 0; i < n; i++) {
    const t0 = now();
    fingerprint(body);
    times.push(us(now() - t0));
  }
  return median(times);
}

const small = bodies['1k'];
const large = bodies['100k'];
const requests = num('requests');
const requests100k = num('requests-100k');

// Warm-up (the JIT, the server's caches): a tenth of a round, not recorded.
await takeTurns(small, Math.max(10, Math.ceil(requests / 10)));
await takeTurns(large, Math.max(2, Math.ceil(requests100k / 10)));

const rounds = [];
for (let r = 0; r < num('rounds'); r++) {
  const row = {};
  [row.bare, row.helper, row.fp_1k] = await takeTurns(small, requests);
  [row.bare_100k, row.helper_100k, row.fp_100k] = await takeTurns(large, requests100k);
  row.fp_1k_loop = loop(small, requests);
  row.fp_100k_loop = loop(large, requests100k);
  rounds.push(row);
  const figures = Object.entries(row).map(([k, v]) => `${k} ${v.toFixed(1)}`).join('  ');
  console.error(`  node round ${r + 1}/${num('rounds')}: ${figures} (us)`);
}

const { rows } = await client.query(
  "SELECT count(*)::int AS n FROM idempotency.keys WHERE scope = $1 AND state = 'completed'",
  [SCOPE]);
if (rows[0].n !== completed) {
  throw new Error(`${rows[0].n} completed keys for ${completed} requests`);
}
await client.end();

writeFileSync(opt.out, JSON.stringify({
  client: 'node',
  versions: `${pkg.name} ${pkg.version}, pg ${pgVersion}, Node.js ${process.versions.node}`,
  bodies: Object.fromEntries(Object.entries(bodies).map(([n, v]) => [n, Buffer.byteLength(v)])),
  counts: { requests, requests_100k: requests100k },
  rounds,
}, null, 1));
