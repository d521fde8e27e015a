// The connection layer: the one module that relies on node-postgres beyond its public API. It
// checks a client before use (transaction status, client_encoding), watches its connection
// while a helper uses it, runs statements with pg's errors translated to the typed errors of
// errors.js, tells a lost connection apart, and sends several statements in one write on pg's
// own protocol connection. Every other module calls pg only through the functions here.
//
// Two paths. The public one, on any pg 8 from the oldest tested on (package.json's peer range):
// client.query only (a statement a round trip, every value bound; a named statement through
// pg's own prepared-statement handling), client.getTransactionStatus, pg's `pipeline` option.
// The fast one, only on the pg releases it is tested with (PG_FAST_PATH_TESTED) and unless
// IDEMPOTENCY_PG_FAST_PATH=off: several statements in one write, and calls on a pipelined
// connection without pg's Query (bench/pages/peers.md says what they save), through these
// node-postgres internals (test/connection.test.js checks each of them against the installed
// pg when the fast path is on):
//   client.connection                  the protocol connection of a pg.Client
//   connection.parsedStatements        { name: text } of the statements parsed on it
//   connection.parse / bind / execute / sync / sendCopyFail   protocol messages
//   connection.stream.cork / uncork    one write for several messages (optional)
//   connection 'parseComplete' event   each ParseComplete, in order
//   connection 'parameterStatus' event { parameterName, parameterValue } of a ParameterStatus
//   the submittable protocol           client.query(x) calls x.submit(connection), then
//                                      x.handleDataRow({ fields }) ... x.handleReadyForQuery()
//   client.pipeline                    pg's pipeline mode (refuses submittables that are not
//                                      a Query)
//   client.constructor.Query           pg's Query class (Client.Query)
//   connection.submittedNamedStatements { name: text } of the named Parses sent, not yet
//                                      answered (pg's pipeline mode)
//   the client's ParseComplete / ErrorResponse  record / forget the active query's name
//   client._queryable, client._ending  false / true once the client cannot run queries
// A client without them (pg-native, a wrapper) gets the public path too.
import { createRequire } from 'node:module';
import { ClientEncodingError, ConnectionLostError, IdempotencyError, typedError,
  TransactionAbortedError } from './errors.js';
import { noteRoundTrip } from './telemetry.js';
// Registers the translation of a missing function or schema of the extension (lib/versions.js).
import './versions.js';

// The oldest node-postgres release the whole suite runs on (package.json's peerDependencies.pg
// is ^ it, test/pg-oldest/package-lock.json pins it; package-lock.json pins the newest).
export const PG_OLDEST_TESTED = '8.21.0';
// The releases the fast path is tested on: on any other it is off.
export const PG_FAST_PATH_TESTED = Object.freeze(['8.23.1']);

// The version of the pg this package resolves (the application's, a peer dependency), or null.
function installedPg() {
  try {
    return createRequire(import.meta.url)('pg/package.json').version;
  } catch {
    return null;
  }
}
export const PG_VERSION = installedPg();

// Whether the fast path is on for pg `version`, and the environment's IDEMPOTENCY_PG_FAST_PATH.
export const fastPathFor = (version, setting = process.env.IDEMPOTENCY_PG_FAST_PATH) =>
  setting !== 'off' && PG_FAST_PATH_TESTED.includes(version);
export const FAST_PATH = fastPathFor(PG_VERSION);

// 'I' idle, 'T' in a transaction, 'E' in a failed transaction; undefined if pg cannot tell
// (pg before 8.21, or no query run yet).
export function transactionStatus(client) {
  return typeof client.getTransactionStatus === 'function'
    ? client.getTransactionStatus() ?? undefined : undefined;
}

// The client_encoding the server last reported (ParameterStatus) on each pg connection this
// package has used, followed from its first call there (pg itself does not follow it); UTF8
// until a report comes, as pg asks for it when it connects. undefined off the fast path, and
// for a client without pg's protocol connection (pg-native, a wrapper).
const clientEncodings = new WeakMap();
function clientEncoding(client) {
  if (!FAST_PATH) return undefined;
  const connection = client?.connection;
  if (typeof connection?.on !== 'function') return undefined;
  let seen = clientEncodings.get(connection);
  if (seen === undefined) {
    seen = { value: 'UTF8' };
    connection.on('parameterStatus', (msg) => {
      if (msg.parameterName === 'client_encoding') seen.value = msg.parameterValue;
    });
    clientEncodings.set(connection, seen);
  }
  return seen.value;
}

