// The versions of the idempotency extension this client works with, and the check of a
// server's: a server whose extension is missing or older says so, naming both versions,
// instead of failing later with an undefined function.
import { IdempotencyError, setUnlistedTranslator } from './errors.js';
import { EDITION, EXTENSION_VERSION } from './statements.js';

export const CLIENT_VERSION = '0.4.0';
// The oldest and the newest extension version this client is tested against. Before 0.3.0 the
// helpers that need a newer function (below) are refused; everything else works.
export const EXTENSION_VERSIONS = Object.freeze(['0.2.0', '0.4.0']);
// Functions the client calls that came after the oldest version: the version that added each.
export const FUNCTION_SINCE = Object.freeze({ claim_once: '0.3.0', execute_once: '0.3.0',
  reserve_begin: '0.3.0' });

const SUPPORTED = `${EXTENSION_VERSIONS[0]} to ${EXTENSION_VERSIONS[1]}`;
const UPDATE_HINT = 'ALTER EXTENSION idempotency UPDATE (as its owner) after installing the ' +
  'newer extension package';
const CREATE_HINT = 'CREATE EXTENSION idempotency (as a superuser)';

// '0.3.0' -> [0, 3, 0]; a part that is not a number ends the list.
export function parseVersion(version) {
  const parts = [];
  for (const part of String(version).split('.')) {
    if (!/^[0-9]+$/.test(part)) break;
    parts.push(Number(part));
  }
  return parts;
}

export function compareVersions(a, b) {
  const x = parseVersion(a);
  const y = parseVersion(b);
  for (let i = 0; i < Math.max(x.length, y.length); i++) {
    const d = (x[i] ?? 0) - (y[i] ?? 0);
    if (d !== 0) return Math.sign(d);
  }
  return 0;
}

// The server's idempotency extension is missing or older than this client needs.
// serverVersion: the installed version (null: not installed, or unknown); needed: the oldest
// version that serves the call; code: the server's SQLSTATE (42883 for a missing function,
// 3F000 for a missing schema), or 42883 from checkExtension.
export class ExtensionVersionError extends IdempotencyError {
  static sqlstate = '42883';
  static description = 'the idempotency extension is missing or older than this client needs';
  constructor(message, { serverVersion = null, needed = null, code, hint, cause } = {}) {
    super(message, { code, hint: hint ?? UPDATE_HINT, cause });
    this.serverVersion = serverVersion;
    this.needed = needed;
  }
  get httpStatus() { return 500; }
}

// The version of the idempotency extension created in the database of client (a pg Client,
// PoolClient or Pool), or null.
export async function serverExtensionVersion(client) {
  const { rows } = await client.query(EXTENSION_VERSION);
  return rows.length ? rows[0].extversion : null;
}

// The server's extension version, once it is at least `needed` (default: the oldest this
// client supports); ExtensionVersionError, naming both versions, otherwise.
export async function checkExtension(client, needed = EXTENSION_VERSIONS[0]) {
  const version = await serverExtensionVersion(client);
  if (version === null) {
    throw new ExtensionVersionError('the idempotency extension is not installed in this ' +
      `database; @idempotency/client ${CLIENT_VERSION} needs extension version ${needed} or ` +
      `later (it works with ${SUPPORTED})`, { needed, hint: CREATE_HINT });
  }
  if (compareVersions(version, needed) < 0) {
    throw new ExtensionVersionError(`the server's idempotency extension is version ${version}, ` +
      `older than ${needed}, which @idempotency/client ${CLIENT_VERSION} needs (it works with ` +
      `${SUPPORTED})`, { serverVersion: version, needed });
  }
  return version;
}

// For a server error saying that a function of schema idempotency (42883), or the schema
// (3F000), does not exist: the ExtensionVersionError that says which version is needed;
// undefined for any other error.
export function missingFromServer(err) {
  const message = typeof err?.message === 'string' ? err.message : '';
  const common = { code: err?.code, cause: err };
  if (err?.code === '3F000' && message.includes('"idempotency"')) {
    return new ExtensionVersionError(`${message}: the idempotency extension is not installed ` +
      `in this database; @idempotency/client ${CLIENT_VERSION} works with extension versions ` +
      SUPPORTED, { ...common, needed: EXTENSION_VERSIONS[0], hint: CREATE_HINT });
  }
  const match = err?.code === '42883' ? /function idempotency\.(\w+)\(/.exec(message) : null;
  if (match === null) return undefined;
  const needed = FUNCTION_SINCE[match[1]] ?? EXTENSION_VERSIONS[0];
  return new ExtensionVersionError(`idempotency.${match[1]} does not exist on this server: it ` +
    `needs extension version ${needed} or later, and the server's is older ` +
    `(@idempotency/client ${CLIENT_VERSION} works with extension versions ${SUPPORTED}; ` +
    "checkExtension(client) names the server's)", { ...common, needed });
}

setUnlistedTranslator(missingFromServer);

// The server's edition is told by one statement that raises nothing whatever is installed
// (EDITION in statements.js): the C++ extension (its functions are in language c), the managed
// edition (SQL and PL/pgSQL: created through pg_tle, or run with psql -f, when the schema's
// comment names it), or none; its version; and the functions of schema idempotency the
// session may execute.
//
// What the server offers: name 'extension' (the C++ extension), 'managed' (the managed
// edition) or null (neither is installed in this database); version (null when not
// installed); installedAs 'extension' (CREATE EXTENSION, through pg_tle for the managed
// edition) or 'script' (the managed edition run with psql -f), null when not installed;
// functions: the names of the functions of schema idempotency this session may execute.
export class Edition {
  constructor({ name = null, version = null, installedAs = null, functions = [] } = {}) {
    this.name = name;
    this.version = version;
    this.installedAs = installedAs;
    this.functions = Object.freeze([...functions]);
    Object.freeze(this);
  }

  // Whether the server has idempotency.<fn> and this session may execute it (the managed
  // edition has no reserve_begin, emit or stats; an extension before 0.3.0 no claim_once).
  offers(fn) { return this.functions.includes(fn); }
}

// The edition of one result row of EDITION.
export function editionOf(row) {
  return new Edition({
    name: row?.edition ?? null,
    version: row?.version ?? null,
    installedAs: row?.installed_as ?? null,
    functions: row?.functions ? row.functions.split(' ') : [],
  });
}

// Editions detected, by the object they were asked of: a pg Client or PoolClient (one
// connection: a pool's client object is its connection's for the connection's life) or a
// Pool (its connections share a database and a role). Each holds the promise of the one query.
const detected = new WeakMap();

// The edition of client's database (a pg Client, PoolClient or Pool): one query the first time,
// cached for that object from then on (refresh: true asks again, after ALTER EXTENSION UPDATE or
// a move between editions). A query that fails is not cached.
export function serverEdition(client, { refresh = false } = {}) {
  let pending = refresh ? undefined : detected.get(client);
  if (pending === undefined) {
    pending = client.query(EDITION).then(({ rows }) => editionOf(rows[0]));
    detected.set(client, pending);
    pending.catch(() => { if (detected.get(client) === pending) detected.delete(client); });
  }
  return pending;
}
