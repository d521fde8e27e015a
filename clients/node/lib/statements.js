// Every statement text this client sends, and nothing else. The extension's, and LISTED (each
// under its key in test/vectors/statements.json), are generated from that file into
// spec_statements.js and re-exported here; the others open and end transactions or read the
// outbox's logical slot, and call no function of the extension.

// The extension's calls: generated from test/vectors/statements.json (scripts/gen_spec.py).
export * from './spec_statements.js';
import {
  ACCEPT_BIGINT, ACCEPT_UUID, CLAIM_ONCE, COMPLETE, EXECUTE_ONCE, RESERVE_BEGIN,
} from './spec_statements.js';

// ---- prepared statements: parsed once per connection, under these names ----
const prepared = (name, text) => Object.freeze({ name, text });
export const PREPARED = Object.freeze({
  reserve_begin: prepared('idempotency_reserve_begin_v1', RESERVE_BEGIN),
  execute_once: prepared('idempotency_execute_once_v1', EXECUTE_ONCE),
  complete: prepared('idempotency_complete_v1', COMPLETE),
  claim_once: prepared('idempotency_claim_once_v1', CLAIM_ONCE),
  accept_bigint: prepared('idempotency_accept_bigint_v1', ACCEPT_BIGINT),
  accept_uuid: prepared('idempotency_accept_uuid_v1', ACCEPT_UUID),
});

// ---- transactions ----
export const BEGIN = 'BEGIN';
export const COMMIT = 'COMMIT';
export const ROLLBACK = 'ROLLBACK';

// The savepoint of a helper run inside the caller's transaction (runOnce, claimOnce, ...).
export const HELPER_SAVEPOINT = {
  open: 'SAVEPOINT idempotency_helper',
  close: 'RELEASE SAVEPOINT idempotency_helper',
  undo: ['ROLLBACK TO SAVEPOINT idempotency_helper', 'RELEASE SAVEPOINT idempotency_helper'],
};

// The savepoint in which a poison message's failure is recorded inside the caller's
// transaction.
export const FAILURE_SAVEPOINT = {
  open: 'SAVEPOINT idempotency_failure',
  close: 'RELEASE SAVEPOINT idempotency_failure',
  undo: 'ROLLBACK TO SAVEPOINT idempotency_failure; RELEASE SAVEPOINT idempotency_failure',
};

// ---- the outbox's logical slot (OutboxConsumer) ----
export const SLOT_EXISTS = 'SELECT 1 FROM pg_replication_slots WHERE slot_name = $1';
export const CREATE_SLOT = "SELECT pg_create_logical_replication_slot($1, 'idempotency')";
// $1 slot, $2 the most changes to read, then the output plugin's options as name, value
export const PEEK_CHANGES =
  'SELECT data FROM pg_logical_slot_peek_changes($1, NULL, $2, $3, $4)';
export const PEEK_CHANGES_OF_TOPICS =
  'SELECT data FROM pg_logical_slot_peek_changes($1, NULL, $2, $3, $4, $5, $6)';
export const ADVANCE_SLOT = 'SELECT pg_replication_slot_advance($1, $2::pg_lsn)';
