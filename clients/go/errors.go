// Typed errors: one SQLSTATE each, as in the error table of docs/reference.md, the reserve
// outcomes an HTTP layer answers with 409 / 422, and the misuse of a connection. Test them
// with errors.Is against the sentinels (errors.Is(err, ErrStaleAttempt)) or errors.As into
// *Error / *OutcomeError.

package idempotency

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// SQLSTATEs of the server's errors and of the client's own.
const (
	CodeNullValueNotAllowed          = "22004"
	CodeInvalidParameterValue        = "22023"
	CodeProgramLimitExceeded         = "54000"
	CodeArraySubscript               = "2202E"
	CodeObjectNotInPrerequisiteState = "55000"
	CodeStaleAttempt                 = "IK001"
	CodeResultConflict               = "IK002"
	CodeKeyInProgress                = "IK003"
	CodeKeyTooOld                    = "IK004"
	CodeReadOnlySQLTransaction       = "25006"
	CodeSerializationFailure         = "40001"
	CodeLockNotAvailable             = "55P03"
	CodeQueryCanceled                = "57014"
	CodeUndefinedObject              = "42704"
	CodeDuplicateObject              = "42710"
	CodeSequenceGeneratorLimit       = "2200H"
	CodeFeatureNotSupported          = "0A000"
	CodeInvalidJSON                  = "22P02"
	CodeUntranslatableCharacter      = "22P05" // \u0000 in a jsonb value
	CodeTransactionAborted           = "25P02"
	CodeTransactionOpen              = "25001"
	CodeUndefinedFunction            = "42883" // a function the server lacks (execute_once before 0.3.0)
	CodeConnectionLost               = "08006"
)

// Error is an error of the server with one of the SQLSTATEs above, or one the client raised
// with the same meaning. Err is the driver's error, if any.
type Error struct {
	Code    string
	Message string
	Detail  string
	Hint    string
	Err     error
}

func newError(code, message string) *Error { return &Error{Code: code, Message: message} }

