// The request helpers over the key calls of keys.js, each in a transaction of its own (a
// savepoint inside the caller's): runOnce and idempotent (reserve, the work and complete in
// one transaction), runExternal with its attempt (a claim committed before an external side
// effect), and transactionWith, the one-statement-then-work transaction streams.js's applyOnce
// and consumer.js's consumeOnce run in.
import {
  checkUsable, firstValue, isConnectionLost, query, queryStatements, transactionStatus,
  translate, watchConnection, writesProtocol,
} from './connection.js';
import {
  KeyInProgressError, KeyMismatchError, KeyTooOldError, StaleAttemptError,
  TransactionAbortedError, TransactionOpenError,
} from './errors.js';
import {
  checkpoint, completeThen, executeOnce, fail, preparedStatementUnusable, requestHash, reserve,
  reserveAfter, sendsUnnamed, sendUnnamed,
} from './keys.js';
import { BEGIN, COMMIT, HELPER_SAVEPOINT, ROLLBACK } from './statements.js';
import { observed, observing } from './telemetry.js';

// Throws the typed error of an outcome that runs nothing but a replay.
export function raiseFor(scope, key, r) {
  switch (r.outcome) {
    case 'in_progress':
      throw new KeyInProgressError(scope, key, r, `idempotency key "${key}" is in progress`);
    case 'mismatch':
      throw new KeyMismatchError(scope, key, r,
        `idempotency key "${key}" was used with a different request`);
    case 'too_old':
      throw new KeyTooOldError(scope, key, r,
        `idempotency key "${key}" is older than the retention window`);
    default:
  }
}

// The work's answer: { statusCode, response } or [statusCode, response].
function resultOf(out, what) {
  if (Array.isArray(out) && out.length === 2) return { statusCode: out[0], response: out[1] };
  if (out !== null && typeof out === 'object' && Number.isInteger(out.statusCode))
    return { statusCode: out.statusCode, response: out.response ?? null };
  throw new TypeError(`${what} must return { statusCode, response } or [statusCode, response]`);
}

// A broken connection gets no statement: the server rolls back on its own, and a write to
// a dead socket only adds an EPIPE.
export async function rollbackQuietly(client, sql = ROLLBACK) {
  if (isConnectionLost(null, client)) return;
  const unwatch = watchConnection(client);
  try {
    await client.query(sql);
  } catch {
    // the connection is broken: the server has rolled back already
  } finally {
    unwatch();
  }
}

// Sends the statement that ends a work's transaction or savepoint. A work that caught a server
// error and returned leaves the transaction failed: COMMIT would answer ROLLBACK without an
// error and the caller acknowledge a message that was never applied, so that is
// TransactionAbortedError; so is a failed transaction seen before sending (checkUsable) or
// reported by RELEASE SAVEPOINT (25P02), and undo() then rolls it back.
async function endWork(client, sql, undo) {
  let done;
  try {
    done = await query(client, sql);
  } catch (err) {
    if (err instanceof TransactionAbortedError) await undo();
    throw err;
  }
  if (done?.command === 'ROLLBACK') {
    throw new TransactionAbortedError(
      'the work returned inside a failed transaction: nothing of it was committed',
      { hint: "let the work's database error propagate, or roll back to a savepoint of its own" });
  }
}

// Runs fn(close, open) in a transaction of its own, or in a savepoint if the caller has one
// open; the connection is watched throughout (fn's own queries included). open and close are
// the statements that start and end it (BEGIN / COMMIT, or SAVEPOINT / RELEASE SAVEPOINT); with
// opens or closes, fn sends that one itself, with a statement of its own (reserveAfter,
// completeThen).
async function inTransaction(client, fn, { opens = false, closes = false } = {}) {
  checkUsable(client);
  const unwatch = watchConnection(client);
  try {
    const nested = transactionStatus(client) === 'T';
    const open = nested ? HELPER_SAVEPOINT.open : BEGIN;
    const close = nested ? HELPER_SAVEPOINT.close : COMMIT;
    const undo = async () => {
      if (nested) {
        for (const sql of HELPER_SAVEPOINT.undo) await rollbackQuietly(client, sql);
      } else {
        await rollbackQuietly(client);
      }
    };
    if (!opens) await query(client, open);
    let out;
    try {
      out = await fn(close, open);
    } catch (err) {
      await undo();
      throw translate(err, client);
    }
    if (!closes) await endWork(client, close, undo);
    return out;
  } finally {
    unwatch();
  }
}

