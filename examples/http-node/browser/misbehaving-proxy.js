// A reverse proxy between the browser and the orders server that misbehaves on purpose, once
// per planned POST /orders (then it passes requests through):
//   'drop'   forwards the request, reads the whole answer (the order is committed), then
//            closes the browser's connection without a byte of it
//   'delay'  forwards the request and holds the answer back until the browser gives up
//   'reset'  resets the connection before the request reaches the server
//   '503'    answers 503 itself, as a load balancer without a backend would
//   'slow'   passes the request on with ?delay_ms=<slowMs>: the server's handler holds the key
//            past the page's timeout, so the retry meets it in flight (409)
// Every answer says Connection: close, so each attempt of the page opens a new connection and
// the browser cannot resend a request on its own (it does so on a reused connection).
import http from 'node:http';

export async function startProxy(target, { slowMs }) {
  const plan = [];
  const posts = []; // { key, behaviour } of every POST /orders received
  const held = new Set();
  const server = http.createServer((req, res) => {
    const isOrder = req.method === 'POST' && req.url.startsWith('/orders');
    const behaviour = isOrder ? (plan.shift() ?? 'pass') : 'pass';
    if (isOrder) posts.push({ key: req.headers['idempotency-key'], behaviour });
    res.shouldKeepAlive = false;
    if (behaviour === 'reset') return req.socket.resetAndDestroy();
    if (behaviour === '503') {
      req.resume();
      res.writeHead(503, { 'Content-Type': 'application/json' });
      return res.end('{"error":"bad_gateway","message":"no backend answered"}');
    }
    const url = new URL(req.url, target);
    if (behaviour === 'slow') url.searchParams.set('delay_ms', String(slowMs));
    const upstream = http.request(url, {
      method: req.method,
      headers: { ...req.headers, connection: 'close' },
    }, (answer) => {
      if (behaviour === 'pass' || behaviour === 'slow') {
        res.writeHead(answer.statusCode, answer.headers);
        return answer.pipe(res);
      }
      answer.resume();
      answer.on('end', () => {
        if (behaviour === 'drop') return req.socket.destroy();
        held.add(res); // 'delay': never answered; gone when the browser closes the connection
        res.on('close', () => held.delete(res));
      });
    });
    upstream.on('error', () => res.destroy());
    req.pipe(upstream);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    posts,
    // The misbehaviours for the next POST /orders, in order.
    plan(...behaviours) { plan.splice(0, plan.length, ...behaviours); },
    async close() {
      for (const res of held) res.destroy();
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
