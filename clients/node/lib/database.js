// How the middleware tells a database that cannot be reached from an error of its own.
import { IdempotencyError } from './errors.js';

// No server answered (a refused or lost connection, a pool timeout), or the server is going
// away (class 08, 57P01-57P03): the request may be retried as it is.
export function databaseUnreachable(err) {
  if (typeof err?.code === 'string' && /^(08|57P0[123])/.test(err.code)) return true;
  return !(err instanceof IdempotencyError) && !(err instanceof TypeError) &&
    err?.severity === undefined;
}

// The pool could not give a connection (nothing was sent).
export class PoolConnectError extends Error {
  constructor(cause) {
    super(cause?.message, { cause });
  }
}
