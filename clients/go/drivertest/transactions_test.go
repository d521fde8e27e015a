package drivertest

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pgidempotency/idempotency/clients/go"
	"github.com/pgidempotency/idempotency/clients/go/pgxv4"
)

// insertOrder is a work that inserts one order and answers 201 with its id.
func insertOrder(scope, key string, runs *int) idempotency.Work {
	return func(ctx context.Context, tx idempotency.Querier, r *idempotency.Reservation) (int, json.RawMessage, error) {
		*runs++
		var id int64
		if err := tx.QueryRowContext(ctx, "INSERT INTO orders (scope, key, item) VALUES ($1, $2, 'widget') RETURNING id",
			scope, key).Scan(&id); err != nil {
			return 0, nil, err
		}
		b, _ := json.Marshal(map[string]int64{"id": id})
		return 201, b, nil
	}
}

func TestRunOnce(t *testing.T) {
	eachClient(t, func(t *testing.T, ctx context.Context, db *sql.DB, c *idempotency.Client) {
		scope, key := "acct_run", newKey("run")
		runs := 0
		req := idempotency.Request{Scope: scope, Key: key, Request: []byte(`{"item": "widget", "sent": 1}`), Exclude: []string{"sent"}}
		var first *idempotency.Result
		if _, err := c.Edition(ctx); err != nil { // asked once per Client: not counted below
			t.Fatal(err)
		}
		statements := counting(func() {
			var err error
			first, err = c.RunOnce(ctx, req, insertOrder(scope, key, &runs))
			must(t, err)
		})
		// reserve_begin (which opens the transaction), the work's insert, then complete and
		// COMMIT: in one round trip with pgx (idempotency/pgxv4), one by one with lib/pq
		ok := len(statements) >= 3 && strings.Contains(statements[0], "reserve_begin") &&
			strings.HasPrefix(statements[1], "INSERT")
		if strings.HasSuffix(t.Name(), "/pgx") {
			ok = ok && len(statements) == 3 && strings.Contains(statements[2], "idempotency.complete(") &&
				strings.HasSuffix(statements[2], "; COMMIT")
		} else {
			ok = ok && len(statements) == 4 && strings.Contains(statements[2], "idempotency.complete(") &&
				statements[3] == "COMMIT"
		}
		if !ok {
			t.Fatalf("statements: %q", statements)
		}
		req.Request = []byte(`{"sent": 2, "item": "widget"}`)
		var again *idempotency.Result
		statements = counting(func() {
			var err error
			again, err = c.RunOnce(ctx, req, insertOrder(scope, key, &runs))
			must(t, err)
		})
		if len(statements) != 1 { // a replay: reserve_begin alone, nothing to roll back
			t.Fatalf("replay statements: %q", statements)
		}
		if runs != 1 || !again.Replayed || again.StatusCode != 201 || first.Replayed {
			t.Fatalf("runs %d, first %+v, again %+v", runs, first, again)
		}
		var a, b map[string]int64
		must(t, json.Unmarshal(first.Response, &a))
		must(t, json.Unmarshal(again.Response, &b))
		if a["id"] == 0 || a["id"] != b["id"] || countOrders(t, db, scope, key) != 1 {
			t.Fatalf("responses %s / %s", first.Response, again.Response)
		}
		req.Request = []byte(`{"item": "gadget"}`)
		_, err := c.RunOnce(ctx, req, insertOrder(scope, key, &runs))
		var oe *idempotency.OutcomeError
		if !errors.Is(err, idempotency.ErrKeyMismatch) || !errors.As(err, &oe) || oe.HTTPStatus() != 422 {
			t.Fatalf("mismatch: %v", err)
		}
	})
}

