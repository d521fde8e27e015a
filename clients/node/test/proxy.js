// The tests' TCP proxy to the test cluster (faults.test.js, fastify.test.js).
import { once } from 'node:events';
import net from 'node:net';

// A TCP proxy to the test cluster. cut() destroys every connection at once (as a server
// restart or a network failure does); refuse(true) closes new connections right away (the
// server is down); refuse(false) lets them through again.
export class Proxy {
  constructor() {
    this.pairs = new Set();
    this.refusing = false;
    const host = process.env.PGHOST ?? '/var/run/postgresql';
    const port = Number(process.env.PGPORT ?? 5432);
    this.target = host.startsWith('/') ? { path: `${host}/.s.PGSQL.${port}` } : { host, port };
    this.server = net.createServer((inbound) => {
      if (this.refusing) { inbound.destroy(); return; }
      const outbound = net.connect(this.target);
      const pair = [inbound, outbound];
      this.pairs.add(pair);
      const close = () => { inbound.destroy(); outbound.destroy(); this.pairs.delete(pair); };
      for (const s of pair) { s.on('error', close); s.on('close', close); }
      inbound.pipe(outbound);
      outbound.pipe(inbound);
    });
  }

  async listen() {
    this.server.listen(0, '127.0.0.1');
    await once(this.server, 'listening');
    return this.server.address().port;
  }

  cut() {
    const n = this.pairs.size;
    for (const [inbound, outbound] of this.pairs) {
      inbound.resetAndDestroy(); // the service sees ECONNRESET
      outbound.destroy(); // the server sees the client go
    }
    this.pairs.clear();
    return n;
  }

  refuse(on) { this.refusing = on; }
  close() { this.cut(); this.server.close(); }
}