// Throws, before anything is sent, on a connection inside a failed transaction, and on one
// whose client_encoding is not UTF8 (node-postgres sends every value as UTF-8: the server would
// read the bytes as that other encoding and store other characters).
export function checkUsable(client) {
  if (transactionStatus(client) === 'E') {
    throw new TransactionAbortedError('the connection is inside a failed transaction',
      { hint: 'roll the transaction back before calling the idempotency helpers' });
  }
  const encoding = clientEncoding(client);
  if (encoding !== undefined && encoding.toUpperCase() !== 'UTF8') {
    throw new ClientEncodingError(
      `the session's client_encoding is ${encoding}, and node-postgres sends UTF-8`,
      { hint: 'leave client_encoding at UTF8 (RESET client_encoding)' });
  }
}

// Socket errors of a connection that is gone, and the server's errors that end the session.
const LOST_ERRNOS = new Set(['EPIPE', 'ECONNRESET', 'ECONNREFUSED', 'ECONNABORTED', 'ETIMEDOUT',
  'ENOTCONN', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOENT', 'ERR_STREAM_DESTROYED',
  'ERR_STREAM_WRITE_AFTER_END']);
const LOST_SQLSTATES = new Set(['57P01', '57P02', '57P03']); // admin / crash shutdown, starting

// The clients whose connection reported an 'error' while watched (watchConnection): gone.
const lostClients = new WeakSet();

// Whether err means the connection is gone (client, if given: a pg client that reported an
// error while watched counts too, and on the fast path one that pg says is no longer queryable).
export function isConnectionLost(err, client) {
  if (err instanceof ConnectionLostError) return true;
  if (client && typeof client === 'object' && lostClients.has(client)) return true;
  if (FAST_PATH && client && (client._queryable === false || client._ending === true)) return true;
  if (err === null || typeof err !== 'object') return false;
  const code = typeof err.code === 'string' ? err.code : '';
  if (LOST_ERRNOS.has(code) || LOST_SQLSTATES.has(code) || code.startsWith('08')) return true;
  return err.severity === undefined && typeof err.message === 'string' &&
    /Connection terminated|not queryable|Client was closed/.test(err.message);
}

// The typed error for an error of pg (the error itself for an unlisted SQLSTATE, or for
// something that is not a server error); ConnectionLostError for a connection that is gone.
export function translate(err, client) {
  if (err instanceof IdempotencyError || err === null || typeof err !== 'object') return err;
  if (isConnectionLost(err, client)) {
    return new ConnectionLostError(`the connection to the server was lost: ${err.message}`,
      { cause: err });
  }
  return typedError(err);
}

// While a helper uses a client, an 'error' event of its connection (the server restarted, the
// backend was terminated, the network cut it) lands here: a pg client emits one even while a
// query is failing with the same error, and one that nobody listens to ends the process. The
// returned function stops watching and gives the error seen, if any; a broken client keeps a
// listener that swallows its later events (it is not queryable any more: its queries fail).
// failure, if given, is the error a statement failed with: a backend that was terminated
// during a statement fails it (57P01) before pg has seen the socket close, and the 'error'
// event of that close comes after the helper has returned.
const swallow = () => {};
export function watchConnection(client) {
  if (typeof client?.on !== 'function') return () => null;
  let lost = null;
  const onError = (err) => {
    lost ??= err;
    lostClients.add(client);
  };
  client.on('error', onError);
  return (failure = null) => {
    client.removeListener('error', onError);
    if ((lost !== null || isConnectionLost(failure, client)) &&
      !client.listeners('error').includes(swallow)) client.on('error', swallow);
    return lost;
  };
}

// pg's per-query type parsers that leave every value as the server's text.
export const TEXT_ROWS = { getTypeParser: () => (text) => text };

// Runs one statement; pg errors come out as the typed errors of errors.js (ConnectionLostError
// when the connection is gone).
// types: pg's per-query type parsers (TEXT_ROWS: every value as its text); name: a prepared
// statement's (pg parses it once per connection).
export async function query(client, text, values = [], types = undefined, name = undefined) {
  return guarded(client, () => (types === undefined && name === undefined
    ? client.query(text, values) : client.query({ name, text, values, types })));
}

