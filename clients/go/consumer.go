// The consumer helpers: claim_once, consume once by message id and apply once by offset,
// each in one transaction with the consumer's work.

package idempotency

import (
	"context"
	"time"
)

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

// ConsumeOnce runs work in one transaction with ClaimOnce(scope, key): true if it ran, false
// for a redelivery (acknowledge the message without running work). Committed before it
// returns: acknowledge the message after. An error in work rolls the claim back with it, and
// so does a work that returns inside a failed transaction (ErrTransactionAborted).
func (c *Client) ConsumeOnce(ctx context.Context, scope, key string, o ClaimOnceOptions,
	work func(ctx context.Context, tx Querier) error) (ran bool, err error) {
	if c.Observer != nil {
		ctx = countingRoundTrips(ctx)
		defer func(start time.Time) {
			c.observeApplied(ctx, "ConsumeOnce", scope, func() string { return key }, start, ran, err)
		}(time.Now())
	}
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
//
// Observed as helper ApplyOnce, scope the consumer, key "<partition>@<position>".
func (c *Client) ApplyOnce(ctx context.Context, consumer, partition string, position Position, strict bool,
	fn func(ctx context.Context, tx Querier) error) (ran bool, err error) {
	if c.Observer != nil {
		ctx = countingRoundTrips(ctx)
		defer func(start time.Time) {
			c.observeApplied(ctx, "ApplyOnce", consumer,
				func() string { return partition + "@" + position.text }, start, ran, err)
		}(time.Now())
	}
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
	results, piped, err := s.pipeline(ctx, []Statement{{SQL: sqlBegin}, {SQL: first, Args: params}})
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
	results, _, err = s.pipeline(ctx, []Statement{{SQL: sqlCommit}})
	if err != nil {
		s.bad = true // a COMMIT that broke may have committed: a redelivery then gives false
		return false, s.note(err)
	}
	s.open = false
	if len(results) == 1 && results[0].Tag == tagRollback {
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
	noteRoundTrip(ctx) // BEGIN
	tx, err := s.conn.BeginTx(ctx, nil)
	if err != nil {
		return false, s.note(err)
	}
	values := make([]interface{}, len(args))
	for i, a := range args {
		values[i] = a
	}
	var ok bool
	noteRoundTrip(ctx)
	if err := tx.QueryRowContext(ctx, first, values...).Scan(&ok); err != nil {
		noteRoundTrip(ctx) // ROLLBACK
		_ = tx.Rollback()
		return false, s.note(err)
	}
	if err := then(ok, tx); err != nil {
		noteRoundTrip(ctx) // ROLLBACK
		_ = tx.Rollback()
		return false, s.note(err)
	}
	noteRoundTrip(ctx) // COMMIT
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
