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

// The SQLSTATEs (Code*), their sentinels (Err*) and the table of those translated are
// generated from test/vectors/client.json: spec_gen.go.

// Error is an error of the server with one of the SQLSTATEs of spec_gen.go, or one the client
// raised with the same meaning. Err is the driver's error, if any.
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

// Is matches a sentinel of the same SQLSTATE, or of the one it is an alias of (22P05 and
// 22021 count as invalid JSON), and the server's IK003 / IK004 as the outcomes in_progress /
// too_old.
func (e *Error) Is(target error) bool {
	switch t := target.(type) {
	case Code:
		return e.Code == string(t) || codeAliases[e.Code] == string(t)
	case outcomeSentinel:
		return (Outcome(t) == OutcomeInProgress && e.Code == CodeKeyInProgress) ||
			(Outcome(t) == OutcomeTooOld && e.Code == CodeKeyTooOld)
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

// Code is a SQLSTATE as an error: the sentinels (Err*, spec_gen.go) are constants of it, so
// nothing a program does can change what errors.Is(err, ErrStaleAttempt) matches. An *Error
// matches the sentinel of its Code (22P05 and 22021 count as invalid JSON).
type Code string

func (c Code) Error() string { return "idempotency: SQLSTATE " + string(c) }

// Outcome is what reserve says of a key.
type Outcome string

// The outcomes of reserve.
const (
	OutcomeNew        Outcome = "new"
	OutcomeReplay     Outcome = "replay"
	OutcomeInProgress Outcome = "in_progress"
	OutcomeMismatch   Outcome = "mismatch"
	OutcomeTooOld     Outcome = "too_old"
)

type outcomeSentinel Outcome

func (s outcomeSentinel) Error() string { return "idempotency: outcome " + string(s) }

// Sentinels of the outcomes that did not give the caller the key (errors.Is matches an
// *OutcomeError, and the server's IK003 / IK004 of claim_once); constants, as the Code ones.
const (
	ErrKeyInProgress = outcomeSentinel(OutcomeInProgress) // 409
	ErrKeyMismatch   = outcomeSentinel(OutcomeMismatch)   // 422
	ErrKeyTooOld     = outcomeSentinel(OutcomeTooOld)     // 422
)

// OutcomeError is a reserve that did not give the caller the key: in_progress (another
// holder's claim is live: 409), mismatch (the key was used with another request: 422) or
// too_old (the key embeds a creation time older than the retention window: 422).
type OutcomeError struct {
	Outcome     Outcome
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
	t, ok := target.(outcomeSentinel)
	return ok && Outcome(t) == e.Outcome
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
	t, ok := target.(Code)
	if !ok {
		return false
	}
	if e.Bytes == 0 {
		return t == CodeInvalidParameterValue
	}
	return t == CodeProgramLimitExceeded
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
