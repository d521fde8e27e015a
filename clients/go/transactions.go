// The transaction helpers: run once (claim, work and answer in one transaction, on a
// connection of the pool or inside the caller's transaction), its one-statement form
// (execute_once: claim, statement and answer in one round trip) and the cross-transaction form
// for external side effects (lease, attempt fence).

package idempotency

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Client holds a *sql.DB (any driver) and what the server refused so far (Features).
// Observer, when set, gets a ClaimEvent after each RunOnce, RunOnceStatement and RunExternal
// (observe.go); ObserveKeys puts the key in it too.
type Client struct {
	DB          *sql.DB
	Observer    ClaimObserver
	ObserveKeys bool
	features    Features
	edition     editionCache // the server's edition, once asked (versions.go)
	pipeliners  []Pipeliner  // WithPipeliner's, tried before the registered ones
}

// Option configures a Client (New).
type Option func(*Client)

// WithPipeliner gives the client p (say pgxv4.Pipeline) to send several statements in one
// round trip, tried before any registered with RegisterPipeliner: an explicit choice, where a
// test or a program wants no process-wide registration.
func WithPipeliner(p Pipeliner) Option {
	return func(c *Client) { c.pipeliners = append(c.pipeliners, p) }
}

// New returns a Client over db.
func New(db *sql.DB, options ...Option) *Client {
	c := &Client{DB: db}
	for _, o := range options {
		o(c)
	}
	return c
}

// Result is the answer of a key: the work's (Replayed false) or the stored one.
type Result struct {
	StatusCode int
	Response   json.RawMessage
	Replayed   bool
	Attempt    int
}

// Work is the work guarded by a key: it runs in the claim's transaction (tx) and returns the
// answer to store. An error rolls the claim back with the work.
type Work func(ctx context.Context, tx Querier, r *Reservation) (statusCode int, response json.RawMessage, err error)

// claim reserves the key on s with reserve_begin (one statement, which opens the
// transaction when the key is new), or, on a server that refuses it, BEGIN then reserve.
func (c *Client) claim(ctx context.Context, s *session, scope, key string, hash []byte, o ReserveOptions) (*Reservation, error) {
	if atomic.LoadInt32(&c.features.noReserveBegin) == 0 && c.offers(ctx, s.conn, "reserve_begin") {
		r, err := ReserveBegin(ctx, s.conn, scope, key, hash, o)
		if err == nil {
			s.open = r.Outcome == OutcomeNew
			return r, nil
		}
		if !reserveBeginRefused(err) {
			return nil, s.note(err)
		}
		atomic.StoreInt32(&c.features.noReserveBegin, 1)
	}
	noteRoundTrip(ctx)
	if _, err := s.conn.ExecContext(ctx, sqlBegin); err != nil {
		return nil, s.note(err)
	}
	s.open = true
	r, err := Reserve(ctx, s.conn, scope, key, hash, o)
	if err != nil {
		s.rollback()
		return nil, s.note(err)
	}
	return r, nil
}

// finish stores the answer and commits: complete, then COMMIT. On an error the transaction is
// rolled back (nothing of the work commits).
// With a Pipeliner for the driver, complete and COMMIT go in one round trip (the server skips
// the COMMIT after a failed complete).
func (s *session) finish(ctx context.Context, scope, key string, status int, response json.RawMessage, attempt int) error {
	var responseArg, attemptArg *string
	if response != nil {
		responseArg = text(string(response))
	}
	if attempt > 0 {
		attemptArg = text(strconv.Itoa(attempt))
	}
	_, ok, err := s.pipeline(ctx, []Statement{
		{SQL: sqlComplete, Args: []*string{&scope, &key, text(strconv.Itoa(status)), responseArg, attemptArg}},
		{SQL: sqlCommit},
	})
	if ok {
		if err != nil {
			// complete failed (the COMMIT was skipped), or the connection broke: then the
			// COMMIT may have happened, and a retry with the same key tells (replay)
			err = s.note(err)
			s.rollback()
			return err
		}
		s.open = false
		return nil
	}
	if err := Complete(ctx, s.conn, scope, key, status, response, attempt); err != nil {
		err = s.note(err)
		s.rollback()
		return err
	}
	noteRoundTrip(ctx)
	if _, err := s.conn.ExecContext(ctx, sqlCommit); err != nil {
		// a COMMIT that broke may have committed: a retry with the same key tells (replay)
		s.bad = true
		return s.note(err)
	}
	s.open = false
	return nil
}

