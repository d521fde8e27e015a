// The transaction helpers: run once (claim, work and answer in one transaction, on a
// connection of the pool or inside the caller's transaction) and the cross-transaction form
// for external side effects (lease, attempt fence).

package idempotency

import (
	"context"
	"database/sql"
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
	_, ok, err := pipeline(ctx, s.conn, []Statement{
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
		_, _ = tx.ExecContext(context.Background(), sqlRollbackToSavepoint)
		_, _ = tx.ExecContext(context.Background(), sqlReleaseSavepoint)
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
