// The Node half of bench/clients.sh: @idempotency/client's runOnce against the bare SQL calls,
// over one pg.Client, and the client-side fingerprint's share of a request.
//
//   node node_overhead.mjs --bodies DIR --rounds 5 --requests 2000 --requests-100k 200 \
//       --fp-iterations 2000 --fp-iterations-100k 100 --out result.json
//
// The client package is clients/node of this checkout (IDEM_NODE_CLIENT_DIR: another folder
// with the same layout); `pg` is resolved from that package's node_modules. Connects with the
// PG* environment. Variants, every request timed on its own (process.hrtime.bigint), the order
// rotated each round:
//   bare         fingerprint(body) with the package's fingerprint, then BEGIN; SELECT * FROM
//                idempotency.reserve($1, $2, $3); INSERT ... RETURNING id;
//                SELECT idempotency.complete($1, $2, 201, $3); COMMIT
//   helper       runOnce(client, { scope, key, request: body }, work): the same INSERT in work
//   helper_100k  the same with the 100 KB body
//   fp_1k        fingerprint(body) alone, 1 KB body;  fp_100k: the 100 KB body
// The body of bare and helper is the 1 KB one (a JSON text, as an HTTP handler has it). Writes
// per-round medians (microseconds) as JSON, in the same layout as py_overhead.py.
import { readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

const here = dirname(fileURLToPath(import.meta.url));
const clientDir = resolve(process.env.IDEM_NODE_CLIENT_DIR ?? join(here, '..', '..', 'clients', 'node'));
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
    'requests-100k': { type: 'string', default: '200' },
    'fp-iterations': { type: 'string', default: '2000' },
    'fp-iterations-100k': { type: 'string', default: '100' },
    out: { type: 'string' },
  },
});
const num = (name) => Number.parseInt(opt[name], 10);

const SCOPE = 'bench-clients-node';
// W2's business write (bench/workloads/w2_extension.sql); client 1 is Python, 2 Node.
const INSERT = "INSERT INTO bench.orders (client, amount, note) VALUES (2, $1, 'order') RETURNING id";

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const now = () => process.hrtime.bigint();
const us = (ns) => Number(ns) / 1000;

const bodies = {};
for (const name of ['1k', '100k']) bodies[name] = readFileSync(join(opt.bodies, `body-${name}.json`), 'utf8');

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

async function businessInsert(c, amount) {
  const { rows } = await c.query(INSERT, [amount]);
  return { order_id: rows[0].id, status: 'created' };
}

async function bare(n, body) {
  const times = [];
  for (let i = 0; i < n; i++) {
    const key = nextKey('bare');
    const t0 = now();
    const fp = fingerprint(body);
    await client.query('BEGIN');
    const { rows } = await client.query('SELECT * FROM idempotency.reserve($1, $2, $3)', [SCOPE, key, fp]);
    if (rows[0].outcome !== 'new') throw new Error(`bare: reserve of a fresh key gave ${rows[0].outcome}`);
    const response = await businessInsert(client, i);
    await client.query('SELECT idempotency.complete($1, $2, $3, $4)', [SCOPE, key, 201, response]);
    await client.query('COMMIT');
    times.push(us(now() - t0));
  }
  completed += n;
  return times;
}

async function helper(n, body, variant = 'helper') {
  const times = [];
  for (let i = 0; i < n; i++) {
    const key = nextKey(variant);
    const t0 = now();
    const result = await runOnce(client, { scope: SCOPE, key, request: body }, async (c) => ({
      statusCode: 201,
      response: await businessInsert(c, i),
    }));
    times.push(us(now() - t0));
    if (result.replayed || result.statusCode !== 201) {
      throw new Error(`${variant}: a fresh key gave ${JSON.stringify(result)}`);
    }
  }
  completed += n;
  return times;
}

function fp(n, body) {
  const times = [];
  for (let i = 0; i < n; i++) {
    const t0 = now();
    fingerprint(body);
    times.push(us(now() - t0));
  }
  return times;
}

const small = bodies['1k'];
const large = bodies['100k'];
const variants = {
  bare: () => bare(num('requests'), small),
  helper: () => helper(num('requests'), small),
  helper_100k: () => helper(num('requests-100k'), large, 'helper_100k'),
  fp_1k: () => fp(num('fp-iterations'), small),
  fp_100k: () => fp(num('fp-iterations-100k'), large),
};
const names = Object.keys(variants);

// Warm-up (the JIT, the server's caches): a tenth of a round, not recorded.
const tenth = (name, least) => Math.max(least, Math.ceil(num(name) / 10));
await bare(tenth('requests', 10), small);
await helper(tenth('requests', 10), small);
await helper(tenth('requests-100k', 2), large, 'helper_100k');
fp(tenth('fp-iterations', 10), small);
fp(tenth('fp-iterations-100k', 2), large);

const rounds = [];
for (let r = 0; r < num('rounds'); r++) {
  const order = [...names.slice(r % names.length), ...names.slice(0, r % names.length)];
  const row = {};
  for (const name of order) row[name] = median(await variants[name]());
  rounds.push(row);
  console.error(`  node round ${r + 1}/${num('rounds')}: ${names.map((n) => `${n} ${row[n].toFixed(1)}`).join('  ')} (us)`);
}

const { rows } = await client.query(
  "SELECT count(*)::int AS n FROM idempotency.keys WHERE scope = $1 AND state = 'completed'", [SCOPE]);
if (rows[0].n !== completed) throw new Error(`${rows[0].n} completed keys for ${completed} requests`);
await client.end();

writeFileSync(opt.out, JSON.stringify({
  client: 'node',
  versions: `${pkg.name} ${pkg.version}, pg ${pgVersion}, Node.js ${process.versions.node}`,
  bodies: Object.fromEntries(Object.entries(bodies).map(([n, v]) => [n, Buffer.byteLength(v)])),
  counts: {
    requests: num('requests'),
    requests_100k: num('requests-100k'),
    fp_iterations: num('fp-iterations'),
    fp_iterations_100k: num('fp-iterations-100k'),
  },
  rounds,
}, null, 1));
