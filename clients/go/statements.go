// The texts of every statement the client sends, in one place. Each text listed in
// listedStatements is the one of test/vectors/statements.json under the same name, the list
// every client's tests check against (statements_test.go: equal once runs of white space are
// folded). Every value is a parameter ($1, $2, ...); no value is ever written into a text.

package idempotency

// The extension's calls.
const (
	sqlReserve = `SELECT r.outcome::text, r.status_code, r.response::text, r.attempt,
    r.recovery_point, r.first_seen_at, r.locked_until, r.expires_at
  FROM idempotency.reserve($1, $2, $3::bytea, $4::interval, $5::interval, $6::interval) AS r`
	sqlReserveBegin = `SELECT r.outcome::text, r.status_code, r.response::text, r.attempt,
    r.recovery_point, r.first_seen_at, r.locked_until, r.expires_at
  FROM idempotency.reserve_begin($1, $2, $3::bytea, $4::interval, $5::interval, $6::interval) AS r`
	sqlComplete   = `SELECT idempotency.complete($1, $2, $3::integer, $4::jsonb, $5::integer)`
	sqlFail       = `SELECT idempotency.fail($1, $2, $3::jsonb, $4::integer)`
	sqlCheckpoint = `SELECT idempotency.checkpoint($1, $2, $3, $4::integer)`
	sqlLookup     = `SELECT state::text, status_code, response::text, request_hash, attempt,
    recovery_point, last_error::text, first_seen_at, completed_at, locked_until, expires_at
  FROM idempotency.lookup($1, $2)`
	sqlExecuteOnce = `SELECT r.outcome::text, r.status_code, r.response::text, r.attempt,
    r.recovery_point, r.first_seen_at, r.locked_until, r.expires_at
  FROM idempotency.execute_once($1, $2, $3::bytea, $4, $5::text[], $6::integer, $7::interval,
    $8::interval, $9::interval) AS r`
	sqlForget     = `SELECT idempotency.forget($1, $2)`
	sqlClaimOnce  = `SELECT idempotency.claim_once($1, $2, $3::interval, $4::interval)`
	sqlAcceptInt  = `SELECT idempotency.accept($1, $2, $3::bigint)`
	sqlAcceptUUID = `SELECT idempotency.accept($1, $2, $3::uuid)`
	sqlWatermark  = `SELECT idempotency.watermark($1, $2)::text`
	sqlNextKey    = `SELECT idempotency.next_key($1)::text`
)

// The server's edition, its version, how it was installed and the functions the session may
// execute (versions.go reads it).
const sqlEdition = `SELECT CASE WHEN e.extversion IS NULL AND m.version IS NULL THEN NULL
    WHEN EXISTS (SELECT FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_language l ON l.oid = p.prolang
      WHERE p.pronamespace = n.oid AND l.lanname = 'c') THEN 'extension' ELSE 'managed' END AS edition,
  COALESCE(e.extversion, m.version) AS version,
  CASE WHEN e.extversion IS NOT NULL THEN 'extension' WHEN m.version IS NOT NULL THEN 'script' END AS installed_as,
  COALESCE((SELECT pg_catalog.string_agg(DISTINCT p.proname::text, ' ' ORDER BY p.proname::text)
    FROM pg_catalog.pg_proc p WHERE p.pronamespace = n.oid AND pg_catalog.has_function_privilege(p.oid, 'EXECUTE')), '') AS functions
  FROM (SELECT pg_catalog.to_regnamespace('idempotency')::oid AS oid) AS n
  LEFT JOIN pg_catalog.pg_extension e ON e.extname = 'idempotency'
  CROSS JOIN LATERAL (SELECT pg_catalog.substring(pg_catalog.obj_description(n.oid, 'pg_namespace'),
    '^idempotency managed edition ([0-9][0-9A-Za-z.-]*)$') AS version) AS m`

// listedStatements: the texts above under their names in test/vectors/statements.json.
var listedStatements = map[string]string{
	"reserve":       sqlReserve,
	"reserve_begin": sqlReserveBegin,
	"complete":      sqlComplete,
	"fail":          sqlFail,
	"checkpoint":    sqlCheckpoint,
	"lookup":        sqlLookup,
	"forget":        sqlForget,
	"claim_once":    sqlClaimOnce,
	"execute_once":  sqlExecuteOnce,
	"accept_bigint": sqlAcceptInt,
	"accept_uuid":   sqlAcceptUUID,
	"watermark":     sqlWatermark,
	"next_key":      sqlNextKey,
	"edition":       sqlEdition,
}

// Transaction control: the claim's transaction, and the savepoint of RunOnceTx.
const (
	sqlBegin               = "BEGIN"
	sqlCommit              = "COMMIT"
	sqlRollback            = "ROLLBACK"
	sqlSavepoint           = "SAVEPOINT idempotency_helper"
	sqlRollbackToSavepoint = "ROLLBACK TO SAVEPOINT idempotency_helper"
	sqlReleaseSavepoint    = "RELEASE SAVEPOINT idempotency_helper"
)

// tagRollback is the command tag of a COMMIT that ended a failed transaction.
const tagRollback = "ROLLBACK"
