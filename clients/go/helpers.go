// The transaction helpers: run once (claim, work and answer in one transaction), the
// cross-transaction form for external side effects (lease, attempt fence), and the consumer
// helpers (consume once by message id, apply once by offset).

package idempotency

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
)

// Client holds a *sql.DB (any driver) and what the server refused so far (Features).
type Client struct {
	DB       *sql.DB
	features Features
	edition  editionCache // the server's edition, once asked (versions.go)
}

// New returns a Client over db.
func New(db *sql.DB) *Client { return &Client{DB: db} }

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

// session is one server connection taken from the pool for a claim.
type session struct {
	conn *sql.Conn
	open bool // a transaction is open on it
	bad  bool // discard it (broken, or its state unknown)
}

// release gives the connection back to the pool, or closes it if it is broken or its
// transaction could not be ended (database/sql closes a connection whose Raw returns
// driver.ErrBadConn).
func (s *session) release() {
	if s.bad || s.open {
		_ = s.conn.Raw(func(interface{}) error { return driver.ErrBadConn })
	}
	_ = s.conn.Close()
}

// rollback ends an open transaction; a broken connection gets no statement (the server has
// rolled back on its own).
func (s *session) rollback() {
	if !s.open || s.bad {
		return
	}
	if _, err := s.conn.ExecContext(context.Background(), "ROLLBACK"); err == nil {
		s.open = false
	} else {
		s.bad = true
	}
}

func (s *session) note(err error) error {
	err = translate(err)
	if IsConnectionLost(err) {
		s.bad = true
	}
	return err
}

