// The key calls of the extension with typed results and typed errors: reserve,
// reserve_begin, complete, fail, checkpoint, lookup, forget, the name checks and the request's
// hash. Each takes a Querier (*sql.DB, *sql.Conn or *sql.Tx): on a *sql.Tx it runs inside the
// caller's transaction. This package never opens connections itself.

package idempotency

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"time"
)

// Reservation is reserve's row.
type Reservation struct {
	Outcome       Outcome         // new, replay, in_progress, mismatch, too_old
	StatusCode    int             // the stored status of a replay (0 if none)
	Response      json.RawMessage // the stored response of a replay as JSON text (nil if none)
	Attempt       int
	RecoveryPoint *string // the last checkpoint of an attempt that was taken over
	FirstSeenAt   *time.Time
	LockedUntil   *time.Time
	ExpiresAt     *time.Time
}

// ReserveOptions are reserve's lock_ttl, retention and wait (zero: the server's defaults of
// 5 minutes, 24 hours and no wait).
type ReserveOptions struct {
	LockTTL   time.Duration
	Retention time.Duration
	Wait      time.Duration
}

func (o ReserveOptions) values() (lockTTL, retention, wait string) {
	lockTTL, retention, wait = defaultLockTTL, defaultRetention, defaultWait
	if o.LockTTL > 0 {
		lockTTL = interval(o.LockTTL)
	}
	if o.Retention > 0 {
		retention = interval(o.Retention)
	}
	if o.Wait > 0 {
		wait = interval(o.Wait)
	}
	return
}

func scanReservation(row interface{ Scan(...interface{}) error }) (*Reservation, error) {
	var (
		r                              Reservation
		status, attempt                sql.NullInt64
		response, recovery             sql.NullString
		firstSeen, lockedUntil, expiry sql.NullTime
	)
	if err := row.Scan(&r.Outcome, &status, &response, &attempt, &recovery, &firstSeen, &lockedUntil, &expiry); err != nil {
		return nil, translate(err)
	}
	r.StatusCode = int(status.Int64)
	if response.Valid {
		r.Response = json.RawMessage(response.String)
	}
	r.Attempt = int(attempt.Int64)
	if recovery.Valid {
		s := recovery.String
		r.RecoveryPoint = &s
	}
	r.FirstSeenAt = timePtr(firstSeen)
	r.LockedUntil = timePtr(lockedUntil)
	r.ExpiresAt = timePtr(expiry)
	return &r, nil
}

func timePtr(t sql.NullTime) *time.Time {
	if !t.Valid {
		return nil
	}
	v := t.Time
	return &v
}

// CheckNames refuses (with *KeyMalformedError) a scope or key that is not 1 to 255 bytes,
// the server's rule, before anything is sent.
func CheckNames(scope, key string) error {
	for _, p := range [2][2]string{{"scope", scope}, {"key", key}} {
		if n := len(p[1]); n == 0 || n > 255 {
			return &KeyMalformedError{What: p[0], Bytes: n}
		}
	}
	return nil
}

func reserveArgs(scope, key string, requestHash []byte, o ReserveOptions) ([]interface{}, error) {
	if err := CheckNames(scope, key); err != nil {
		return nil, err
	}
	lockTTL, retention, wait := o.values()
	return []interface{}{scope, key, nullableBytes(requestHash), lockTTL, retention, wait}, nil
}

// Reserve claims (scope, key) or tells why not: idempotency.reserve. requestHash: a
// Fingerprint, or nil (no check).
func Reserve(ctx context.Context, q Querier, scope, key string, requestHash []byte, o ReserveOptions) (*Reservation, error) {
	args, err := reserveArgs(scope, key, requestHash, o)
	if err != nil {
		return nil, err
	}
	noteRoundTrip(ctx)
	return scanReservation(q.QueryRowContext(ctx, sqlReserve, args...))
}

// ReserveBegin is idempotency.reserve_begin, for a connection with no transaction open: the
// outcome new leaves a transaction open (the server opened it, as BEGIN would); any other
// leaves none. Use it on a *sql.Conn (the same server connection must run the work and
// complete + COMMIT, or ROLLBACK).
func ReserveBegin(ctx context.Context, conn *sql.Conn, scope, key string, requestHash []byte, o ReserveOptions) (*Reservation, error) {
	args, err := reserveArgs(scope, key, requestHash, o)
	if err != nil {
		return nil, err
	}
	noteRoundTrip(ctx)
	return scanReservation(conn.QueryRowContext(ctx, sqlReserveBegin, args...))
}

