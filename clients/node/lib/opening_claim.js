// The claim that opens a transaction, in one round trip, for a client with none open: the
// middleware's and the BullMQ processor's. idempotency.reserve_begin while the server offers
// it (one statement; the outcome 'new' alone leaves a transaction open, so a replay needs no
// ROLLBACK), prepared unless opts.prepare is false; BEGIN + reserve once the server refuses it
// (an edition or version without it, a role without EXECUTE, Citus: see reserveBeginRefused).
import { preparedStatementUnusable, reserveAfter, reserveBegin, reserveBeginRefused } from './keys.js';
import { BEGIN } from './statements.js';
import { serverEdition } from './versions.js';

export class OpeningClaim {
  // opts: { lockTtl, retention, wait, prepare }, the caller's own object: prepare turns false
  // here (a prepared statement the server connection does not have as ours: a pooler, DISCARD
  // ALL) and may be turned false by the caller (complete's prepared statement met the same).
  constructor(opts) {
    this.opts = opts;
    // null: not known yet (the server's edition, asked once)
    this.useReserveBegin = null;
  }

  // The reservation, and whether complete's prepared statement was parsed with it on this
  // server connection (completeThen's prepare).
  async reserve(client, scope, key, hash = null) {
    const { opts } = this;
    this.useReserveBegin ??= (await serverEdition(client)).offers('reserve_begin');
    while (this.useReserveBegin) {
      try {
        const { prepare } = opts;
        return [await reserveBegin(client, scope, key, hash, opts), prepare];
      } catch (err) {
        // other claims' statements, sent before the first such error came back, meet it
        // too: each of them retries unprepared
        if (preparedStatementUnusable(err)) opts.prepare = false;
        else if (reserveBeginRefused(err)) this.useReserveBegin = false;
        else throw err;
      }
    }
    return [await reserveAfter(client, BEGIN, scope, key, hash, opts), false];
  }
}
