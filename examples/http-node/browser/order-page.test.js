// The order page in a real browser (Debian's chromium, headless, driven by playwright-core),
// against the orders server and PostgreSQL, through a proxy that misbehaves on purpose. For
// each misbehaviour: exactly one order row, the page shows the success once, and the server
// saw the number of requests the retries explain. Run by the `browser` suite of
// scripts/test.sh (PG* name the database; CHROMIUM the browser, /usr/bin/chromium by default).
// A screenshot of the page after each scenario goes to $BROWSER_SCREENSHOTS (build/browser).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { after, afterEach, before, beforeEach, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { closeDb, db, startServer, waitFor } from '../test/helpers.js';
import { startProxy } from './misbehaving-proxy.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const SHOTS = process.env.BROWSER_SCREENSHOTS ?? path.join(ROOT, 'build', 'browser');
const WAIT = { timeoutMs: 20_000 };
// The page's retry settings: a timeout per attempt short enough for a held answer to cost
// little, long enough for an attempt on a busy machine; the 'slow' handler outlasts it.
const PAGE_TIMEOUT_MS = 5000;
const PAGE = `/?timeout_ms=${PAGE_TIMEOUT_MS}&base_delay_ms=100&max_delay_ms=500`;

let browser;
let server;
let proxy;
let context;
let page;
let pageErrors;
let ordersBefore;
const requestLog = []; // the server's log lines, one per request it handled

before(async () => {
  fs.mkdirSync(SHOTS, { recursive: true });
  server = await startServer({ env: { LOG_REQUESTS: '1' } });
  createInterface({ input: server.proc.stdout }).on('line', (line) => requestLog.push(line));
  proxy = await startProxy(server.url, { slowMs: PAGE_TIMEOUT_MS + 1500 });
  browser = await chromium.launch({ executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium' });
});

after(async () => {
  await browser?.close();
  await proxy?.close();
  await server?.kill('SIGTERM');
  await closeDb();
});

beforeEach(async () => {
  proxy.plan();
  proxy.posts.length = 0;
  ordersBefore = await orderCount();
  context = await browser.newContext({ viewport: { width: 720, height: 640 } });
  page = await context.newPage();
  pageErrors = [];
  page.on('pageerror', (err) => pageErrors.push(err));
  await page.goto(proxy.url + PAGE);
});

afterEach(async (t) => {
  const name = t.name.replace(/[^a-z0-9]+/gi, '-').replace(/^-|-$/g, '').toLowerCase();
  await page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });
  await context.close();
  assert.deepEqual(pageErrors, [], 'no error in the page');
});

async function orderCount() {
  const { rows } = await db().query('SELECT count(*)::int AS n FROM orders');
  return rows[0].n;
}

async function ordersWithKeys(keys) {
  const { rows } = await db().query(
    'SELECT id::int, idempotency_key AS key FROM orders WHERE idempotency_key = ANY($1) ' +
    'ORDER BY id', [keys]);
  return rows;
}

// The statuses of the POST /orders the server handled for a key, from its request log
// ("POST /orders?delay_ms=6500 409 key=... 3ms").
const answersFor = (key) => requestLog.map((line) =>
  /^POST \/orders(?:\?\S*)? (\d+) key=(\S+) /.exec(line)).filter((m) => m && m[2] === key)
  .map((m) => Number(m[1]));
const serverSaw = (key) => answersFor(key).length;

async function waitServerSaw(key, n) {
  await waitFor(() => serverSaw(key) >= n, { ...WAIT, what: `the server to see ${n} requests` });
  assert.equal(serverSaw(key), n, 'requests the server saw');
}

// Waits until the page lists `n` orders; returns their entries.
async function waitShown(n) {
  await page.waitForFunction((count) => document.querySelectorAll('li.order').length >= count,
    n, { timeout: WAIT.timeoutMs });
  return page.$$eval('li.order', (items) => items.map((li) =>
    ({ text: li.textContent, key: li.dataset.key, replayed: li.dataset.replayed === 'true' })));
}

const place = () => page.click('#place');

