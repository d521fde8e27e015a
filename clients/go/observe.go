package idempotency

import (
	"context"
	"errors"
	"time"
)

// ClaimEvent is what one call of a Client helper (RunOnce, RunOnceStatement, RunExternal)
// came to, for the ClaimObserver: the outcome of its claim (new, replay, in_progress,
// mismatch, too_old; empty when the call failed before the server answered the claim, say a
// lost connection), the attempt, and the error the helper returned (nil for new and replay;
// an *OutcomeError for in_progress, mismatch and too_old, the 409 and 422 of the HTTP
// answers). Key is empty unless Client.ObserveKeys is set: keys may carry customer data.
type ClaimEvent struct {
	Helper   string
	Scope    string
	Key      string
	Outcome  Outcome
	Attempt  int
	Duration time.Duration
	Err      error
}

// ClaimObserver receives a ClaimEvent after each call of a Client helper, on the caller's
// goroutine: keep it quick (count, log, or add to the current trace span). A nil
// Client.Observer costs nothing.
type ClaimObserver interface {
	ObserveClaim(ctx context.Context, e ClaimEvent)
}

// ClaimObserverFunc is a function as a ClaimObserver.
type ClaimObserverFunc func(ctx context.Context, e ClaimEvent)

// ObserveClaim calls f.
func (f ClaimObserverFunc) ObserveClaim(ctx context.Context, e ClaimEvent) { f(ctx, e) }

// observe reports the call that began at start and returned (res, err) to c.Observer.
func (c *Client) observe(ctx context.Context, helper string, req Request, start time.Time,
	res *Result, err error) {
	e := ClaimEvent{Helper: helper, Scope: req.Scope, Duration: time.Since(start), Err: err}
	if c.ObserveKeys {
		e.Key = req.Key
	}
	var outcome *OutcomeError
	switch {
	case err == nil && res != nil && res.Replayed:
		e.Outcome, e.Attempt = OutcomeReplay, res.Attempt
	case err == nil && res != nil:
		e.Outcome, e.Attempt = OutcomeNew, res.Attempt
	case errors.As(err, &outcome):
		e.Outcome = outcome.Outcome
		if outcome.Reservation != nil {
			e.Attempt = outcome.Reservation.Attempt
		}
	}
	c.Observer.ObserveClaim(ctx, e)
}
