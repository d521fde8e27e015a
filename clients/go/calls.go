// The key calls of the extension with typed results and typed errors. Each takes a Querier
// (*sql.DB, *sql.Conn or *sql.Tx): on a *sql.Tx it runs inside the caller's transaction.
// This package never opens connections itself.

package idempotency

import (
	"context"
	"database/sql"
	"encoding/json"
	"math/big"
	"regexp"
	"strings"
	"time"
)

// Reservation is reserve's row.
type Reservation struct {
	Outcome       string          // new, replay, in_progress, mismatch, too_old
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
	lockTTL, retention, wait = "5 minutes", "24 hours", "0"
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

// The statements, one list: every value is a parameter.
const (
	reserveColumns = `SELECT r.outcome::text, r.status_code, r.response::text, r.attempt,
    r.recovery_point, r.first_seen_at, r.locked_until, r.expires_at
  FROM `
	sqlReserve      = reserveColumns + `idempotency.reserve($1, $2, $3::bytea, $4::interval, $5::interval, $6::interval) AS r`
	sqlReserveBegin = reserveColumns + `idempotency.reserve_begin($1, $2, $3::bytea, $4::interval, $5::interval, $6::interval) AS r`
	sqlComplete     = `SELECT idempotency.complete($1, $2, $3::integer, $4::jsonb, $5::integer)`
	sqlFail         = `SELECT idempotency.fail($1, $2, $3::jsonb, $4::integer)`
	sqlCheckpoint   = `SELECT idempotency.checkpoint($1, $2, $3, $4::integer)`
	sqlLookup       = `SELECT state, status_code, response::text, request_hash, attempt, recovery_point,
    last_error::text, first_seen_at, completed_at, locked_until, expires_at
  FROM idempotency.lookup($1, $2)`
	sqlForget      = `SELECT idempotency.forget($1, $2)`
	sqlClaimOnce   = `SELECT idempotency.claim_once($1, $2, $3::interval, $4::interval)`
	sqlAcceptInt   = `SELECT idempotency.accept($1, $2, $3::bigint)`
	sqlAcceptUUID  = `SELECT idempotency.accept($1, $2, $3::uuid)`
	sqlWatermark   = `SELECT idempotency.watermark($1, $2)::text`
	sqlNextKey     = `SELECT idempotency.next_key($1)::text`
	sqlFingerprint = `SELECT idempotency.fingerprint($1::jsonb, $2::text[])`
)

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
	return scanReservation(conn.QueryRowContext(ctx, sqlReserveBegin, args...))
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

// ClaimOnceOptions: claim_once's retention and wait (zero: 24 hours, no wait).
type ClaimOnceOptions struct {
	Retention time.Duration
	Wait      time.Duration
}

// ClaimOnce is idempotency.claim_once in the caller's transaction: true the first time (the
// key is now completed in this transaction: apply the message in it), false for a
// redelivery. An error matching ErrKeyInProgress (IK003: another holder has the key after
// wait) or ErrKeyTooOld (IK004).
func ClaimOnce(ctx context.Context, q Querier, scope, key string, o ClaimOnceOptions) (bool, error) {
	if err := CheckNames(scope, key); err != nil {
		return false, err
	}
	_, retention, wait := ReserveOptions{Retention: o.Retention, Wait: o.Wait}.values()
	var claimed bool
	err := queryRow(ctx, q, sqlClaimOnce, []interface{}{scope, key, retention, wait}, &claimed)
	return claimed, err
}

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$`)

// Position is a stream position for Accept: an int64 offset (PositionInt) or a 128-bit one
// written as a UUID (PositionUUID, say an outbox key).
type Position struct {
	text string
	uuid bool
}

// PositionInt is a bigint position (a Kafka offset).
func PositionInt(offset int64) Position { return Position{text: big.NewInt(offset).String()} }

// PositionUUID is a 128-bit position as a UUID string; ok is false for a text that is not one.
func PositionUUID(u string) (Position, bool) {
	if !uuidRE.MatchString(u) {
		return Position{}, false
	}
	return Position{text: strings.ToLower(u), uuid: true}, true
}

func (p Position) String() string { return p.text }

// value is the position as an unsigned number (a UUID's 128 bits), for comparisons.
func (p Position) value() *big.Int {
	v := new(big.Int)
	if p.uuid {
		v.SetString(strings.ReplaceAll(p.text, "-", ""), 16)
	} else {
		v.SetString(p.text, 10)
	}
	return v
}

func acceptStatement(p Position) string {
	if p.uuid {
		return sqlAcceptUUID
	}
	return sqlAcceptInt
}

// Accept is idempotency.accept: true if position is above the partition's watermark (which
// moves there, in the caller's transaction), false for a duplicate.
func Accept(ctx context.Context, q Querier, consumer, partition string, position Position) (bool, error) {
	var accepted bool
	err := queryRow(ctx, q, acceptStatement(position), []interface{}{consumer, partition, position.text}, &accepted)
	return accepted, err
}

// Watermark is the stored position of a partition as an unsigned number (a 128-bit one for
// UUID positions), or nil.
func Watermark(ctx context.Context, q Querier, consumer, partition string) (*big.Int, error) {
	var w sql.NullString
	if err := queryRow(ctx, q, sqlWatermark, []interface{}{consumer, partition}, &w); err != nil {
		return nil, err
	}
	if !w.Valid {
		return nil, nil
	}
	v, _ := new(big.Int).SetString(w.String, 10)
	return v, nil
}

// NextKey is idempotency.next_key: monotonic across sessions, gaps allowed.
func NextKey(ctx context.Context, q Querier, stream string) (int64, error) {
	var k int64
	err := queryRow(ctx, q, sqlNextKey, []interface{}{stream}, &k)
	return k, err
}