// RunOnce is the one-transaction helper: it claims the key, runs work in the claim's
// transaction and stores its answer with it, all committed together. A replay returns the
// stored answer without running work; in_progress, mismatch and too_old are *OutcomeError.
// Statements: reserve_begin, the work's, complete, COMMIT (a replay: reserve_begin alone).
func (c *Client) RunOnce(ctx context.Context, req Request, work Work) (res *Result, err error) {
	if c.Observer != nil {
		ctx = countingRoundTrips(ctx)
		defer func(start time.Time) { c.observe(ctx, "RunOnce", req, start, res, err) }(time.Now())
	}
	hash, err := req.hash()
	if err != nil {
		return nil, err
	}
	if err := CheckNames(req.Scope, req.Key); err != nil {
		return nil, err
	}
	s, err := c.session(ctx)
	if err != nil {
		return nil, err
	}
	defer s.release()
	defer func() {
		if p := recover(); p != nil {
			s.rollback()
			panic(p)
		}
	}()
	r, err := c.claim(ctx, s, req.Scope, req.Key, hash, req.ReserveOptions)
	if err != nil {
		return nil, err
	}
	if r.Outcome != OutcomeNew {
		s.rollback() // BEGIN + reserve opened one; reserve_begin did not
		if r.Outcome == OutcomeReplay {
			return &Result{StatusCode: r.StatusCode, Response: r.Response, Replayed: true, Attempt: r.Attempt}, nil
		}
		return nil, outcomeError(req.Scope, req.Key, r)
	}
	status, response, err := work(ctx, s.conn, r)
	if err != nil {
		s.note(err)
		s.rollback()
		return nil, translate(err)
	}
	if err := s.finish(ctx, req.Scope, req.Key, status, response, r.Attempt); err != nil {
		return nil, err
	}
	return &Result{StatusCode: status, Response: response, Attempt: r.Attempt}, nil
}

// RunOnceTx is RunOnce inside the caller's transaction (tx: a *sql.Tx, or a connection with
// a transaction open), in a savepoint: the work's error rolls back to it, and the claim and
// the answer commit with the caller's transaction.
func RunOnceTx(ctx context.Context, tx Querier, req Request, work Work) (*Result, error) {
	hash, err := req.hash()
	if err != nil {
		return nil, err
	}
	args, err := reserveArgs(req.Scope, req.Key, hash, req.ReserveOptions)
	if err != nil {
		return nil, err
	}
	if err := exec(ctx, tx, sqlSavepoint); err != nil {
		return nil, err
	}
	undo := func() {
		_ = exec(detached(ctx), tx, sqlRollbackToSavepoint)
		_ = exec(detached(ctx), tx, sqlReleaseSavepoint)
	}
	noteRoundTrip(ctx)
	r, err := scanReservation(tx.QueryRowContext(ctx, sqlReserve, args...))
	if err != nil {
		undo()
		return nil, err
	}
	if r.Outcome != OutcomeNew {
		undo()
		if r.Outcome == OutcomeReplay {
			return &Result{StatusCode: r.StatusCode, Response: r.Response, Replayed: true, Attempt: r.Attempt}, nil
		}
		return nil, outcomeError(req.Scope, req.Key, r)
	}
	status, response, err := work(ctx, tx, r)
	if err == nil {
		err = Complete(ctx, tx, req.Scope, req.Key, status, response, r.Attempt)
	}
	if err == nil {
		err = exec(ctx, tx, sqlReleaseSavepoint)
	}
	if err != nil {
		undo()
		return nil, translate(err)
	}
	return &Result{StatusCode: status, Response: response, Attempt: r.Attempt}, nil
}

// Attempt is one holder's attempt at an external side effect (RunExternal).
type Attempt struct {
	Attempt       int     // the fencing token
	RecoveryPoint *string // the last checkpoint of an attempt that was taken over
	Reservation   *Reservation
	checkpoint    func(ctx context.Context, point string) error
}