func TestRunOnceWorkErrorRollsBack(t *testing.T) {
	eachClient(t, func(t *testing.T, ctx context.Context, db *sql.DB, c *idempotency.Client) {
		scope, key := "acct_run", newKey("rollback")
		boom := errors.New("boom")
		_, err := c.RunOnce(ctx, idempotency.Request{Scope: scope, Key: key},
			func(ctx context.Context, tx idempotency.Querier, r *idempotency.Reservation) (int, json.RawMessage, error) {
				_, err := tx.ExecContext(ctx, "INSERT INTO orders (scope, key) VALUES ($1, $2)", scope, key)
				must(t, err)
				return 0, nil, boom
			})
		if !errors.Is(err, boom) {
			t.Fatalf("got %v", err)
		}
		rec, err := idempotency.Lookup(ctx, db, scope, key)
		must(t, err)
		if rec != nil || countOrders(t, db, scope, key) != 0 {
			t.Fatalf("left behind: %+v", rec)
		}
		// a key held by another transaction: in_progress, 409
		tx, err := db.BeginTx(ctx, nil)
		must(t, err)
		defer tx.Rollback()
		_, err = idempotency.Reserve(ctx, tx, scope, key, nil, idempotency.ReserveOptions{})
		must(t, err)
		runs := 0
		_, err = c.RunOnce(ctx, idempotency.Request{Scope: scope, Key: key}, insertOrder(scope, key, &runs))
		var oe *idempotency.OutcomeError
		if !errors.As(err, &oe) || oe.Outcome != "in_progress" || oe.HTTPStatus() != 409 || oe.RetryAfter(time.Now()) < 1 || runs != 0 {
			t.Fatalf("in progress: %v", err)
		}
	})
}

func TestRunOnceTx(t *testing.T) {
	eachDriver(t, func(t *testing.T, db *sql.DB) {
		ctx := context.Background()
		scope, key := "acct_tx", newKey("tx")
		tx, err := db.BeginTx(ctx, nil)
		must(t, err)
		runs := 0
		_, err = idempotency.RunOnceTx(ctx, tx, idempotency.Request{Scope: scope, Key: key}, insertOrder(scope, key, &runs))
		must(t, err)
		// a failing work rolls back to the savepoint only: the caller's transaction goes on
		_, err = idempotency.RunOnceTx(ctx, tx, idempotency.Request{Scope: scope, Key: key + "-2"},
			func(ctx context.Context, q idempotency.Querier, r *idempotency.Reservation) (int, json.RawMessage, error) {
				_, err := q.ExecContext(ctx, "INSERT INTO orders (scope, key) VALUES (NULL, 'x')")
				return 0, nil, err
			})
		if err == nil {
			t.Fatal("the failing work did not fail")
		}
		r, err := idempotency.RunOnceTx(ctx, tx, idempotency.Request{Scope: scope, Key: key}, insertOrder(scope, key, &runs))
		must(t, err)
		must(t, tx.Commit())
		if runs != 1 || !r.Replayed || countOrders(t, db, scope, key) != 1 {
			t.Fatalf("runs %d %+v", runs, r)
		}
		if rec, _ := idempotency.Lookup(ctx, db, scope, key+"-2"); rec != nil {
			t.Fatalf("failed work's key kept: %+v", rec)
		}
	})
}