func (e *Error) Error() string {
	if e.Message == "" {
		return "idempotency: SQLSTATE " + e.Code
	}
	return "idempotency: " + e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// Is matches a sentinel of the same SQLSTATE (22P05 counts as invalid JSON, and the
// server's IK003 / IK004 as the outcomes in_progress / too_old).
func (e *Error) Is(target error) bool {
	switch t := target.(type) {
	case *Error:
		if t.Message != "" {
			return e == t
		}
		return e.Code == t.Code || (t.Code == CodeInvalidJSON && e.Code == CodeUntranslatableCharacter)
	case *outcomeSentinel:
		return (t.outcome == OutcomeInProgress && e.Code == CodeKeyInProgress) ||
			(t.outcome == OutcomeTooOld && e.Code == CodeKeyTooOld)
	}
	return false
}

// HTTPStatus is the answer the middleware gives for the error: 503 for a lost connection,
// 409 / 422 for claim_once's IK003 / IK004, 0 for the others (not an answer of their own).
func (e *Error) HTTPStatus() int {
	switch e.Code {
	case CodeConnectionLost:
		return 503
	case CodeKeyInProgress:
		return 409
	case CodeKeyTooOld:
		return 422
	}
	return 0
}

// Sentinels for errors.Is.
var (
	ErrNullValueNotAllowed          = &Error{Code: CodeNullValueNotAllowed}
	ErrInvalidParameterValue        = &Error{Code: CodeInvalidParameterValue}
	ErrProgramLimitExceeded         = &Error{Code: CodeProgramLimitExceeded}
	ErrObjectNotInPrerequisiteState = &Error{Code: CodeObjectNotInPrerequisiteState}
	ErrStaleAttempt                 = &Error{Code: CodeStaleAttempt}   // IK001: another holder took over
	ErrResultConflict               = &Error{Code: CodeResultConflict} // IK002: completed with another result
	ErrReadOnlySQLTransaction       = &Error{Code: CodeReadOnlySQLTransaction}
	ErrSerializationFailure         = &Error{Code: CodeSerializationFailure}
	ErrLockNotAvailable             = &Error{Code: CodeLockNotAvailable}
	ErrQueryCanceled                = &Error{Code: CodeQueryCanceled}
	ErrUndefinedObject              = &Error{Code: CodeUndefinedObject}
	ErrDuplicateObject              = &Error{Code: CodeDuplicateObject}
	ErrSequenceGeneratorLimit       = &Error{Code: CodeSequenceGeneratorLimit}
	ErrFeatureNotSupported          = &Error{Code: CodeFeatureNotSupported}
	ErrInvalidJSON                  = &Error{Code: CodeInvalidJSON}
	ErrTransactionAborted           = &Error{Code: CodeTransactionAborted}
	ErrTransactionOpen              = &Error{Code: CodeTransactionOpen}
	ErrUndefinedFunction            = &Error{Code: CodeUndefinedFunction}
	// ErrConnectionLost: the connection broke (the server restarted or was stopped, the
	// backend was terminated, the network cut it, or no connection could be made). The
	// transaction in flight was rolled back by the server, unless the break came during
	// COMMIT: then a retry with the same key tells (it replays).
	ErrConnectionLost = &Error{Code: CodeConnectionLost}
)

// The outcomes of reserve.
const (
	OutcomeNew        = "new"
	OutcomeReplay     = "replay"
	OutcomeInProgress = "in_progress"
	OutcomeMismatch   = "mismatch"
	OutcomeTooOld     = "too_old"
)

type outcomeSentinel struct{ outcome string }

func (s *outcomeSentinel) Error() string { return "idempotency: outcome " + s.outcome }

// Sentinels of the outcomes that did not give the caller the key (errors.Is matches an
// *OutcomeError, and the server's IK003 / IK004 of claim_once).
var (
	ErrKeyInProgress error = &outcomeSentinel{OutcomeInProgress} // 409
	ErrKeyMismatch   error = &outcomeSentinel{OutcomeMismatch}   // 422
	ErrKeyTooOld     error = &outcomeSentinel{OutcomeTooOld}     // 422
)

// OutcomeError is a reserve that did not give the caller the key: in_progress (another
// holder's claim is live: 409), mismatch (the key was used with another request: 422) or
// too_old (the key embeds a creation time older than the retention window: 422).
type OutcomeError struct {
	Outcome     string
	Scope, Key  string
	Reservation *Reservation
}

func (e *OutcomeError) Error() string {
	switch e.Outcome {
	case OutcomeInProgress:
		return fmt.Sprintf("idempotency: key %q is in progress", e.Key)
	case OutcomeMismatch:
		return fmt.Sprintf("idempotency: key %q was used with a different request", e.Key)
	case OutcomeTooOld:
		return fmt.Sprintf("idempotency: key %q is older than the retention window", e.Key)
	}
	return fmt.Sprintf("idempotency: key %q: outcome %s", e.Key, e.Outcome)
}

func (e *OutcomeError) Is(target error) bool {
	t, ok := target.(*outcomeSentinel)
	return ok && t.outcome == e.Outcome
}

// HTTPStatus: 409 for in_progress, 422 for mismatch and too_old.
func (e *OutcomeError) HTTPStatus() int {
	if e.Outcome == OutcomeInProgress {
		return 409
	}
	return 422
}

// RetryAfter is the Retry-After of a 409 in seconds: the time left on the holder's lease,
// at least 1 (1 while the holder is still inside its transaction).
func (e *OutcomeError) RetryAfter(now time.Time) int {
	if e.Reservation == nil || e.Reservation.LockedUntil == nil {
		return 1
	}
	s := int(math.Ceil(e.Reservation.LockedUntil.Sub(now).Seconds()))
	if s < 1 {
		return 1
	}
	return s
}

func outcomeError(scope, key string, r *Reservation) error {
	switch r.Outcome {
	case OutcomeInProgress, OutcomeMismatch, OutcomeTooOld:
		return &OutcomeError{Outcome: r.Outcome, Scope: scope, Key: key, Reservation: r}
	}
	return nil
}

// KeyMalformedError is a key or scope the server would refuse, refused before anything is
// sent: empty (22023) or over 255 bytes (54000). The middleware answers 400 with
// HTTPError: idempotency_key_malformed or idempotency_scope_malformed.
type KeyMalformedError struct {
	What  string // "key" or "scope"
	Bytes int
}

func (e *KeyMalformedError) Error() string {
	if e.Bytes == 0 {
		return fmt.Sprintf("idempotency: the idempotency %s must not be empty", e.What)
	}
	return fmt.Sprintf("idempotency: the idempotency %s is %d bytes, over the limit of 255", e.What, e.Bytes)
}

func (e *KeyMalformedError) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok || t.Message != "" {
		return false
	}
	if e.Bytes == 0 {
		return t.Code == CodeInvalidParameterValue
	}
	return t.Code == CodeProgramLimitExceeded
}

func (e *KeyMalformedError) HTTPStatus() int { return 400 }

func (e *KeyMalformedError) HTTPError() string { return "idempotency_" + e.What + "_malformed" }

// PositionBelowWatermarkError: ApplyOnce with Strict got a position below the partition's
// watermark (a message out of order); nothing was applied.
type PositionBelowWatermarkError struct {
	Consumer, Partition string
	Position, Watermark string
}

func (e *PositionBelowWatermarkError) Error() string {
	return fmt.Sprintf("idempotency: position %s of partition %q (consumer %q) is below its watermark %s",
		e.Position, e.Partition, e.Consumer, e.Watermark)
}

// IsConnectionLost reports whether err means the connection to the server is gone.
func IsConnectionLost(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == CodeConnectionLost || lostCause(err)
}
