// The texts of every statement the client sends: those of test/vectors/statements.json in
// statements_gen.go, generated from it, and transaction control here. Every value is a
// parameter ($1, $2, ...); no value is ever written into a text.

package idempotency

// The extension's calls are generated from test/vectors/statements.json into
// statements_gen.go (scripts/gen_spec.py): sqlReserve, sqlReserveBegin, ... and
// listedStatements.

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