// One transaction whose first statement ({ name, text } of PREPARED, one boolean column) gets
// values: resolves to then(boolean). On pg's own client with no transaction open, BEGIN and the
// statement go to the server in one write with the values bound (queryStatements: one round
// trip instead of two, as a consumer pays per message), the statement prepared under its name
// (parsed and planned once per connection), and COMMIT follows then(); otherwise inTransaction
// (a savepoint inside the caller's transaction), the statement unnamed. A server connection
// whose prepared statements are not the client's (a pooler, DISCARD ALL: see
// preparedStatementUnusable) fails that transaction before then() runs: it is rolled back and
// sent again unnamed, as is every later one of that client (sendsUnnamed: its execute_once
// too). An error rolls everything back and comes out typed.
export async function transactionWith(client, statement, values, then) {
  if (transactionStatus(client) !== 'I' || !writesProtocol(client)) {
    return inTransaction(client, async () =>
      then(firstValue(await query(client, statement.text, values))));
  }
  checkUsable(client);
  const unwatch = watchConnection(client);
  try {
    const opened = () => queryStatements(client, [{ text: BEGIN, values: [] },
      sendsUnnamed(client) ? { text: statement.text, values } : { ...statement, values }]);
    let out;
    try {
      let rows;
      try {
        [, rows] = await opened();
      } catch (err) {
        if (!preparedStatementUnusable(err) || sendsUnnamed(client)) throw err;
        sendUnnamed(client);
        await rollbackQuietly(client);
        [, rows] = await opened();
      }
      out = await then(rows[0][0] === 't'); // BEGIN's rows (none), then the statement's
    } catch (err) {
      await rollbackQuietly(client);
      throw translate(err, client);
    }
    await endWork(client, COMMIT, () => rollbackQuietly(client));
    return out;
  } finally {
    unwatch();
  }
}

// A helper's result as telemetry.js's claim: its outcome and attempt.
const claimOf = (r) => ({ outcome: r.replayed ? 'replay' : 'new', attempt: r.attempt });

const reserveOptions = (o) => ({ lockTtl: o.lockTtl, retention: o.retention, wait: o.wait });

// The one-transaction helper. reserve, work and complete in one transaction (a savepoint if
// the caller has a transaction open): on 'new' runs work(client, reservation), which returns
// { statusCode, response }, and completes with it; on 'replay' returns the stored result
// without running work; in_progress / mismatch / too_old throw KeyInProgressError /
// KeyMismatchError / KeyTooOldError. An error in work rolls the claim back with the work.
// Round trips: BEGIN + reserve in one, the work's, complete + COMMIT in one.
//
// The statement form (options.statement, no work): the claim, the statement (its parameters
// options.params, bound as text, never part of the text: see statementParam) and its answer
// are one call of idempotency.execute_once, one round trip for a new key and for a replay. The
// response is the statement's result (its one row's single json / jsonb column, or the row as
// a JSON object; null for no row), stored with options.status (default 201). With no
// transaction open the call commits by itself; inside the caller's transaction it commits or
// rolls back with it. An error of the statement is thrown and the key stays new.
export function runOnce(client, options, work) {
  if (!observing()) return doRunOnce(client, options, work);
  return observed('runOnce', options?.scope, options?.key, () => doRunOnce(client, options, work),
    claimOf);
}

async function doRunOnce(client, options, work) {
  const { scope, key, request, exclude } = options;
  if (options.statement !== undefined || work === undefined) {
    if (work !== undefined || options.statement === undefined)
      throw new TypeError('runOnce needs either work or options.statement, not both');
    return runStatement(client, options);
  }
  const hash = requestHash(request, exclude);
  return inTransaction(client, async (close, open) => {
    const r = await reserveAfter(client, open, scope, key, hash, reserveOptions(options));
    if (r.outcome === 'replay') {
      await query(client, close);
      return { statusCode: r.statusCode, response: r.response, replayed: true, attempt: r.attempt };
    }
    raiseFor(scope, key, r);
    const { statusCode, response } = resultOf(await work(client, r), 'runOnce work');
    await completeThen(client, close, scope, key, statusCode, response, r.attempt);
    return { statusCode, response, replayed: false, attempt: r.attempt };
  }, { opens: true, closes: true });
}