// Features tracks what one server refused, so that later calls stop asking: today that is
// reserve_begin (a role without EXECUTE on it, Citus). What the server has is asked once, with
// its edition (versions.go): the managed edition and a server before 0.3.0 have no
// reserve_begin, so it is not even tried there.
type Features struct {
	noReserveBegin int32 // set to 1 (atomically) after a refusal
}

// reserveBeginRefused: reserve_begin refused as a whole (a server before 0.3.0: 42883; a
// role without EXECUTE: 42501; keys distributed by Citus: 0A000). BEGIN + reserve do the
// same.
func reserveBeginRefused(err error) bool {
	var e *Error
	code := sqlState(err)
	if errors.As(err, &e) {
		code = e.Code
	}
	if code != "42883" && code != "42501" && code != CodeFeatureNotSupported {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "reserve_begin") || strings.Contains(msg, "shard")
}

// jsonArg is a response or error as a jsonb parameter: nil for SQL NULL, a JSON text as it is.
func jsonArg(v json.RawMessage) interface{} {
	if v == nil {
		return nil
	}
	return string(v)
}

// Complete stores the final answer of (scope, key); attempt (0: none) is the fencing token.
func Complete(ctx context.Context, q Querier, scope, key string, statusCode int, response json.RawMessage, attempt int) error {
	return exec(ctx, q, sqlComplete, scope, key, statusCode, jsonArg(response), nullableInt(attempt))
}

// Fail releases the claim for a retry; errorInfo (JSON, may be nil) is kept as last_error.
func Fail(ctx context.Context, q Querier, scope, key string, errorInfo json.RawMessage, attempt int) error {
	return exec(ctx, q, sqlFail, scope, key, jsonArg(errorInfo), nullableInt(attempt))
}

// Checkpoint records a recovery point of a multi-step action.
func Checkpoint(ctx context.Context, q Querier, scope, key, recoveryPoint string, attempt int) error {
	return exec(ctx, q, sqlCheckpoint, scope, key, recoveryPoint, nullableInt(attempt))
}

// Record is what the server knows of a key (Lookup).
type Record struct {
	State         string
	StatusCode    int
	Response      json.RawMessage
	RequestHash   []byte
	Attempt       int
	RecoveryPoint *string
	LastError     json.RawMessage
	FirstSeenAt   *time.Time
	CompletedAt   *time.Time
	LockedUntil   *time.Time
	ExpiresAt     *time.Time
}

// Lookup is the stored record of a key, or nil.
func Lookup(ctx context.Context, q Querier, scope, key string) (*Record, error) {
	var (
		r                                         Record
		status, attempt                           sql.NullInt64
		response, recovery, lastError             sql.NullString
		firstSeen, completed, lockedUntil, expiry sql.NullTime
	)
	noteRoundTrip(ctx)
	err := q.QueryRowContext(ctx, sqlLookup, scope, key).Scan(&r.State, &status, &response, &r.RequestHash,
		&attempt, &recovery, &lastError, &firstSeen, &completed, &lockedUntil, &expiry)
	if err == sql.ErrNoRows {
		return nil, nil
	}
	if err != nil {
		return nil, translate(err)
	}
	r.StatusCode, r.Attempt = int(status.Int64), int(attempt.Int64)
	if response.Valid {
		r.Response = json.RawMessage(response.String)
	}
	if lastError.Valid {
		r.LastError = json.RawMessage(lastError.String)
	}
	if recovery.Valid {
		s := recovery.String
		r.RecoveryPoint = &s
	}
	r.FirstSeenAt, r.CompletedAt = timePtr(firstSeen), timePtr(completed)
	r.LockedUntil, r.ExpiresAt = timePtr(lockedUntil), timePtr(expiry)
	return &r, nil
}

// Forget deletes a key on purpose; true if it existed.
func Forget(ctx context.Context, q Querier, scope, key string) (bool, error) {
	var existed bool
	err := queryRow(ctx, q, sqlForget, []interface{}{scope, key}, &existed)
	return existed, err
}

// Request names a key and what it guards. Request (a JSON text) is fingerprinted with
// Exclude; Hash, if set, is used as it is; with neither there is no fingerprint check.
type Request struct {
	Scope   string
	Key     string
	Request []byte
	Exclude []string
	Hash    []byte
	ReserveOptions
}

func (r Request) hash() ([]byte, error) {
	if r.Hash != nil || r.Request == nil {
		return r.Hash, nil
	}
	return Fingerprint(r.Request, r.Exclude...)
}