// Checkpoint records progress in its own transaction (ErrStaleAttempt if another holder took
// over).
func (a *Attempt) Checkpoint(ctx context.Context, point string) error {
	if err := a.checkpoint(ctx, point); err != nil {
		return err
	}
	a.RecoveryPoint = &point
	return nil
}

// ExternalOptions: Finish runs the business writes in the second transaction, with the
// work's answer, and may return the answer to store instead; FailWith is what fail() keeps
// of an error (default {"error": "...", "message": "..."}).
type ExternalOptions struct {
	Finish   func(ctx context.Context, tx *sql.Tx, status int, response json.RawMessage) (int, json.RawMessage, error)
	FailWith func(err error) json.RawMessage
}

// RunExternal is the cross-transaction helper, for an external side effect: it commits the
// claim (one statement, a lease of LockTTL), runs work with no transaction open, then in a
// second transaction runs Finish (if given) and complete with the attempt fence:
// ErrStaleAttempt if the lease lapsed and another holder took over (Finish's writes roll back
// with it). If work or the second transaction fails, the claim is released with fail (the
// next reserve gets attempt + 1) and the error returned.
func (c *Client) RunExternal(ctx context.Context, req Request, o ExternalOptions,
	work func(ctx context.Context, a *Attempt) (int, json.RawMessage, error)) (res *Result, err error) {
	if c.Observer != nil {
		ctx = countingRoundTrips(ctx)
		defer func(start time.Time) { c.observe(ctx, "RunExternal", req, start, res, err) }(time.Now())
	}
	hash, err := req.hash()
	if err != nil {
		return nil, err
	}
	r, err := Reserve(ctx, c.DB, req.Scope, req.Key, hash, req.ReserveOptions)
	if err != nil {
		return nil, err
	}
	if r.Outcome == OutcomeReplay {
		return &Result{StatusCode: r.StatusCode, Response: r.Response, Replayed: true, Attempt: r.Attempt}, nil
	}
	if err := outcomeError(req.Scope, req.Key, r); err != nil {
		return nil, err
	}
	a := &Attempt{Attempt: r.Attempt, RecoveryPoint: r.RecoveryPoint, Reservation: r,
		checkpoint: func(ctx context.Context, point string) error {
			return Checkpoint(ctx, c.DB, req.Scope, req.Key, point, r.Attempt)
		}}
	failWith := o.FailWith
	if failWith == nil {
		failWith = func(err error) json.RawMessage {
			msg := err.Error()
			if len(msg) > 1000 {
				msg = msg[:1000]
			}
			b, _ := json.Marshal(map[string]string{"error": fmt.Sprintf("%T", err), "message": msg})
			return b
		}
	}
	release := func(err error) {
		if IsConnectionLost(err) {
			return // the lease lapses on its own
		}
		// taken over or completed already, or the database is gone: the lease lapses
		_ = Fail(detached(ctx), c.DB, req.Scope, req.Key, failWith(err), r.Attempt)
	}
	status, response, err := work(ctx, a)
	if err != nil {
		release(err)
		return nil, err
	}
	noteRoundTrip(ctx) // BEGIN
	tx, err := c.DB.BeginTx(ctx, nil)
	if err != nil {
		err = translate(err)
		release(err)
		return nil, err
	}
	if o.Finish != nil {
		status, response, err = o.Finish(ctx, tx, status, response)
	}
	if err == nil {
		err = Complete(ctx, tx, req.Scope, req.Key, status, response, r.Attempt)
	}
	noteRoundTrip(ctx) // COMMIT or ROLLBACK
	if err == nil {
		err = translate(tx.Commit())
	} else {
		_ = tx.Rollback()
	}
	if err != nil {
		err = translate(err)
		if !errors.Is(err, ErrStaleAttempt) {
			release(err)
		}
		return nil, err
	}
	return &Result{StatusCode: status, Response: response, Attempt: r.Attempt}, nil
}

// ExecuteOptions are execute_once's status_code (0: 201) and reserve's lock_ttl, retention
// and wait.
type ExecuteOptions struct {
	StatusCode int
	ReserveOptions
}

