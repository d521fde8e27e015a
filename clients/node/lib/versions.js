// The versions of the idempotency extension this client works with, and the check of a
// server's: a server whose extension is missing or older says so, naming both versions,
// instead of failing later with an undefined function.
import { IdempotencyError, setUnlistedTranslator } from './errors.js';

export const CLIENT_VERSION = '0.3.0';
// The oldest and the newest extension version this client is tested against. Before 0.3.0 the
// helpers that need a newer function (below) are refused; everything else works.
export const EXTENSION_VERSIONS = Object.freeze(['0.2.0', '0.3.0']);
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
  const { rows } = await client.query(
    "SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'idempotency'");
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
