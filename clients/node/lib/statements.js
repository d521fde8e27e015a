// Every statement text this client sends, and nothing else. LISTED holds the extension's, each
// under its key in test/vectors/statements.json, the list every client's statements are
// checked against (test/statements.test.js); the others open and end transactions or read the
// outbox's logical slot, and call no function of the extension.

export const RESERVE = `SELECT r.outcome::text, r.status_code, r.response::text, r.attempt,
    r.recovery_point, r.first_seen_at, r.locked_until, r.expires_at
  FROM idempotency.reserve($1, $2, $3::bytea, $4::interval, $5::interval, $6::interval) AS r`;

export const RESERVE_BEGIN = `SELECT r.outcome::text, r.status_code, r.response::text,
    r.attempt, r.recovery_point, r.first_seen_at, r.locked_until, r.expires_at
  FROM idempotency.reserve_begin($1, $2, $3::bytea, $4::interval, $5::interval, $6::interval)
    AS r`;

// The claim, one statement of the caller's ($4, its parameters as text in $5) and its answer
// stored with the status $6, in one call: reserve's row.
export const EXECUTE_ONCE = `SELECT r.outcome::text, r.status_code, r.response::text,
    r.attempt, r.recovery_point, r.first_seen_at, r.locked_until, r.expires_at
  FROM idempotency.execute_once($1, $2, $3::bytea, $4, $5::text[], $6::integer, $7::interval,
    $8::interval, $9::interval) AS r`;

export const COMPLETE = 'SELECT idempotency.complete($1, $2, $3::integer, $4::jsonb, $5::integer)';

export const FAIL = 'SELECT idempotency.fail($1, $2, $3::jsonb, $4::integer)';

// fail with the time of the failure added to the error document (poison messages)
export const FAIL_STAMPED = `SELECT idempotency.fail($1, $2,
    $3::jsonb || pg_catalog.jsonb_build_object('failed_at', pg_catalog.now()), $4::integer)`;

export const CHECKPOINT = 'SELECT idempotency.checkpoint($1, $2, $3, $4::integer)';

export const LOOKUP = `SELECT state::text, status_code, response::text, request_hash, attempt,
    recovery_point, last_error::text, first_seen_at, completed_at, locked_until, expires_at
  FROM idempotency.lookup($1, $2)`;

export const FORGET = 'SELECT idempotency.forget($1, $2)';

export const CLAIM_ONCE = 'SELECT idempotency.claim_once($1, $2, $3::interval, $4::interval)';

export const ACCEPT_BIGINT = 'SELECT idempotency.accept($1, $2, $3::bigint)';

export const ACCEPT_UUID = 'SELECT idempotency.accept($1, $2, $3::uuid)';

export const WATERMARK = 'SELECT idempotency.watermark($1, $2)::text';

export const NEXT_KEY = 'SELECT idempotency.next_key($1)::text';

export const EMIT = 'SELECT idempotency.emit($1, $2::jsonb)::text';

// The version of the extension created in the database (no row: none).
export const EXTENSION_VERSION =
  "SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'idempotency'";

// The server's edition, its version, how it was installed and the functions the session may
// execute (read by versions.js).
export const EDITION = 'SELECT CASE WHEN e.extversion IS NULL AND m.version IS NULL THEN ' +
  'NULL WHEN EXISTS (SELECT FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_language l ON l.oid = ' +
  "p.prolang WHERE p.pronamespace = n.oid AND l.lanname = 'c') THEN 'extension' ELSE " +
  "'managed' END AS edition, COALESCE(e.extversion, m.version) AS version, CASE WHEN " +
  "e.extversion IS NOT NULL THEN 'extension' WHEN m.version IS NOT NULL THEN 'script' END AS " +
  'installed_as, COALESCE((SELECT pg_catalog.string_agg(DISTINCT p.proname::text, \' \' ORDER ' +
  'BY p.proname::text) FROM pg_catalog.pg_proc p WHERE p.pronamespace = n.oid AND ' +
  "pg_catalog.has_function_privilege(p.oid, 'EXECUTE')), '') AS functions FROM (SELECT " +
  "pg_catalog.to_regnamespace('idempotency')::oid AS oid) AS n LEFT JOIN " +
  "pg_catalog.pg_extension e ON e.extname = 'idempotency' CROSS JOIN LATERAL (SELECT " +
  "pg_catalog.substring(pg_catalog.obj_description(n.oid, 'pg_namespace'), '^idempotency " +
  "managed edition ([0-9][0-9A-Za-z.-]*)$') AS version) AS m";

export const LISTED = Object.freeze({
  reserve: RESERVE, reserve_begin: RESERVE_BEGIN, execute_once: EXECUTE_ONCE, complete: COMPLETE, fail: FAIL,
  fail_stamped: FAIL_STAMPED, checkpoint: CHECKPOINT, lookup: LOOKUP, forget: FORGET,
  claim_once: CLAIM_ONCE, accept_bigint: ACCEPT_BIGINT, accept_uuid: ACCEPT_UUID,
  watermark: WATERMARK, next_key: NEXT_KEY, emit: EMIT, extension_version: EXTENSION_VERSION,
  edition: EDITION,
});

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