// The first value of the first row of a query's result (a statement of one column).
export const firstValue = ({ rows }) => Object.values(rows[0])[0];

// send()'s promise, with client checked before and watched during it (unless watch is false:
// its holder watches it); pg errors come out as the typed errors of errors.js.
export async function guarded(client, send, watch = true) {
  checkUsable(client);
  noteRoundTrip();
  const unwatch = watch ? watchConnection(client) : () => null;
  let failure = null;
  try {
    return await send();
  } catch (err) {
    failure = err;
    throw translate(err, client);
  } finally {
    unwatch(failure);
  }
}

// ---- statements whose columns are known ----
// pg's Query describes its portal on every execution and builds a result with a parser per
// column. A caller that knows the columns needs neither: Statements sends, for each statement,
// its Parse (a named one only if this connection has not parsed it), then Bind and Execute
// (none for a statement without values: parsed only), then one Sync, in one write, and settles
// with the rows of each executed statement as arrays of text (null for NULL). It is a pg
// "submittable" (client.query(submittable), as pg-cursor is).
// A value's text as Bind sends it: an array as a one-dimensional array literal, each element
// NULL or its text quoted (as pg's own queries send a text[] such as execute_once's
// parameters).
const QUOTED = /[\\"]/g;
function element(v) {
  if (v === null || v === undefined) return 'NULL';
  const text = String(v);
  return `"${text.includes('"') || text.includes('\\') ? text.replace(QUOTED, '\\$&') : text}"`;
}
const param = (v) => (v === null || v === undefined ? null
  : v instanceof Uint8Array ? Buffer.from(v.buffer, v.byteOffset, v.byteLength)
    : Array.isArray(v) ? `{${v.map(element).join(',')}}` : String(v));

// Whether client's connection has parsed statement ({ name, text }) under its name.
export const isParsed = (client, { name, text }) =>
  client.connection.parsedStatements[name] === text;

class Statements {
  constructor(statements) {
    this.statements = statements;
    this.rows = statements.filter((s) => s.values !== undefined).map(() => []);
    this.current = 0;
    this.result = new Promise((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
  }

  submit(connection) {
    const parsing = []; // the Parse messages sent, in order: the named ones, or null
    const { stream } = connection;
    stream.cork?.();
    try {
      for (const statement of this.statements) {
        const { name = '', text, values } = statement;
        if (name === '' || connection.parsedStatements[name] !== text) {
          connection.parse({ name, text, types: [] });
          parsing.push(name === '' ? null : statement);
        }
        if (values === undefined) continue;
        connection.bind({ statement: name, values: values.map(param) });
        connection.execute({ portal: '', rows: 0 });
      }
      connection.sync();
    } finally {
      stream.uncork?.();
    }
    // pg records a ParseComplete under a Query's one name; these are recorded here, each when
    // its ParseComplete comes (a later statement may fail: the named ones parsed stay)
    if (parsing.some((s) => s !== null)) {
      const onParsed = () => {
        const statement = parsing.shift();
        if (statement) connection.parsedStatements[statement.name] = statement.text;
      };
      connection.on('parseComplete', onParsed);
      this.stopListening = () => connection.removeListener('parseComplete', onParsed);
    }
  }

  handleRowDescription() {}

  handleDataRow(msg) { this.rows[this.current].push(msg.fields); }

  handleCommandComplete() { this.current += 1; }

  handleEmptyQuery() { this.current += 1; }

  handlePortalSuspended() {}

  handleCopyInResponse(connection) { connection.sendCopyFail('unexpected COPY'); }

  handleCopyData() {}

  // pg calls it for an ErrorResponse (then forgets the query: ReadyForQuery does not reach it)
  // and for a connection that fails or ends
  handleError(err) { this.settle(err); }

  handleReadyForQuery() { this.settle(null, this.rows); }

  // callback: what pg puts there (its query_timeout's timer, cleared when called)
  settle(err, rows) {
    if (this.settled) return;
    this.settled = true;
    this.stopListening?.();
    this.callback?.(err, rows);
    if (err) this.reject(err);
    else this.resolve(rows);
  }
}

// Whether client is node-postgres's own (it has the protocol connection Statements writes to)
// and not in pg's pipeline mode (which refuses submittables), on the fast path; pg-native and
// other look-alikes are not.
export const writesProtocol = (client) => FAST_PATH &&
  typeof client?.connection?.parsedStatements === 'object' && !client.pipeline;

// Runs statements ([{ name?, text, values? }]) in one round trip with Statements, as query
// runs one; resolves to the rows of each statement that has values.
export function queryStatements(client, statements) {
  return guarded(client, () => {
    const submitted = new Statements(statements);
    client.query(submitted);
    return submitted.result;
  });
}

// ---- one statement on a connection in pg's pipeline mode ----
// What Statements does for one statement with values, on a connection that concurrent calls
// share (pipeline.js): Bind, Execute and Sync, with a Parse only for a name the connection has
// neither parsed nor sent (pg's own bookkeeping, connection.submittedNamedStatements: the calls
// behind it in the pipeline bind the statement it parses), no Describe; it settles with its
// rows as arrays of text. pg's pipeline mode takes its own Query only, as a submittable that
// kept a portal open across round trips would take the answers of the calls behind it; this
// one never does (one unnamed portal, executed to its end before its Sync). It is a Query by
// its prototype, without Query's constructor and result, which cost a short call more than the
// rest of pg's work for it. name and text are where pg looks for them: its ParseComplete
// records the statement as parsed, its ErrorResponse forgets it as sent.
const pipelinedClasses = new WeakMap(); // pg's Query -> the class below on its prototype
function pipelinedStatementClass(Query) {
  let Class = pipelinedClasses.get(Query);
  if (Class !== undefined) return Class;
  Class = class PipelinedStatement {
    constructor(name, text, values) {
      this.name = name;
      this.text = text;
      this.values = values;
      this.found = [];
      this.settled = false;
      this.callback = undefined; // pg's query_timeout wraps it
      this.result = new Promise((resolve, reject) => {
        this.resolve = resolve;
        this.reject = reject;
      });
    }

    submit(connection) {
      const { name, text } = this;
      const known = name === '' ? undefined
        : connection.parsedStatements[name] ?? connection.submittedNamedStatements[name];
      if (known !== undefined && known !== text)
        return new Error(`the prepared statement ${name} is another statement on this connection`);
      connection.stream.cork?.();
      try {
        if (known === undefined) {
          connection.parse({ name, text, types: [] });
          if (name !== '') connection.submittedNamedStatements[name] = text;
        }
        connection.bind({ statement: name, values: this.values.map(param) });
        connection.execute({ portal: '', rows: 0 });
        connection.sync();
      } finally {
        connection.stream.uncork?.();
      }
      return null;
    }

    handleRowDescription() {}

    handleDataRow(msg) { this.found.push(msg.fields); }

    handleCommandComplete() {}

    handleEmptyQuery() {}

    handlePortalSuspended() {}

    handleCopyInResponse(connection) { connection.sendCopyFail('unexpected COPY'); }

    handleCopyData() {}

    handleError(err) { this.settle(err); }

    handleReadyForQuery() { this.settle(null, this.found); }

    settle(err, rows) {
      if (this.settled) return;
      this.settled = true;
      this.callback?.(err, rows);
      if (err) this.reject(err);
      else this.resolve(rows);
    }
  };
  Object.setPrototypeOf(Class.prototype, Query.prototype);
  pipelinedClasses.set(Query, Class);
  return Class;
}

// Whether client is pg's own in pipeline mode, with the internals PipelinedStatement uses.
const sharesProtocol = (client) => FAST_PATH && client.pipeline === true &&
  typeof client.constructor?.Query === 'function' &&
  typeof client.connection?.submittedNamedStatements === 'object';

// The rows (arrays of text) of one statement ({ name?, text, values }) on a connection in pg's
// pipeline mode that concurrent calls share (pipeline.js): as queryStatements, but the
// connection's errors are watched by its holder for as long as it holds it, not per call. A
// pipelined client without pg's internals gets pg's own query, its rows as arrays of text too.
export function sharedStatement(client, { name = '', text, values }) {
  return guarded(client, async () => {
    if (!sharesProtocol(client)) {
      const { rows } = await client.query({ name: name || undefined, text, values,
        types: TEXT_ROWS, rowMode: 'array' });
      return rows;
    }
    const PipelinedStatement = pipelinedStatementClass(client.constructor.Query);
    const submitted = new PipelinedStatement(name, text, values);
    client.query(submitted);
    return submitted.result;
  }, false);
}
