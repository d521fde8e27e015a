// The decision flow of the Idempotency-Key middleware, written once and free of any web
// framework: what a request is (its scope, key and fingerprint), the claim, the answer to an
// outcome that runs nothing, and for a new key the transaction in which the handler runs and
// its answer is stored. An adapter (middleware.js: Express and plain node:http) calls
// DecisionFlow.handle with two functions of its own: run, which runs the handler inside the
// claim's transaction and gives the answer it held back, and respond, which sends an answer.
// Every answer of the middleware's own comes from answers.js.
import { isConnectionLost, transactionStatus, watchConnection } from './connection.js';
import {
  notStoredAnswer, outcomeAnswer, requestRefusedAnswer, storedAnswer,
  storedResponseAnswer, styledAnswer, unavailableAnswer,
} from './answers.js';
import { databaseUnreachable } from './database.js';
import { ConnectionLostError } from './errors.js';
import { completeThen, preparedStatementUnusable } from './keys.js';
import { OpeningClaim } from './opening_claim.js';
import { requestIdentity } from './requests.js';
import { StatementForm } from './statement_form.js';
import { COMMIT, ROLLBACK } from './statements.js';
import { observed, observing } from './telemetry.js';

export class DecisionFlow {
  // options: idempotencyMiddleware's (see middleware.js), without those of the adapter.
  constructor(options) {
    const { pool } = options ?? {};
    if (!pool || typeof pool.connect !== 'function')
      throw new TypeError('idempotencyMiddleware needs a pg pool');
    if (options.scope === undefined) throw new TypeError('idempotencyMiddleware needs a scope');
    this.pool = pool;
    // A pool emits 'error' when one of its idle connections breaks (a server restart): with
    // no listener, that event ends the process. One that logs is added when the application
    // has none; its own listener, added before, is left alone.
    if (typeof pool.on === 'function' && typeof pool.listenerCount === 'function' &&
      pool.listenerCount('error') === 0) {
      pool.on('error', (err) => {
        console.error(`idempotency: an idle connection of the pool failed: ${err.message}`);
      });
    }
    this.identify = requestIdentity(options);
    this.store = options.store ?? ((status) => status < 500);
    this.replayHeaders = options.replayHeaders ?? (() => ({}));
    this.keepHeaders = options.keepHeaders ?? [];
    this.answerOptions = { documentation: options.documentation, legacyAnswers: options.legacyAnswers };
    const { lockTtl, retention, wait } = options;
    this.opts = { lockTtl, retention, wait, prepare: options.prepare ?? true };
    this.claims = new OpeningClaim(this.opts);
    this.statementForm = options.statement === undefined ? null
      : new StatementForm(pool, options, () => this.opts.prepare);
  }

  // The flow of one request. respond(answer) sends an answer ({ status, headers, body }, or
  // the handler's held answer as run gave it): called once, at the moment the answer may go.
  // run(context) runs the handler inside the claim's transaction (context: what the handler
  // gets, its client included) and resolves with its held answer once it has answered
  // ({ status, headers: [name, value] pairs, the first of a name wins, body: a Buffer, and
  // whatever else the adapter needs to send it as the handler gave it}); it
  // rejects when the handler fails before answering (then nothing of it commits). Errors
  // that have no answer of their own (not the database's) are thrown, for the adapter's
  // error handling; the returned promise settles once the answer was sent and the connection
  // given back.
  async handle(req, { run, respond: send }) {
    const respond = (answer) => send(styledAnswer(answer, this.answerOptions));
    let identity;
    try {
      identity = await this.identify(req);
    } catch (err) {
      const answer = requestRefusedAnswer(err);
      if (answer === null) throw err;
      return respond(answer);
    }
    // what the claim came to, for telemetry.js: the outcome, the attempt, the answer's status
    const claim = { outcome: undefined, attempt: undefined, status: undefined };
    const answer = (a) => {
      claim.status = a?.status;
      return respond(a);
    };
    if (!observing()) return this.#claimed(req, identity, run, answer, claim);
    return observed('middleware', identity.scope, identity.key,
      () => this.#claimed(req, identity, run, answer, claim), () => claim);
  }

  async #claimed(req, identity, run, answer, claim) {
    if (this.statementForm === null) return this.#claimAndRun(identity, run, answer, claim);
    const { scope, key, hash } = identity;
    const values = await this.statementForm.valuesFor(req, scope, key, hash); // TypeError: thrown
    return answer(await this.#answerStatement(identity, values, claim));
  }

  // The statement form's answer (see StatementForm).
  async #answerStatement({ scope, key }, values, claim) {
    const reservation = await this.statementForm.reserve(key, values);
    claim.outcome = reservation.outcome;
    claim.attempt = reservation.attempt;
    if (reservation.failure === 'unavailable') return unavailableAnswer(reservation.error);
    if (reservation.failure === 'statement') return notStoredAnswer();
    if (reservation.outcome !== 'new' && reservation.outcome !== 'replay')
      return outcomeAnswer(scope, key, reservation);
    // The first answer has the body and headers its replays send (a JSON body; none for a
    // statement without a row), without Idempotent-Replayed and replayHeaders.
    return storedResponseAnswer(reservation, reservation.outcome === 'replay',
      this.replayHeaders);
  }

