// Calls that concurrent requests share connections for: the statement form's execute_once on a
// pool made with node-postgres's `pipeline: true`. Each call is its own Bind, Execute and Sync,
// so each is its own autocommit transaction and an error stays with its call; the calls made
// while the event loop handles one batch of I/O leave in one write per connection, and their
// answers come back in order. One round trip is then shared by several requests, and each
// backend wakes once for them, where a pooled connection a call pays a write, a wake-up and a
// read each.
//
// A connection is checked out of the pool when each one held is busy (see DEPTH, up to the
// pool's max) and given back once it is idle; the pool opens, ends and idles them as it
// does any other. An 'error' of a held connection (the server restarted, the backend was
// terminated) is caught here: it is dropped, given back broken (the pool destroys it), and its
// calls fail with the connection lost.
import { FAST_PATH, isConnectionLost } from './connection.js';
import { ConnectionLostError } from './errors.js';

// Whether pool's connections are in node-postgres's pipeline mode.
export const isPipelined = (pool) => pool?.options?.pipeline === true;

class Held {
  constructor(pool, onGone) {
    this.inFlight = 0;
    this.lost = null;
    this.client = null;
    this.corked = false;
    this.onGone = onGone;
    this.ready = pool.connect().then((client) => {
      this.client = client;
      this.onError = (err) => { this.drop(err); };
      client.on('error', this.onError);
      return client;
    }, (err) => {
      this.drop(err);
      throw err;
    });
  }

  // No call is sent here any more; given back once its calls in flight are answered.
  drop(err) {
    this.lost ??= err ?? new Error('the connection was lost');
    this.onGone(this);
    if (this.inFlight === 0) this.giveBack();
  }

  // The calls made until the event loop next checks for I/O, corked into one write (on the
  // fast path: pg's socket is not in its public API).
  cork() {
    if (!FAST_PATH) return;
    const stream = this.client?.connection?.stream;
    if (this.corked || typeof stream?.cork !== 'function') return;
    this.corked = true;
    stream.cork();
    setImmediate(() => {
      this.corked = false;
      stream.uncork();
    });
  }

  giveBack() {
    const { client } = this;
    if (!client || this.givenBack) return;
    this.givenBack = true;
    client.removeListener('error', this.onError);
    if (this.lost) {
      // its socket may still report the same failure: nobody else listens any more
      client.on('error', () => {});
      client.release(this.lost);
    } else {
      client.release();
    }
  }
}

// A held connection takes the next call while it has fewer calls in flight than the depth the
// load allows; then the next held one that can, or a new one while the pool's max allows, or
// else the one with the fewest in flight. A connection runs its calls one after another.
// While no more than DEPTH calls are in flight in all they share one backend: cheap calls
// (replays) share its wake-ups. As more are in flight the depth falls, to MIN_DEPTH at 2 *
// DEPTH: a load that keeps many calls waiting (commits waiting on WAL flushes, say) spreads
// over more backends, whose commits flush together and run on every core. (Timing the calls
// instead misleads: under load the answers wait for the event loop, not for the server, and
// calls spread over backends for nothing.)
export const DEPTH = 8;
export const MIN_DEPTH = 4;
export const depthFor = (inFlight) =>
  Math.max(MIN_DEPTH, Math.min(DEPTH, Math.floor((DEPTH * DEPTH) / Math.max(1, inFlight))));

export class SharedConnections {
  constructor(pool) {
    this.pool = pool;
    this.max = Math.max(1, Number(pool.options?.max) || 10);
    this.held = [];
    this.inFlight = 0; // calls in flight on every held connection
  }

  #pick() {
    const depth = depthFor(this.inFlight + 1);
    let least = null;
    for (const h of this.held) {
      if (h.inFlight < depth) return h;
      if (least === null || h.inFlight < least.inFlight) least = h;
    }
    if (least !== null && this.held.length >= this.max) return least;
    const held = new Held(this.pool, (gone) => { this.#forget(gone); });
    held.ready.catch(() => {}); // its callers get the error
    this.held.push(held);
    return held;
  }

  // send(client) on a shared connection: its promise, settled before the connection may be
  // given back. Errors are send's own (a lost connection's included).
  async run(send) {
    const held = this.#pick();
    held.inFlight += 1;
    this.inFlight += 1;
    let failure = null;
    try {
      const client = await held.ready;
      if (held.lost) {
        throw new ConnectionLostError('the connection was lost before the call was sent',
          { cause: held.lost });
      }
      held.cork();
      return await send(client);
    } catch (err) {
      failure = err;
      throw err;
    } finally {
      held.inFlight -= 1;
      this.inFlight -= 1;
      if (failure !== null && isConnectionLost(failure, held.client)) held.drop(failure);
      else if (held.lost !== null && held.inFlight === 0) held.giveBack();
      else if (held.inFlight === 0) this.#idle(held);
    }
  }

  // Given back once a turn of the event loop has passed without a call on it: the calls that
  // follow each other closely keep it.
  #idle(held) {
    if (held.idleCheck) return;
    held.idleCheck = setImmediate(() => {
      held.idleCheck = null;
      if (held.inFlight > 0 || held.lost !== null) return;
      this.#forget(held);
      held.giveBack();
    });
  }

  // No call is sent on held any more.
  #forget(held) {
    const i = this.held.indexOf(held);
    if (i >= 0) this.held.splice(i, 1);
  }
}
