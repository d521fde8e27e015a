// bench/peers without HTTP: a strategy's own work (work.mjs) for one request at a time on each
// of CONNS workers, in one process, for SECONDS. It shows what the service's HTTP layer (the
// same for every strategy) hides: the cost of the idempotency layer itself.
//   node loop.mjs STRATEGY MODE CONNS SECONDS KEYFILE
// Environment: PG*, REDIS_URL; LOOP_POSTMASTER, LOOP_REDIS: the pids whose CPU (the
// postmaster's with its children's, Redis's) is counted per request too; LOOP_HZ: the clock
// ticks per second of /proc (getconf CLK_TCK).
// STRATEGY: middleware ((1)'s statements), statement ((1s): runOnce's statement form), fortress,
// accelerator, or insert (the business write alone: no idempotency). MODE new: a new key each time, the completed keys written to
// KEYFILE; replay: the keys of KEYFILE again and again. Prints one JSON line: requests,
// seconds, rps, replays (answers that were), and CPU per request in us: client_us (this
// process), postgresql_us, redis_us.
import { randomUUID } from 'node:crypto';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import {
  accelerate, fortressTx, insertOrder, middlewareStatements, newPool, redis, sha, statementOnce,
} from './work.mjs';

const [strategy, mode, conns, seconds, keyFile] = process.argv.slice(2);
const POSTMASTER = Number(process.env.LOOP_POSTMASTER ?? 0);
const REDIS = Number(process.env.LOOP_REDIS ?? 0);
const TICK_US = 1e6 / Number(process.env.LOOP_HZ ?? 100);

// CPU ticks (user + system) of the postmaster and its children, and of Redis, from /proc.
function ticks() {
  let postgresql = 0;
  let redisTicks = 0;
  for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    let stat;
    try {
      stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
    } catch {
      continue; // gone meanwhile
    }
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' '); // fields from the 3rd on
    const cpu = Number(f[11]) + Number(f[12]);
    if (Number(pid) === POSTMASTER || Number(f[1]) === POSTMASTER) postgresql += cpu;
    if (Number(pid) === REDIS) redisTicks += cpu;
  }
  return { postgresql, redis: redisTicks };
}
const pool = newPool();
const r = strategy === 'accelerator' ? await redis() : null;
const bodyOf = (key) => JSON.stringify({ item: `sku-${key.slice(0, 6)}`, qty: 1 });

const requestOf = {
  middleware: (key, raw, body) => middlewareStatements(pool, key, raw, body),
  statement: (key, raw, body) => statementOnce(pool, key, raw, body),
  fortress: (key, raw, body) => fortressTx(pool, key, sha(raw), body),
  accelerator: (key, raw, body) => accelerate(r, pool, key, sha(raw), body),
  insert: async (key, raw, body) =>
    ({ status: 201, body: { id: await insertOrder(pool, key, body) } }),
}[strategy];
if (!requestOf) throw new Error(`unknown strategy ${strategy}`);
if (mode === 'replay' && strategy === 'insert') throw new Error('insert has no replays');

const replayKeys = mode === 'replay'
  ? readFileSync(keyFile, 'utf8').split('\n').filter(Boolean) : [];
if (mode === 'replay' && replayKeys.length === 0) throw new Error(`no keys in ${keyFile}`);
let next = 0;
const keyFor = () => (mode === 'replay' ? replayKeys[next++ % replayKeys.length] : randomUUID());

const completed = [];
let requests = 0;
let replays = 0;
async function worker(until) {
  while (Date.now() < until) {
    const key = keyFor();
    const text = bodyOf(key);
    const out = await requestOf(key, Buffer.from(text), JSON.parse(text));
    if (out.status !== 201 && !out.replay)
      throw new Error(`${strategy}: answer ${out.status} for ${key}`);
    // every strategy answers the same body, the order's id as node-postgres reads a bigint
    if (!/^[0-9]+$/.test(out.body?.id))
      throw new Error(`${strategy}: answer ${JSON.stringify(out.body)} for ${key}`);
    if (out.replay) replays++;
    else if (mode === 'new') completed.push(key);
    requests++;
  }
}

const run = async (secs) => Promise.all(Array.from({ length: Number(conns) },
  () => worker(Date.now() + secs * 1000)));
await run(0.3); // warm: connections open, statements prepared, code compiled
requests = 0;
replays = 0;
const others0 = ticks();
const cpu0 = process.cpuUsage();
const t0 = process.hrtime.bigint();
await run(Number(seconds));
const secs = Number(process.hrtime.bigint() - t0) / 1e9;
const cpu = process.cpuUsage(cpu0);
const others = ticks();
if (mode === 'new' && keyFile) writeFileSync(keyFile, completed.join('\n') + '\n');
const per = (us) => us / Math.max(requests, 1);
console.log(JSON.stringify({ requests, seconds: secs, rps: requests / secs, replays,
  client_us: per(cpu.user + cpu.system),
  postgresql_us: per((others.postgresql - others0.postgresql) * TICK_US),
  redis_us: per((others.redis - others0.redis) * TICK_US) }));
await pool.end();
await r?.quit();
