// The statement form of the middleware, for an endpoint whose work is one SQL statement: one
// call of idempotency.execute_once claims the key, runs the statement, stores its result and
// completes the key, in autocommit: one round trip for a new key and for a replay. On a pool
// made with pg's `pipeline: true`, concurrent requests' calls share its connections
// (pipeline.js).
import { isConnectionLost, transactionStatus, watchConnection } from './connection.js';
import { databaseUnreachable, PoolConnectError } from './database.js';
import { executeOnceOf, executeOnceValues } from './keys.js';
import { isPipelined, SharedConnections } from './pipeline.js';
import { ExtensionVersionError } from './versions.js';

export class StatementForm {
  // options: the middleware's (statement, params, status, lockTtl, retention, wait); prepared:
  // () => whether execute_once goes as a prepared statement (the flow's, see DecisionFlow).
  constructor(pool, options, prepared) {
    const { statement } = options;
    if (typeof statement !== 'string' || statement.trim() === '')
      throw new TypeError("idempotencyMiddleware's statement must be a non-empty string");
    this.pool = pool;
    this.statement = statement;
    this.paramsOf = options.params ?? (() => []);
    this.status = options.status ?? 201;
    this.reserveOptions = { lockTtl: options.lockTtl, retention: options.retention,
      wait: options.wait };
    this.prepared = prepared;
    this.shared = isPipelined(pool) ? new SharedConnections(pool) : null;
  }

  // execute_once's parameters for a request, checked and converted (a TypeError or a 400's
  // error before anything is sent).
  async valuesFor(req, scope, key, hash) {
    return executeOnceValues(scope, key, hash, this.statement, await this.paramsOf(req),
      this.status, this.reserveOptions);
  }

  // execute_once on a pooled connection with no transaction open, so the call commits by
  // itself; prepared unless the flow says otherwise (see executeOnce).
  async #call(values) {
    if (this.shared) return this.shared.run((client) => executeOnceOf(client, values, this.prepared()));
    const client = await this.pool.connect().catch((err) => { throw new PoolConnectError(err); });
    const unwatch = watchConnection(client);
    let failure = null;
    try {
      return await executeOnceOf(client, values, this.prepared());
    } catch (err) {
      failure = err;
      throw err;
    } finally {
      const lost = unwatch(failure);
      if (lost || isConnectionLost(failure, client)) client.release(lost ?? failure ?? true);
      else if (transactionStatus(client) !== undefined && transactionStatus(client) !== 'I')
        client.release(true); // never hand on a connection left in a transaction
      else client.release();
    }
  }

  // The reservation execute_once gave, or { failure: 'unavailable' | 'statement', error }: no
  // server answered or the connection was lost twice (503), or the statement failed and
  // nothing is stored (500, logged here). Other errors (a pool that cannot connect for a
  // reason of its own) are thrown.
  async reserve(key, values) {
    // A pooled connection that died while idle fails on its first statement: tried once more
    // on another connection (execute_once of a key is safe to repeat: a replay at worst).
    for (let tries = 1; ; tries++) {
      try {
        return await this.#call(values);
      } catch (failure) {
        const err = failure instanceof PoolConnectError ? failure.cause : failure;
        if (isConnectionLost(err)) {
          if (tries < 2 && !(failure instanceof PoolConnectError)) continue;
          return { failure: 'unavailable', error: err };
        }
        if (databaseUnreachable(err)) return { failure: 'unavailable', error: err };
        if (failure instanceof PoolConnectError) throw err;
        if (err instanceof ExtensionVersionError) {
          console.error('idempotency: the statement form needs idempotency.execute_once ' +
            `(extension 0.3.0 or later): ${err.message}`);
        } else {
          console.error(`idempotency: the statement for key "${key}" failed, nothing is ` +
            `stored: ${err.message}`);
        }
        return { failure: 'statement', error: err };
      }
    }
  }
}
