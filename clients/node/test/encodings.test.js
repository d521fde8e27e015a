// Values never become SQL, whatever the session's encoding and settings. node-postgres asks for
// UTF8 when it connects, so the server converts: databases created in UTF8, EUC_JP and LATIN1
// (a character the database cannot hold is the server's clean 22P05). A session on which the
// application ran SET client_encoding (SJIS, BIG5, GBK, GB18030) after the package first used
// it is refused before anything is sent (ClientEncodingError); one that ran it before is not
// seen, and its values (sent as UTF-8, bound) may be refused or read as other characters by
// the server, but never run as SQL. Each with backslash_quote and standard_conforming_strings
// on and off. Every call that builds a statement takes keys, scopes, names and bodies made to
// hurt (every character whose UTF-8 bytes end in a lead byte of those encodings before a
// backslash and a quote, quotes, backslashes, $1, %s, NUL, very long and invalid text) and a
// seeded random run (IDEM_TEST_SEED, printed on a failure); each hostile value carries an
// INSERT into a canary table, which must stay empty.
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, test } from 'node:test';
import pg from 'pg';
import {
  accept, applyOnce, claimOnce, ClientEncodingError, consumeOnce, IdempotencyError,
  idempotencyMiddleware, KeyEmptyError, KeyTooLongError, reserveBegin, runExternal,
  runOnce, watermark,
} from '../index.js';
import { FAST_PATH } from '../lib/connection.js';
import { completeThen } from '../lib/keys.js';
import { connect } from './db.js';
import { MANAGED } from './edition.js';

const DATABASES = { UTF8: 'nodeenc_utf8', EUC_JP: 'nodeenc_euc_jp', LATIN1: 'nodeenc_latin1' };
const CLIENT_ENCODINGS = [['EUC_JP', 'SJIS'], ['UTF8', 'BIG5'], ['UTF8', 'GBK'],
  ['UTF8', 'GB18030']];
const SETTINGS = ['on', 'off'].flatMap((bq) => ['on', 'off'].map((scs) => [bq, scs]));
const SEED = Number(process.env.IDEM_TEST_SEED ?? 38);
const CANARY = '; INSERT INTO canary VALUES (1); --';
const REFUSALS = new Set(['22P05', '22021', '54000', '22023', '22P02']);

