// bench/peers: the round trips of the services (service.mjs: Express, fastify.mjs: Fastify).
import net from 'node:net';

// BENCH_COUNT=1: round trips, counted as the answers that arrive on the connections the
// service opened: PostgreSQL's ReadyForQuery messages on its Unix socket (one per simple query
// or per extended-protocol Sync) and Redis's top-level replies on its TCP port (no strategy
// pipelines or uses MULTI, so a reply is a round trip). GET /__roundtrips gives the totals.
export const roundTrips = { postgresql: 0, redis: 0 };
// The end of the RESP value at buf[i], or -1 if it has not all arrived.
function respEnd(buf, i) {
  const eol = buf.indexOf('\r\n', i);
  if (eol < 0) return -1;
  const type = String.fromCharCode(buf[i]);
  const n = Number(buf.toString('latin1', i + 1, eol));
  if (type === '$' || type === '=' || type === '!') { // a bulk string (-1: null)
    const end = n < 0 ? eol + 2 : eol + 2 + n + 2;
    return end <= buf.length ? end : -1;
  }
  if ('*~>%|'.includes(type)) { // an aggregate (a map or an attribute has 2 values per entry)
    let at = eol + 2;
    for (let k = 0; k < (type === '%' || type === '|' ? 2 * n : Math.max(n, 0)); k++) {
      at = respEnd(buf, at);
      if (at < 0) return -1;
    }
    return at;
  }
  return eol + 2; // a simple string, an error, a number, a null, a boolean, a double
}
function counter(kind) {
  let pending = Buffer.alloc(0);
  return (chunk) => {
    let buf = pending.length ? Buffer.concat([pending, chunk]) : chunk;
    let i = 0;
    for (;;) {
      if (kind === 'postgresql') { // type byte, int32 length (itself included)
        if (buf.length - i < 5) break;
        const end = i + 1 + buf.readInt32BE(i + 1);
        if (end > buf.length) break;
        if (buf[i] === 0x5a) roundTrips.postgresql++; // 'Z'
        i = end;
      } else {
        if (i >= buf.length) break;
        const end = respEnd(buf, i);
        if (end < 0) break;
        roundTrips.redis++;
        i = end;
      }
    }
    pending = buf.subarray(i);
    buf = null;
  };
}
if (process.env.BENCH_COUNT === '1') {
  const redisPort = Number(new URL(process.env.REDIS_URL ?? 'redis://x:0').port);
  const push = net.Socket.prototype.push;
  const counters = new WeakMap();
  net.Socket.prototype.push = function countedPush(chunk, ...rest) {
    if (chunk !== null && !this.server && !this._server) {
      let count = counters.get(this);
      if (count === undefined) {
        const kind = this.remotePort === undefined ? 'postgresql'
          : this.remotePort === redisPort ? 'redis' : null;
        count = kind ? counter(kind) : () => {};
        counters.set(this, count);
      }
      count(chunk);
    }
    return push.call(this, chunk, ...rest);
  };
}
