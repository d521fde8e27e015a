// The answer of a handler held back on node's http.ServerResponse (the one Express hands on, or
// the raw one under Fastify's reply) until the claim's transaction has committed, and the
// sending of what the decision flow answers in the end: the held answer as the handler gave it,
// or an answer of the flow's own in its place.

// Replaces res's writeHead, write and end until restore(): the handler's answer is held;
// answer resolves with it ({ held: true, status, headers, body, head, callback }) once the
// handler has ended it.
export function holdAnswer(res) {
  const original = { writeHead: res.writeHead, write: res.write, end: res.end };
  const chunks = [];
  let head = null;
  let ended = false;
  let settle;
  const answer = new Promise((resolve) => { settle = resolve; });
  const chunkOf = (chunk, encoding) =>
    (typeof chunk === 'string' ? Buffer.from(chunk, typeof encoding === 'string' ? encoding : 'utf8')
      : Buffer.from(chunk));
  res.writeHead = (statusCode, ...rest) => {
    head = [statusCode, ...rest];
    res.statusCode = statusCode;
    return res;
  };
  res.write = (chunk, encoding, callback) => {
    if (chunk !== undefined && chunk !== null) chunks.push(chunkOf(chunk, encoding));
    const cb = typeof encoding === 'function' ? encoding : callback;
    if (cb) process.nextTick(cb);
    return true;
  };
  res.end = (chunk, encoding, callback) => {
    if (ended) return res;
    ended = true;
    if (typeof chunk === 'function') {
      callback = chunk;
      chunk = undefined;
    } else if (typeof encoding === 'function') {
      callback = encoding;
    }
    if (chunk !== undefined && chunk !== null) chunks.push(chunkOf(chunk, encoding));
    // writeHead's headers, then those set before it (writeHead's win)
    const given = head?.length > 1 && typeof head[head.length - 1] === 'object'
      ? head[head.length - 1] : null;
    const pairs = Array.isArray(given)
      ? (Array.isArray(given[0]) ? given
        : given.flatMap((v, i) => (i % 2 === 0 ? [[v, given[i + 1]]] : [])))
      : Object.entries(given ?? {});
    settle({ held: true, status: head ? head[0] : res.statusCode,
      headers: [...pairs, ...Object.entries(res.getHeaders())], body: Buffer.concat(chunks),
      head, callback });
    return res;
  };
  let restored = false;
  return {
    answer,
    restore: () => {
      if (restored) return;
      restored = true;
      Object.assign(res, original);
    },
  };
}

// Sends answer on res (restoring it first when holding holds it): a held answer as the handler
// gave it, or an answer of the flow's own ({ status, headers, body }), which replaces whatever
// was held.
export function sendAnswer(res, holding, answer) {
  holding?.restore();
  if (answer.held) {
    if (answer.head) res.writeHead(...answer.head);
    res.end(answer.body, answer.callback);
    return;
  }
  if (holding !== null && holding !== undefined) {
    // replaces the held answer: none of its headers that describe another body stay
    res.removeHeader('Content-Length');
    res.removeHeader('Location');
  }
  res.writeHead(answer.status, answer.headers);
  res.end(answer.body);
}