  async #claimAndRun({ scope, key, hash }, run, respond, claim) {
    const { pool, opts } = this;
    let client;
    let unwatch = () => null;
    // Gives the client back: with the error when the connection is broken (the pool drops it).
    const releaseClient = (err) => {
      const lost = unwatch();
      if (err || lost || isConnectionLost(null, client)) client.release(err ?? lost ?? true);
      else client.release();
    };
    // Nothing to roll back on a connection the server reports idle (reserve_begin opened no
    // transaction, or failed before it could); otherwise ROLLBACK, then release. failed: the
    // claim was refused, and pg may not have read the ReadyForQuery after the error yet (its
    // status still says idle after BEGIN + reserve): ROLLBACK, queued behind it, in any case.
    const endReservation = async (failed = false) => {
      if (!failed && transactionStatus(client) === 'I') return releaseClient();
      try {
        await client.query(ROLLBACK);
        return releaseClient();
      } catch (err) {
        return releaseClient(err); // a broken connection: the server rolls back on its own
      }
    };
    let reservation;
    let prepared;
    // A pooled connection that died while idle (the server restarted, the backend was
    // terminated) fails on the claim, its first statement. The claim commits nothing (a new
    // key's transaction stays open for the handler), so it is tried once more on another
    // connection: the first request after the database is back succeeds.
    for (let tries = 1; ; tries++) {
      try {
        client = await pool.connect();
      } catch (err) {
        if (isConnectionLost(err) || databaseUnreachable(err)) return respond(unavailableAnswer(err));
        throw err;
      }
      try {
        unwatch = watchConnection(client);
        // one round trip: a transaction open after the outcome 'new' only
        [reservation, prepared] = await this.claims.reserve(client, scope, key, hash);
        break;
      } catch (err) {
        if (isConnectionLost(err, client)) {
          releaseClient(err);
          if (tries < 2) continue;
          return respond(unavailableAnswer(err));
        }
        await endReservation(true);
        if (databaseUnreachable(err)) return respond(unavailableAnswer(err));
        throw err;
      }
    }

    claim.outcome = reservation.outcome;
    claim.attempt = reservation.attempt;
    if (reservation.outcome !== 'new') {
      // The answer is read, and nothing was written: it is sent now, and the transaction (if
      // BEGIN + reserve opened one) rolled back after; the connection then goes back.
      try {
        respond(reservation.outcome === 'replay'
          ? storedResponseAnswer(reservation, true, this.replayHeaders)
          : outcomeAnswer(scope, key, reservation));
      } finally {
        await endReservation();
      }
      return undefined;
    }

    // 'new': the handler runs in the claim's transaction, and its answer is held back until
    // the transaction has committed.
    let released = false;
    // Ends the transaction with end(): ROLLBACK, or complete + COMMIT (one round trip). If
    // that fails, the transaction is rolled back (a failed complete skipped the COMMIT) and the
    // connection released, with the error if it is broken.
    const finishTransaction = async (end) => {
      if (released) return;
      released = true;
      try {
        if (isConnectionLost(null, client))
          throw new ConnectionLostError('the connection to the server was lost');
        await end();
        releaseClient();
      } catch (err) {
        if (!isConnectionLost(err, client)) await client.query(ROLLBACK).catch(() => {});
        releaseClient(err);
        throw err;
      }
    };
    const rollback = () => client.query(ROLLBACK);

    let held;
    try {
      held = await run({ client, scope, key, attempt: reservation.attempt,
        recoveryPoint: reservation.recoveryPoint, reservation });
    } catch (err) { // the handler failed before answering: nothing of it commits
      await finishTransaction(rollback).catch(() => {});
      throw err;
    }
    try {
      if (this.store(held.status)) {
        const response = storedAnswer(held.body, held.headers, this.keepHeaders);
        await finishTransaction(() => completeThen(client, COMMIT, scope, key, held.status,
          response, reservation.attempt, { prepare: prepared && opts.prepare }));
      } else {
        await finishTransaction(rollback);
      }
    } catch (err) {
      if (preparedStatementUnusable(err)) opts.prepare = false; // the next claims' too
      if (!released) await finishTransaction(rollback).catch(() => {});
      console.error(`idempotency: the answer to key "${key}" was not stored: ${err.message}`);
      // COMMIT may have happened when the connection was lost: the retry replays or runs
      // afresh
      return respond(isConnectionLost(err) ? unavailableAnswer(err) : notStoredAnswer());
    }
    return respond(held);
  }
}