func TestRunExternal(t *testing.T) {
	eachClient(t, func(t *testing.T, ctx context.Context, db *sql.DB, c *idempotency.Client) {
		scope, key := "acct_ext", newKey("ext")
		req := idempotency.Request{Scope: scope, Key: key, ReserveOptions: idempotency.ReserveOptions{LockTTL: time.Second}}
		// attempt 1 fails: fail() releases the claim, the next attempt is 2
		_, err := c.RunExternal(ctx, req, idempotency.ExternalOptions{},
			func(ctx context.Context, a *idempotency.Attempt) (int, json.RawMessage, error) {
				must(t, a.Checkpoint(ctx, "called"))
				return 0, nil, errors.New("gateway timeout")
			})
		if err == nil || err.Error() != "gateway timeout" {
			t.Fatalf("got %v", err)
		}
		rec, err := idempotency.Lookup(ctx, db, scope, key)
		must(t, err)
		if rec == nil || !strings.Contains(string(rec.LastError), "gateway timeout") {
			t.Fatalf("after fail: %+v", rec)
		}
		// attempt 2: its lease lapses during the call and attempt 3 takes over and completes;
		// attempt 2's complete is fenced off (IK001) and its finish rolls back
		_, err = c.RunExternal(ctx, req, idempotency.ExternalOptions{
			Finish: func(ctx context.Context, tx *sql.Tx, status int, resp json.RawMessage) (int, json.RawMessage, error) {
				_, err := tx.ExecContext(ctx, "INSERT INTO orders (scope, key, item) VALUES ($1, $2, 'stale')", scope, key)
				return status, resp, err
			}},
			func(ctx context.Context, a *idempotency.Attempt) (int, json.RawMessage, error) {
				if a.Attempt != 2 || a.RecoveryPoint == nil || *a.RecoveryPoint != "called" {
					t.Fatalf("attempt %d, recovery point %v", a.Attempt, a.RecoveryPoint)
				}
				waitFor(t, "the lease to lapse", func() bool {
					var lapsed bool
					must(t, db.QueryRow("SELECT locked_until < clock_timestamp() FROM idempotency.lookup($1, $2)", scope, key).Scan(&lapsed))
					return lapsed
				})
				r, err := c.RunExternal(ctx, req, idempotency.ExternalOptions{},
					func(ctx context.Context, b *idempotency.Attempt) (int, json.RawMessage, error) {
						return 201, json.RawMessage(`{"by": 3}`), nil
					})
				must(t, err)
				if r.Attempt != 3 {
					t.Fatalf("takeover %+v", r)
				}
				return 201, json.RawMessage(`{"by": 2}`), nil
			})
		if !errors.Is(err, idempotency.ErrStaleAttempt) {
			t.Fatalf("stale: %v", err)
		}
		r, err := c.RunExternal(ctx, req, idempotency.ExternalOptions{},
			func(ctx context.Context, a *idempotency.Attempt) (int, json.RawMessage, error) {
				t.Fatal("ran after completion")
				return 0, nil, nil
			})
		must(t, err)
		if !r.Replayed || string(r.Response) != `{"by": 3}` || countOrders(t, db, scope, key) != 0 {
			t.Fatalf("replay %+v %s", r, r.Response)
		}
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestConsumeOnceAndApplyOnce(t *testing.T) {
	eachClient(t, func(t *testing.T, ctx context.Context, db *sql.DB, c *idempotency.Client) {
		key := newKey("message")
		applied := 0
		apply := func(ctx context.Context, tx idempotency.Querier) error {
			applied++
			_, err := tx.ExecContext(ctx, "INSERT INTO orders (scope, key) VALUES ('consumer', $1)", key)
			return err
		}
		boom := errors.New("poison")
		ran, err := c.ConsumeOnce(ctx, "queue", key, idempotency.ClaimOnceOptions{},
			func(ctx context.Context, tx idempotency.Querier) error { _ = apply(ctx, tx); return boom })
		if !errors.Is(err, boom) || ran {
			t.Fatalf("failing work: %v %v", ran, err)
		}
		for i, want := range []bool{true, false} {
			ran, err := c.ConsumeOnce(ctx, "queue", key, idempotency.ClaimOnceOptions{}, apply)
			must(t, err)
			if ran != want {
				t.Fatalf("delivery %d ran %v", i, ran)
			}
		}
		if applied != 2 || countOrders(t, db, "consumer", key) != 1 {
			t.Fatalf("applied %d", applied)
		}

		consumer := newKey("offsets")
		for _, c2 := range []struct {
			pos  int64
			want bool
		}{{10, true}, {10, false}, {11, true}} {
			ran, err := c.ApplyOnce(ctx, consumer, "p", idempotency.PositionInt(c2.pos), false,
				func(ctx context.Context, tx idempotency.Querier) error { return nil })
			must(t, err)
			if ran != c2.want {
				t.Fatalf("offset %d ran %v", c2.pos, ran)
			}
		}
		_, err = c.ApplyOnce(ctx, consumer, "p", idempotency.PositionInt(11), true,
			func(ctx context.Context, tx idempotency.Querier) error { return nil })
		must(t, err) // equal to the watermark: a redelivery, not an error
		_, err = c.ApplyOnce(ctx, consumer, "p", idempotency.PositionInt(3), true,
			func(ctx context.Context, tx idempotency.Querier) error { return nil })
		var below *idempotency.PositionBelowWatermarkError
		if !errors.As(err, &below) || below.Watermark != "11" {
			t.Fatalf("strict: %v", err)
		}
		// an error in fn rolls the watermark back
		_, err = c.ApplyOnce(ctx, consumer, "p", idempotency.PositionInt(12), false,
			func(ctx context.Context, tx idempotency.Querier) error { return boom })
		mark, _ := idempotency.Watermark(ctx, db, consumer, "p")
		if !errors.Is(err, boom) || mark.Int64() != 11 {
			t.Fatalf("rolled back: %v %v", err, mark)
		}
	})
}

// A consumer pays BEGIN + claim_once in one round trip with pgx, and a work that returns
// inside a failed transaction is an error, not a message acknowledged as applied.
func TestConsumeOnceRoundTripsAndAbortedWork(t *testing.T) {
	eachClient(t, func(t *testing.T, ctx context.Context, db *sql.DB, c *idempotency.Client) {
		key := newKey("trips")
		statements := counting(func() {
			_, err := c.ConsumeOnce(ctx, "queue", key, idempotency.ClaimOnceOptions{},
				func(ctx context.Context, tx idempotency.Querier) error {
					_, err := tx.ExecContext(ctx, "INSERT INTO orders (scope, key) VALUES ('trips', $1)", key)
					return err
				})
			must(t, err)
		})
		if strings.HasSuffix(t.Name(), "/pgx") {
			if len(statements) != 3 || !strings.HasPrefix(statements[0], "BEGIN; SELECT idempotency.claim_once(") ||
				statements[2] != "COMMIT" {
				t.Fatalf("statements: %q", statements)
			}
		} else if len(statements) != 4 {
			t.Fatalf("statements: %q", statements)
		}
		aborted := newKey("aborted")
		_, err := c.ConsumeOnce(ctx, "queue", aborted, idempotency.ClaimOnceOptions{},
			func(ctx context.Context, tx idempotency.Querier) error {
				_, _ = tx.ExecContext(ctx, "INSERT INTO orders (scope, key) VALUES (NULL, $1)", aborted) // fails, ignored
				return nil
			})
		if !errors.Is(err, idempotency.ErrTransactionAborted) {
			t.Fatalf("aborted work: %v", err)
		}
		ran, err := c.ConsumeOnce(ctx, "queue", aborted, idempotency.ClaimOnceOptions{},
			func(ctx context.Context, tx idempotency.Querier) error { return nil })
		must(t, err)
		if !ran {
			t.Fatal("the redelivery after an aborted work was not applied")
		}
	})
}

// A Pipeliner given to the Client (WithPipeliner) is the one its calls use, before any
// registered for every client: on pgx it sends complete + COMMIT; on lib/pq it declines.
func TestWithPipeliner(t *testing.T) {
	eachDriver(t, func(t *testing.T, db *sql.DB) {
		ctx := context.Background()
		var asked, handled int
		own := func(ctx context.Context, driverConn interface{}, statements []idempotency.Statement) ([]idempotency.StatementResult, bool, error) {
			asked++
			r, ok, err := pgxv4.Pipeline(ctx, driverConn, statements)
			if ok {
				handled++
			}
			return r, ok, err
		}
		c := idempotency.New(db, idempotency.WithPipeliner(own))
		scope, key := "acct_pipeliner", newKey("pipeliner")
		runs := 0
		req := idempotency.Request{Scope: scope, Key: key, Request: []byte(`{}`)}
		if _, err := c.RunOnce(ctx, req, insertOrder(scope, key, &runs)); err != nil {
			t.Fatal(err)
		}
		if asked == 0 || runs != 1 || countOrders(t, db, scope, key) != 1 {
			t.Fatalf("asked %d, runs %d", asked, runs)
		}
		pgx := strings.HasPrefix(t.Name(), "TestWithPipeliner/pgx")
		if pgx != (handled > 0) {
			t.Fatalf("%s: the client's pipeliner handled %d of %d", t.Name(), handled, asked)
		}
	})
}