// ExecuteOnce is idempotency.execute_once: the claim, one statement and its answer in one
// statement (one round trip; under autocommit, claim, work and answer commit together). On a
// new key the server runs statement with params bound to $1, $2, ... (each converted to text
// by StatementParams, typed by the statement as a parameter sent without a type), stores its
// one row as the response (a single json / jsonb column as it is, other rows as a JSON object,
// no row NULL; several rows are 21000) with o.StatusCode, and completes the key: the result is
// the outcome new with that status and response. Other outcomes run nothing and are reserve's.
// Any error of the statement rolls the claim back with it: the key stays new. On a *sql.Tx it
// runs in the caller's transaction (an error aborts that transaction, as any statement's).
// A server without execute_once (before 0.3.0, or the managed edition) is ErrUndefinedFunction
// with a message naming it.
func ExecuteOnce(ctx context.Context, q Querier, scope, key string, requestHash []byte, statement string,
	params []interface{}, o ExecuteOptions) (*Reservation, error) {
	if err := CheckNames(scope, key); err != nil {
		return nil, err
	}
	values, err := StatementParams(params)
	if err != nil {
		return nil, err
	}
	status := o.StatusCode
	if status == 0 {
		status = 201
	}
	lockTTL, retention, wait := o.values()
	noteRoundTrip(ctx)
	r, err := scanReservation(q.QueryRowContext(ctx, sqlExecuteOnce, scope, key, nullableBytes(requestHash),
		statement, textArray(values), status, lockTTL, retention, wait))
	if err != nil {
		return nil, executeOnceMissing(err)
	}
	return r, nil
}

// executeOnceMissing: the server's 42883 for execute_once itself (not for a function the
// statement calls) as an error that says which function is missing and what to use instead.
func executeOnceMissing(err error) error {
	if sqlState(err) != CodeUndefinedFunction || !strings.Contains(err.Error(), "idempotency.execute_once(") {
		return err
	}
	return &Error{Code: CodeUndefinedFunction, Err: err,
		Message: "the server has no idempotency.execute_once (the one-statement form): it needs the " +
			"extension 0.3.0 or later, and the managed edition does not offer it",
		Hint: "update the extension (ALTER EXTENSION idempotency UPDATE), or use RunOnce (reserve, the work, complete)"}
}

// textArray is a text[] parameter written as the text of an array value (each element quoted,
// NULL for nil): bound as one parameter and read by the server's array input, so every
// database/sql driver sends it as it is.
type textArray []*string

func (a textArray) Value() (driver.Value, error) {
	var b strings.Builder
	b.WriteByte('{')
	for i, v := range a {
		if i > 0 {
			b.WriteByte(',')
		}
		if v == nil {
			b.WriteString("NULL")
			continue
		}
		b.WriteByte('"')
		for _, c := range []byte(*v) {
			if c == '"' || c == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(c)
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String(), nil
}

var (
	timeType        = reflect.TypeOf(time.Time{})
	durationType    = reflect.TypeOf(time.Duration(0))
	rawMessageType  = reflect.TypeOf(json.RawMessage(nil))
	valuerInterface = reflect.TypeOf((*driver.Valuer)(nil)).Elem()
)

// StatementParams converts the values of a statement's $1, $2, ... to the texts execute_once
// binds (the server converts each to the type the statement gives it): nil (and a nil
// pointer) is NULL; strings as they are; bools true / false; integers and floats in decimal
// (NaN, Infinity, -Infinity); time.Time in RFC 3339 with nanoseconds; time.Duration as an
// interval; a [16]byte (a UUID type) as a UUID; json.RawMessage as its text; []byte as bytea's
// hex form; a driver.Valuer (sql.NullString, ...) as its Value; maps, slices, arrays and
// structs as JSON. Any other value is an error.
func StatementParams(params []interface{}) ([]*string, error) {
	out := make([]*string, len(params))
	for i, p := range params {
		t, err := paramText(p, 0)
		if err != nil {
			return nil, fmt.Errorf("idempotency: parameter $%d: %w", i+1, err)
		}
		out[i] = t
	}
	return out, nil
}

func paramText(p interface{}, depth int) (*string, error) {
	if p == nil {
		return nil, nil
	}
	v := reflect.ValueOf(p)
	for v.Kind() == reflect.Ptr || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return nil, nil
		}
		if v.Type().Implements(valuerInterface) {
			break
		}
		v = v.Elem()
	}
	t := v.Type()
	switch {
	case t.Implements(valuerInterface) && depth < 4:
		dv, err := v.Interface().(driver.Valuer).Value()
		if err != nil {
			return nil, err
		}
		return paramText(dv, depth+1)
	case t == timeType:
		return text(v.Interface().(time.Time).Format(time.RFC3339Nano)), nil
	case t == durationType:
		return text(interval(time.Duration(v.Int()))), nil
	case t == rawMessageType:
		if v.IsNil() {
			return nil, nil
		}
		return text(string(v.Bytes())), nil
	case t.Kind() == reflect.Array && t.Len() == 16 && t.Elem().Kind() == reflect.Uint8:
		var u [16]byte
		reflect.Copy(reflect.ValueOf(u[:]), v)
		return text(fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])), nil
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8:
		if v.IsNil() {
			return nil, nil
		}
		return text(`\x` + hex.EncodeToString(v.Bytes())), nil
	}
	switch v.Kind() {
	case reflect.String:
		return text(v.String()), nil
	case reflect.Bool:
		return text(strconv.FormatBool(v.Bool())), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return text(strconv.FormatInt(v.Int(), 10)), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return text(strconv.FormatUint(v.Uint(), 10)), nil
	case reflect.Float32, reflect.Float64:
		f := v.Float()
		switch {
		case math.IsInf(f, 1):
			return text("Infinity"), nil
		case math.IsInf(f, -1):
			return text("-Infinity"), nil
		}
		return text(strconv.FormatFloat(f, 'g', -1, t.Bits())), nil
	case reflect.Map, reflect.Slice, reflect.Array, reflect.Struct:
		b, err := json.Marshal(v.Interface())
		if err != nil {
			return nil, err
		}
		return text(string(b)), nil
	}
	return nil, fmt.Errorf("a %T cannot be sent as a statement's parameter", p)
}