// One order placed through a misbehaving proxy: one row, one success, the same key throughout.
async function oneOrderThrough(behaviours, { posts, serverRequests, replayed }) {
  proxy.plan(...behaviours);
  await place();
  const [shown, ...more] = await waitShown(1);
  assert.deepEqual(more, []);
  const key = shown.key;
  // The answer shown came from the last attempt: every attempt has reached the proxy.
  assert.deepEqual(proxy.posts.map((p) => p.key), Array(posts).fill(key),
    'every attempt carried the action\'s key');
  await waitServerSaw(key, serverRequests);
  const rows = await ordersWithKeys([key]);
  assert.equal(rows.length, 1, 'one order row');
  assert.equal(await orderCount(), ordersBefore + 1, 'no other order anywhere');
  assert.equal(shown.text, `Order #${rows[0].id}: 1 × widget, $2.50`);
  assert.equal(shown.replayed, replayed);
  assert.match(await page.textContent('#status'), new RegExp(`^Order #${rows[0].id} placed\\.`));
  assert.equal(await page.locator('li.order').count(), 1, 'the success is shown once');
  assert.equal(await page.evaluate(() => sessionStorage.length), 0, 'the answered key is gone');
}

test('the answer is dropped after the server committed: the retry gets the replay', () =>
  oneOrderThrough(['drop'], { posts: 2, serverRequests: 2, replayed: true }));

test('the answer is delayed past the page timeout: the retry gets the replay', () =>
  oneOrderThrough(['delay'], { posts: 2, serverRequests: 2, replayed: true }));

test('the connection is reset before the request reaches the server: the retry creates it',
  () => oneOrderThrough(['reset'], { posts: 2, serverRequests: 1, replayed: false }));

test('the proxy answers 503 once: the retry creates the order', () =>
  oneOrderThrough(['503'], { posts: 2, serverRequests: 1, replayed: false }));

test('a double click is one action; a second order once the page allows it is a second key',
  async () => {
    await page.dblclick('#place');
    const [first] = await waitShown(1);
    await waitServerSaw(first.key, 1);
    assert.deepEqual(proxy.posts.map((p) => p.key), [first.key], 'the second click sent nothing');
    assert.equal(await orderCount(), ordersBefore + 1);

    await place(); // the page allows a second order now: a new action, a new key
    const shown = await waitShown(2);
    assert.equal(shown.length, 2);
    const second = shown[1];
    assert.notEqual(second.key, first.key);
    await waitServerSaw(second.key, 1);
    assert.deepEqual(proxy.posts.map((p) => p.key), [first.key, second.key]);
    assert.deepEqual((await ordersWithKeys([first.key, second.key])).map((r) => r.key),
      [first.key, second.key]);
    assert.equal(await orderCount(), ordersBefore + 2);
  });

test('a reload during the retries resends the same key from sessionStorage: one order',
  async () => {
    // Attempt 1's answer is dropped after the commit; attempt 2's is held back: reload then.
    proxy.plan('drop', 'delay');
    await place();
    await waitFor(() => proxy.posts.length === 2, { ...WAIT, what: 'the retry in flight' });
    const key = proxy.posts[0].key;
    assert.equal(JSON.parse(await page.evaluate(() =>
      sessionStorage.getItem('idempotency-example:pending-order'))).action.key, key);
    await page.reload();
    const [shown, ...more] = await waitShown(1); // resumed without a click
    assert.deepEqual(more, []);
    assert.equal(shown.key, key);
    assert.equal(shown.replayed, true);
    await waitServerSaw(key, 3);
    assert.deepEqual(proxy.posts.map((p) => p.key), [key, key, key]);
    assert.equal((await ordersWithKeys([key])).length, 1);
    assert.equal(await orderCount(), ordersBefore + 1);
    assert.equal(await page.evaluate(() => sessionStorage.length), 0);
  });

test('the server still holds the key when the page times out: 409 + Retry-After, then the replay',
  async () => {
    proxy.plan('slow');
    await place();
    await page.waitForFunction(() => /Attempt \d+: answer 409\. Retrying with the same key/
      .test(document.getElementById('status').textContent), null, { timeout: WAIT.timeoutMs });
    const [shown, ...more] = await waitShown(1);
    assert.deepEqual(more, []);
    assert.equal(shown.replayed, true);
    const key = shown.key;
    assert.ok(proxy.posts.every((p) => p.key === key));
    await waitServerSaw(key, proxy.posts.length); // every attempt reached the server
    // Logged as they finish: one or more 409s while the first attempt held the key, the first
    // attempt's 201 (its page gone) and the replay's.
    const answers = answersFor(key);
    assert.equal(answers.filter((s) => s === 201).length, 2, `answers ${answers}`);
    assert.ok(answers.filter((s) => s === 409).length >= 1, `answers ${answers}`);
    assert.equal(answers.length, proxy.posts.length);
    assert.equal((await ordersWithKeys([key])).length, 1);
    assert.equal(await orderCount(), ordersBefore + 1);
    assert.equal(await page.locator('li.order').count(), 1);
    assert.equal(await page.evaluate(() => sessionStorage.length), 0);
  });