before(async () => {
  const admin = await connect(process.env.PGDATABASE || 'postgres');
  try {
    await admin.query('SET client_min_messages = warning');
    for (const [enc, db] of Object.entries(DATABASES)) {
      await admin.query(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`);
      await admin.query(`CREATE DATABASE ${db} TEMPLATE template0 ENCODING '${enc}' ` +
        "LC_COLLATE 'C' LC_CTYPE 'C'");
    }
  } finally {
    await admin.end();
  }
  for (const db of Object.values(DATABASES)) {
    const c = await connect(db);
    await c.query('CREATE EXTENSION idempotency');
    await c.query('CREATE TABLE canary (x int)');
    await c.end();
  }
});

// Characters whose UTF-8 bytes end in a byte above 0x80 (a lead byte of SJIS, BIG5, GBK or
// GB18030, which on a session read as one of those eats the backslash that follows): every
// such character of the kana, CJK and fullwidth blocks that ends in each possible byte.
function hurtingChars() {
  const byLastByte = new Map();
  for (const [from, to] of [[0x80, 0x800], [0x3000, 0x3100], [0x4e00, 0x5000], [0xff00, 0xfff0]]) {
    for (let cp = from; cp < to; cp += 1) {
      const bytes = Buffer.from(String.fromCodePoint(cp), 'utf8');
      const last = bytes[bytes.length - 1];
      if (!byLastByte.has(last)) byLastByte.set(last, String.fromCodePoint(cp));
    }
  }
  return [...byLastByte.values()];
}

function hostileValues() {
  const values = [];
  let group = '';
  for (const ch of hurtingChars()) {
    const piece = `${ch}\\'`;
    if (Buffer.byteLength(group + piece + CANARY) > 250) {
      values.push(group + CANARY);
      group = '';
    }
    group += piece;
  }
  if (group) values.push(group + CANARY);
  return values.concat([
    "'", '\\', "\\'", "''", `'${CANARY}`, `\\'${CANARY}`, `\\\\'${CANARY}`, `E'\\'${CANARY}`,
    '$1', '$1$2', '%s', '%', '{0}', `$$'${CANARY}$$`, `¥'${CANARY}`, `₩'${CANARY}`, "‾'",
    'a\0b', '\0', '\ud800', 'x'.repeat(255), 'x'.repeat(256), 'é'.repeat(128), '', ' ',
    `\n'${CANARY}`, `表'${CANARY}`, `ソ\\'${CANARY}`, `許'${CANARY}`, `😀'${CANARY}`,
  ]);
}

function mulberry32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function randomValues(seed, n = 15) {
  const rnd = mulberry32(seed);
  const int = (lo, hi) => lo + Math.floor(rnd() * (hi - lo + 1));
  const pieces = ["'", '\\', '$1', '%s', ';', '--', "E'", '"', ' ', '\n', CANARY, '¥', '\0'];
  const hurting = hurtingChars();
  const out = [];
  for (let i = 0; i < n; i += 1) {
    let s = '';
    for (let j = int(1, 12); j > 0; j -= 1) {
      const pick = rnd();
      if (pick < 0.35) s += pieces[int(0, pieces.length - 1)];
      else if (pick < 0.6) s += hurting[int(0, hurting.length - 1)];
      else if (pick < 0.9) s += String.fromCharCode(int(0x20, 0xffff)); // lone surrogates too
      else s += String.fromCodePoint(int(0x10000, 0x2ffff));
    }
    out.push(s);
  }
  return out;
}

const plain = (v) => v.length > 0 && v.length <= 255 && /^[\x20-\x7e]*$/.test(v);
// a lone surrogate goes out as U+FFFD (Buffer's UTF-8): that one is stored so
const wellFormed = (v) => v.toWellFormed?.() ?? v;

function cleanRefusal(err, v, what) {
  const clean = (err instanceof KeyEmptyError || err instanceof KeyTooLongError ||
    err instanceof ClientEncodingError ||
    (err instanceof IdempotencyError && REFUSALS.has(err.code))) && err.message !== '';
  assert.ok(clean,
    `${what}(${JSON.stringify(v)}): not a clean refusal: ${err?.name}: ${err?.message}`);
  assert.ok(!plain(v) || err instanceof ClientEncodingError,
    `${what}(${JSON.stringify(v)}) refused: ${err.message}`);
}

// Runs every call with v on client; exact: values must read back as given (a session the
// package knows to be UTF8). Returns how many calls stored their value.
async function runAll(client, tag, v, exact) {
  const readBack = async (sql, params) => (await client.query(sql, params)).rows[0]?.v;
  const same = (got) => { if (exact) assert.equal(got, wellFormed(v)); };
  const calls = {
    'runOnce key': async () => {
      const r = await runOnce(client, { scope: tag, key: v, request: { v } }, () => [201, { v }]);
      assert.equal(r.replayed, false);
      const again = await runOnce(client, { scope: tag, key: v, request: { v } },
        () => assert.fail('ran twice'));
      assert.equal(again.replayed, true);
      if (exact) assert.deepEqual(again.response, { v: wellFormed(v) });
      same(await readBack('SELECT key AS v FROM idempotency.keys WHERE scope = $1 AND key = $2',
        [tag, v]));
    },
    'runOnce scope': async () => {
      await runOnce(client, { scope: v, key: tag }, () => [200, null]);
      same(await readBack('SELECT scope AS v FROM idempotency.keys WHERE scope = $1 AND ' +
        'key = $2', [v, tag]));
    },
    runExternal: async () => {
      const r = await runExternal(client, { scope: `ext-${tag}`, key: v },
        async () => [201, { v }]);
      assert.equal(r.replayed, false);
      if (exact) assert.deepEqual(r.response, { v });
    },
    'reserveBegin + completeThen': async () => {
      for (const prepare of [false, true]) {
        const scope = `rb-${prepare}-${tag}`;
        const r = await reserveBegin(client, scope, v, null, { prepare });
        assert.equal(r.outcome, 'new');
        await completeThen(client, 'COMMIT', scope, v, 201, { v }, r.attempt, { prepare });
        const again = await reserveBegin(client, scope, v, null, { prepare });
        assert.equal(again.outcome, 'replay');
        if (exact) assert.deepEqual(again.response, { v: wellFormed(v) });
      }
    },
    claimOnce: async () => {
      await client.query('BEGIN');
      try {
        assert.equal(await claimOnce(client, `claim-${tag}`, v), true);
        same(await readBack('SELECT key AS v FROM idempotency.keys WHERE scope = $1 AND ' +
          'key = $2', [`claim-${tag}`, v]));
      } finally {
        await client.query('ROLLBACK');
      }
    },
    consumeOnce: async () => {
      assert.equal(await consumeOnce(client, `consume-${tag}`, v, () => {}), true);
      assert.equal(await consumeOnce(client, `consume-${tag}`, v, () => {}), false);
    },
    applyOnce: async () => {
      assert.equal(await applyOnce(client, v, `p-${tag}`, 7, () => {}), true);
      assert.equal(await applyOnce(client, `c-${tag}`, v, 3, () => {}), true);
      assert.equal(await applyOnce(client, v, `p-${tag}`, 7, () => {}), false);
    },
    accept: async () => {
      await client.query('BEGIN');
      try {
        assert.equal(await accept(client, `acc-${tag}`, v, 5), true);
        assert.equal(await watermark(client, `acc-${tag}`, v), 5n);
      } finally {
        await client.query('ROLLBACK');
      }
    },
  };
  let stored = 0;
  for (const [what, call] of Object.entries(calls)) {
    // reserve_begin: not on the managed edition (docs/managed.md's feature table)
    if (MANAGED && what === 'reserveBegin + completeThen') continue;
    try {
      await call();
      stored += 1;
    } catch (err) {
      if (err instanceof assert.AssertionError) throw err;
      cleanRefusal(err, v, what);
      if (client.getTransactionStatus() !== 'I') await client.query('ROLLBACK');
    }
  }
  return stored;
}

const settingsOf = (bq, scs) => `-c backslash_quote=${bq} -c standard_conforming_strings=${scs}`;

async function session(db, bq, scs) {
  const client = new pg.Client({ database: db, options: settingsOf(bq, scs) });
  await client.connect();
  return client;
}

async function canaryEmpty(client) {
  const { rows } = await client.query('SELECT count(*)::int AS n FROM canary');
  assert.equal(rows[0].n, 0, 'a value ran as SQL');
}

// The hostile values, then (random: under the settings that let a backslash end a literal) the
// seeded random run.
async function runMatrix(client, tag, seed, exact, random) {
  let stored = 0;
  for (const v of hostileValues()) stored += await runAll(client, tag, v, exact);
  if (!random) return stored;
  const hostile = new Set(hostileValues());
  for (const v of new Set(randomValues(seed))) {
    if (hostile.has(v)) continue; // stored already: a replay
    try {
      stored += await runAll(client, tag, v, exact);
    } catch (err) {
      err.message = `random run (IDEM_TEST_SEED=${seed}): ${err.message}`;
      throw err;
    }
  }
  return stored;
}

for (const [bq, scs] of SETTINGS) {
  for (const [server, db] of Object.entries(DATABASES)) {
    test(`${server} database, backslash_quote=${bq}, standard_conforming_strings=${scs}: ` +
      'every value stored exactly or refused, never run', async () => {
      const client = await session(db, bq, scs);
      try {
        const { rows } = await client.query('SHOW backslash_quote');
        assert.equal(rows[0].backslash_quote, bq);
        const tag = `${server}-bq${bq}-scs${scs}`;
        const stored = await runMatrix(client, tag, SEED + Object.keys(DATABASES).indexOf(server),
          true, bq === 'on' && scs === 'off');
        assert.ok(stored > hostileValues().length, `too few values stored: ${stored}`);
        await canaryEmpty(client);
      } finally {
        await client.end();
      }
    });
  }

  for (const [server, clientEncoding] of CLIENT_ENCODINGS) {
    test(`client_encoding ${clientEncoding} over ${server}, backslash_quote=${bq}, ` +
      `standard_conforming_strings=${scs}: refused once seen (fast path), never run`, async () => {
      const tag = `${clientEncoding}-bq${bq}-scs${scs}`;
      // SET after the package used the connection: on the fast path (which follows pg's
      // ParameterStatus) every call refused before sending; on the public path not seen, and
      // the values, bound, are never SQL
      const seen = await session(DATABASES[server], bq, scs);
      try {
        assert.equal(await watermark(seen, 'none', 'none'), null);
        await seen.query(`SET client_encoding TO ${clientEncoding}`);
        if (FAST_PATH) {
          for (const v of [...hostileValues(), 'plain'])
            assert.equal(await runAll(seen, `seen-${tag}`, v, true), 0);
        } else {
          await runMatrix(seen, `seen-${tag}`, SEED + 11, false, scs === 'off');
        }
        await seen.query('RESET client_encoding');
        await canaryEmpty(seen);
      } finally {
        await seen.end();
      }
      // SET before: not seen (pg does not follow it); bound values are never SQL. Run where a
      // lead byte could eat a backslash: backslash_quote on.
      if (bq !== 'on') return;
      const unseen = await session(DATABASES[server], bq, scs);
      try {
        await unseen.query(`SET client_encoding TO ${clientEncoding}`);
        await runMatrix(unseen, `unseen-${tag}`, SEED + 10, false, scs === 'off');
        await unseen.query('RESET client_encoding');
        await canaryEmpty(unseen);
      } finally {
        await unseen.end();
      }
    });
  }
}

// The middleware: the key and the scope come from the request (options.key / options.scope).
test('the middleware stores hostile keys and scopes exactly, or refuses them cleanly', async () => {
  for (const [server, db] of Object.entries(DATABASES)) {
    for (const [bq, scs] of SETTINGS) {
      const tag = `mw-${server}-bq${bq}-scs${scs}`;
      const pool = new pg.Pool({ database: db, options: settingsOf(bq, scs), max: 1 });
      const current = {};
      const mw = idempotencyMiddleware({ pool, scope: () => current.scope,
        key: () => current.key });
      const srv = http.createServer((req, res) => mw(req, res, (err) => {
        if (err) {
          res.writeHead(500, { 'Content-Type': 'application/json' })
            .end(JSON.stringify({ code: err.code, name: err.name, message: err.message }));
          return;
        }
        res.writeHead(201, { 'Content-Type': 'application/json' }).end('{"stored": true}');
      }));
      await new Promise((r) => { srv.listen(0, '127.0.0.1', r); });
      const url = `http://127.0.0.1:${srv.address().port}`;
      const post = async () => {
        const res = await fetch(url, { method: 'POST', body: '{}',
          headers: { 'Content-Type': 'application/json' } });
        return { status: res.status, replayed: res.headers.get('idempotent-replayed'),
          body: await res.json() };
      };
      const check = await connect(db);
      let stored = 0;
      try {
        for (const v of hostileValues().filter((x) => x.trim() !== '')) {
          const roles = bq === 'on' && scs === 'off' ? [[tag, v], [v, tag]] : [[tag, v]];
          for (const [scope, key] of roles) {
            Object.assign(current, { scope, key, v });
            const first = await post();
            if (first.status === 201) {
              assert.deepEqual(first.body, { stored: true });
              const again = await post();
              assert.equal(again.status, 201);
              assert.equal(again.replayed, 'true');
              assert.deepEqual(again.body, { stored: true });
              const { rows } = await check.query('SELECT scope, key FROM idempotency.keys ' +
                'WHERE scope = $1 AND key = $2', [scope, key]);
              assert.deepEqual(rows, [{ scope: wellFormed(scope), key: wellFormed(key) }]);
              stored += 1;
            } else {
              assert.ok(!plain(v), `${JSON.stringify(v)}: ${JSON.stringify(first)}`);
              const code = first.body.code ?? first.body.error;
              assert.ok(first.status === 400 || REFUSALS.has(code),
                `${JSON.stringify(v)}: not a clean refusal: ${JSON.stringify(first)}`);
            }
          }
        }
        assert.ok(stored > 10, `too few stored: ${stored}`);
        await canaryEmpty(check);
      } finally {
        await new Promise((r) => { srv.close(r); });
        await pool.end();
        await check.end();
      }
    }
  }
});