async function runStatement(client, options) {
  const { scope, key, request, exclude, statement, params = [], status = 201 } = options;
  const hash = requestHash(request, exclude);
  checkUsable(client);
  const r = await executeOnce(client, scope, key, statement, params, hash,
    { statusCode: status, ...reserveOptions(options) });
  raiseFor(scope, key, r);
  return { statusCode: r.statusCode, response: r.response, replayed: r.outcome === 'replay',
    attempt: r.attempt };
}

// runOnce as a wrapper: idempotent(fn, { scope, key, request, ... }) returns
// async (client, ...args) => result, where scope, key and request are values or functions of
// args, and fn(client, ...args) returns { statusCode, response }.
export function idempotent(fn, options) {
  const pick = (v, args) => (typeof v === 'function' ? v(...args) : v);
  return (client, ...args) => runOnce(client, {
    ...options,
    scope: pick(options.scope, args),
    key: pick(options.key, args),
    request: pick(options.request, args),
  }, () => fn(client, ...args));
}

// The cross-transaction helper, for an external side effect. Commits the claim, runs
// work(attempt) with no transaction open (it returns { statusCode, response }), then in a
// second transaction calls finish(client, result) if given (your business writes; it may return
// the result to store instead, say with the id of the row it inserted) and complete with the
// attempt fence: StaleAttemptError if the lease lapsed and another holder took over (finish's
// writes roll back with it). If work or that second transaction throws, the claim is released
// with fail(failWith(err)) (default { error: err.name, message }; the next reserve gets
// attempt + 1) and the error rethrown. attempt carries the attempt number, the recovery point
// an earlier attempt left (a takeover), and checkpoint().
export function runExternal(client, options, work) {
  if (!observing()) return doRunExternal(client, options, work);
  return observed('runExternal', options?.scope, options?.key,
    () => doRunExternal(client, options, work), claimOf);
}

async function doRunExternal(client, options, work) {
  const unwatch = watchConnection(client);
  try {
    return await runExternalWatched(client, options, work);
  } finally {
    unwatch();
  }
}

async function runExternalWatched(client, options, work) {
  const { scope, key, request, exclude, finish } = options;
  const failWith = options.failWith ??
    ((err) => ({ error: err?.name ?? 'Error', message: String(err?.message ?? err).slice(0, 1000) }));
  checkUsable(client);
  const status = transactionStatus(client);
  if (status !== undefined && status !== 'I') {
    throw new TransactionOpenError('runExternal needs a connection with no transaction open', {
      hint: 'commit or roll back first: the claim must be committed before the external call',
    });
  }
  const hash = requestHash(request, exclude);
  // The claim commits on its own: one statement with no transaction open (status 'I') is one.
  const r = status === 'I' ? await reserve(client, scope, key, hash, reserveOptions(options))
    : await inTransaction(client, () => reserve(client, scope, key, hash, reserveOptions(options)));
  if (r.outcome === 'replay')
    return { statusCode: r.statusCode, response: r.response, replayed: true, attempt: r.attempt };
  raiseFor(scope, key, r);
  const attempt = {
    attempt: r.attempt,
    recoveryPoint: r.recoveryPoint,
    reservation: r,
    // Records progress in its own transaction (StaleAttemptError if another holder took over).
    async checkpoint(recoveryPoint) {
      await inTransaction(client, () => checkpoint(client, scope, key, recoveryPoint, r.attempt));
      this.recoveryPoint = recoveryPoint;
    },
  };
  const release = async (err) => {
    if (isConnectionLost(err, client)) return; // the lease lapses on its own
    if (transactionStatus(client) !== 'I') await rollbackQuietly(client);
    try {
      await inTransaction(client, () => fail(client, scope, key, failWith(err), r.attempt));
    } catch {
      // taken over or completed already, or the database is gone: the lease lapses on its own
    }
  };
  let result;
  try {
    result = resultOf(await work(attempt), 'runExternal work');
  } catch (err) {
    await release(err);
    throw err;
  }
  try {
    result = await inTransaction(client, async (close) => {
      const final = finish ? await finish(client, result) : undefined;
      const stored = final === undefined ? result : resultOf(final, 'runExternal finish');
      await completeThen(client, close, scope, key, stored.statusCode, stored.response, r.attempt);
      return stored;
    }, { closes: true });
  } catch (err) {
    if (!(err instanceof StaleAttemptError)) await release(err);
    throw translate(err, client);
  }
  return { ...result, replayed: false, attempt: r.attempt };
}