// OneStatement is the work of RunOnceStatement: one SELECT, INSERT, UPDATE, DELETE or MERGE
// with its parameters ($1, $2, ...; converted as StatementParams says), and the status stored
// with its response (0: 201).
type OneStatement struct {
	SQL        string
	Params     []interface{}
	StatusCode int
}

// RunOnceStatement is RunOnce for work that is one statement, in one round trip: execute_once
// on the pool in autocommit, where the claim, the statement and its answer commit together.
// A new key runs the statement and returns its response (its one row as JSON, see
// ExecuteOnce) with st.StatusCode; a replay returns the stored answer and runs nothing;
// in_progress, mismatch and too_old are *OutcomeError. An error of the statement leaves the
// key new.
func (c *Client) RunOnceStatement(ctx context.Context, req Request, st OneStatement) (res *Result, err error) {
	if c.Observer != nil {
		ctx = countingRoundTrips(ctx)
		defer func(start time.Time) { c.observe(ctx, "RunOnceStatement", req, start, res, err) }(time.Now())
	}
	return runOnceStatement(ctx, c.DB, req, st)
}

// RunOnceStatementTx is RunOnceStatement in the caller's transaction (tx: a *sql.Tx, or a
// connection with a transaction open): the claim and the statement's writes commit with it,
// and an error of the statement aborts it.
func RunOnceStatementTx(ctx context.Context, tx Querier, req Request, st OneStatement) (*Result, error) {
	return runOnceStatement(ctx, tx, req, st)
}

func runOnceStatement(ctx context.Context, q Querier, req Request, st OneStatement) (*Result, error) {
	hash, err := req.hash()
	if err != nil {
		return nil, err
	}
	r, err := ExecuteOnce(ctx, q, req.Scope, req.Key, hash, st.SQL, st.Params,
		ExecuteOptions{StatusCode: st.StatusCode, ReserveOptions: req.ReserveOptions})
	if err != nil {
		return nil, err
	}
	switch r.Outcome {
	case OutcomeNew:
		return &Result{StatusCode: r.StatusCode, Response: r.Response, Attempt: r.Attempt}, nil
	case OutcomeReplay:
		return &Result{StatusCode: r.StatusCode, Response: r.Response, Replayed: true, Attempt: r.Attempt}, nil
	}
	return nil, outcomeError(req.Scope, req.Key, r)
}
