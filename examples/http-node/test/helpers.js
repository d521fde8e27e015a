// Shared by the tests: servers as child processes, and direct database checks.
// The tests use the server at ORDERS_URL (started by test.sh) or start their own; they reach
// the database through the usual PGHOST, PGPORT, PGUSER and PGDATABASE.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import pg from 'pg';

const SERVER = fileURLToPath(new URL('../src/server.js', import.meta.url));

export const ALICE = { token: 'alice-token', account: 'acct_alice' };
export const BOB = { token: 'bob-token', account: 'acct_bob' };

// Starts src/server.js; resolves once it listens. port 0 picks a free port.
export async function startServer({ port = 0, env = {} } = {}) {
  const proc = spawn(process.execPath, [SERVER], {
    env: { ...process.env, HOST: '127.0.0.1', PORT: String(port), EXIT_WITH_STDIN: '1', ...env },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  process.on('exit', () => proc.kill('SIGKILL'));
  const output = [];
  const keep = (line) => { output.push(line); if (output.length > 200) output.shift(); };
  createInterface({ input: proc.stderr }).on('line', keep);
  const lines = createInterface({ input: proc.stdout });
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${output.join('\n')}`)), 15000);
    lines.on('line', (line) => {
      keep(line);
      const m = /^listening on (http:\/\/\S+)/.exec(line);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    proc.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`server exited with ${code}:\n${output.join('\n')}`));
    });
  });
  const exited = once(proc, 'exit');
  return {
    url,
    port: Number(new URL(url).port),
    proc,
    output,
    async kill(signal = 'SIGKILL') {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal);
      await exited;
    },
  };
}

// The server of the suite (test.sh) or one started for this test file.
export async function suiteServer() {
  if (process.env.ORDERS_URL) return { url: process.env.ORDERS_URL, kill: async () => {} };
  return startServer();
}

let pool;
export function db() {
  pool ??= new pg.Pool({ max: 2 });
  return pool;
}

export async function closeDb() {
  if (pool) await pool.end();
  pool = undefined;
}

export async function countOrders(account, key) {
  const { rows } = await db().query(
    'SELECT count(*)::int AS n FROM orders WHERE account = $1 AND idempotency_key = $2',
    [account, key]);
  return rows[0].n;
}

export async function ordersOf(account, key) {
  const { rows } = await db().query(
    'SELECT id::int AS id FROM orders WHERE account = $1 AND idempotency_key = $2 ORDER BY id',
    [account, key]);
  return rows.map((r) => r.id);
}

export async function keyRecord(account, key) {
  const { rows } = await db().query('SELECT * FROM idempotency.lookup($1, $2)', [account, key]);
  return rows[0];
}

// Polls fn until it returns a truthy value.
export async function waitFor(fn, { timeoutMs = 10000, intervalMs = 25, what = 'condition' } = {}) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await fn();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

// POST /orders once, without retries.
export async function postOnce(url, { token, key, body, query = '', timeoutMs = 10000 }) {
  const headers = { 'Content-Type': 'application/json' };
  if (token) headers.Authorization = `Bearer ${token}`;
  if (key !== undefined) headers['Idempotency-Key'] = key;
  const res = await fetch(`${url}/orders${query ? `?${query}` : ''}`, {
    method: 'POST',
    headers,
    body: typeof body === 'string' ? body : JSON.stringify(body),
    signal: AbortSignal.timeout(timeoutMs),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, text, body: text ? JSON.parse(text) : null };
}