func (c *Client) session(ctx context.Context) (*session, error) {
	conn, err := c.DB.Conn(ctx)
	if err != nil {
		if t := translate(err); IsConnectionLost(t) || lostCause(err) {
			return nil, t
		}
		return nil, &Error{Code: CodeConnectionLost, Message: "no connection to the server: " + err.Error(), Err: err}
	}
	return &session{conn: conn}, nil
}

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
	if _, err := s.conn.ExecContext(ctx, "BEGIN"); err != nil {
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
	_, ok, err := pipeline(ctx, s.conn, []Statement{
		{SQL: sqlComplete, Args: []*string{&scope, &key, text(strconv.Itoa(status)), responseArg, attemptArg}},
		{SQL: "COMMIT"},
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
	if _, err := s.conn.ExecContext(ctx, "COMMIT"); err != nil {
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
	if err := exec(ctx, tx, "SAVEPOINT idempotency_helper"); err != nil {
		return nil, err
	}
	undo := func() {
		_, _ = tx.ExecContext(context.Background(), "ROLLBACK TO SAVEPOINT idempotency_helper")
		_, _ = tx.ExecContext(context.Background(), "RELEASE SAVEPOINT idempotency_helper")
	}
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
		err = exec(ctx, tx, "RELEASE SAVEPOINT idempotency_helper")
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
	work func(ctx context.Context, a *Attempt) (int, json.RawMessage, error)) (*Result, error) {
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
		_ = Fail(context.Background(), c.DB, req.Scope, req.Key, failWith(err), r.Attempt)
	}
	status, response, err := work(ctx, a)
	if err != nil {
		release(err)
		return nil, err
	}
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

// inTransaction runs first (one statement returning a boolean) then, if it is true or always
// is set, then, in one transaction: committed before it returns; an error rolls everything
// back. With a Pipeliner for the driver, BEGIN and first go in one round trip, and COMMIT's
// answer is checked (a work that returns inside a failed transaction gets ROLLBACK there:
// ErrTransactionAborted); otherwise it is a *sql.Tx on the same connection.
func (c *Client) inTransaction(ctx context.Context, first string, args []string,
	then func(ok bool, tx Querier) error) (bool, error) {
	s, err := c.session(ctx)
	if err != nil {
		return false, err
	}
	defer s.release()
	params := make([]*string, len(args))
	for i := range args {
		params[i] = &args[i]
	}
	results, piped, err := pipeline(ctx, s.conn, []Statement{{SQL: "BEGIN"}, {SQL: first, Args: params}})
	if !piped {
		return inSQLTx(ctx, s, first, args, then)
	}
	s.open = true // BEGIN may have run
	if err != nil {
		err = s.note(err)
		s.rollback()
		return false, err
	}
	ok := len(results) == 2 && len(results[1].Rows) == 1 && string(results[1].Rows[0][0]) == "t"
	defer func() {
		if p := recover(); p != nil {
			s.rollback()
			panic(p)
		}
	}()
	if err := then(ok, s.conn); err != nil {
		s.note(err)
		s.rollback()
		return false, translate(err)
	}
	results, _, err = pipeline(ctx, s.conn, []Statement{{SQL: "COMMIT"}})
	if err != nil {
		s.bad = true // a COMMIT that broke may have committed: a redelivery then gives false
		return false, s.note(err)
	}
	s.open = false
	if len(results) == 1 && results[0].Tag == "ROLLBACK" {
		return false, &Error{Code: CodeTransactionAborted,
			Message: "the work returned inside a failed transaction: nothing of it was committed",
			Hint:    "return the work's database error, or roll back to a savepoint of its own"}
	}
	return ok, nil
}

// inSQLTx is inTransaction with database/sql's own transaction (whose Commit reports a
// failed transaction as an error, with both drivers).
func inSQLTx(ctx context.Context, s *session, first string, args []string,
	then func(ok bool, tx Querier) error) (bool, error) {
	tx, err := s.conn.BeginTx(ctx, nil)
	if err != nil {
		return false, s.note(err)
	}
	values := make([]interface{}, len(args))
	for i, a := range args {
		values[i] = a
	}
	var ok bool
	if err := tx.QueryRowContext(ctx, first, values...).Scan(&ok); err != nil {
		_ = tx.Rollback()
		return false, s.note(err)
	}
	if err := then(ok, tx); err != nil {
		_ = tx.Rollback()
		return false, s.note(err)
	}
	if err := tx.Commit(); err != nil {
		err = s.note(err)
		if !IsConnectionLost(err) {
			return false, &Error{Code: CodeTransactionAborted,
				Message: "the transaction did not commit: " + err.Error(), Err: err}
		}
		return false, err
	}
	return ok, nil
}

// ConsumeOnce runs work in one transaction with ClaimOnce(scope, key): true if it ran, false
// for a redelivery (acknowledge the message without running work). Committed before it
// returns: acknowledge the message after. An error in work rolls the claim back with it, and
// so does a work that returns inside a failed transaction (ErrTransactionAborted).
func (c *Client) ConsumeOnce(ctx context.Context, scope, key string, o ClaimOnceOptions,
	work func(ctx context.Context, tx Querier) error) (bool, error) {
	if err := CheckNames(scope, key); err != nil {
		return false, err
	}
	_, retention, wait := ReserveOptions{Retention: o.Retention, Wait: o.Wait}.values()
	return c.inTransaction(ctx, sqlClaimOnce, []string{scope, key, retention, wait},
		func(claimed bool, tx Querier) error {
			if !claimed {
				return nil
			}
			return work(ctx, tx)
		})
}

// ApplyOnce runs fn in one transaction with Accept(consumer, partition, position): true if it
// ran, false for a position at or below the watermark (a redelivery). An error in fn rolls
// the watermark move back too. strict: a position below the watermark (not equal to it) is a
// *PositionBelowWatermarkError, for partitions that must arrive in order.
func (c *Client) ApplyOnce(ctx context.Context, consumer, partition string, position Position, strict bool,
	fn func(ctx context.Context, tx Querier) error) (bool, error) {
	return c.inTransaction(ctx, acceptStatement(position), []string{consumer, partition, position.text},
		func(accepted bool, tx Querier) error {
			if accepted {
				return fn(ctx, tx)
			}
			if strict {
				mark, err := Watermark(ctx, tx, consumer, partition)
				if err != nil {
					return err
				}
				if mark != nil && position.value().Cmp(mark) < 0 {
					return &PositionBelowWatermarkError{Consumer: consumer, Partition: partition,
						Position: position.text, Watermark: mark.String()}
				}
			}
			return nil
		})
}
