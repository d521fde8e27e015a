package idempotency

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"time"
)

// ClaimEvent is what one claim of a Client came to, for the ClaimObserver: a call of a
// helper (RunOnce, RunOnceStatement, RunExternal, ConsumeOnce, ApplyOnce) or a request of the
// Middleware once its key was read (Helper "Middleware"). Outcome is the claim's (new,
// replay, in_progress, mismatch, too_old; empty when the call failed before the server
// answered the claim, say a lost connection; ConsumeOnce and ApplyOnce: new when applied,
// replay for a redelivery), Attempt its attempt (none for ConsumeOnce and ApplyOnce), Err the
// error the helper returned (nil for new and replay; an *OutcomeError for in_progress,
// mismatch and too_old, the 409 and 422 of the HTTP answers), Status the HTTP status the
// Middleware answered with (its own 409 or 422 is an answer there, not an Err; 0 for the
// other helpers). RoundTrips is the number of statements or pipelined batches the helper
// itself sent (the server's edition, asked once per Client, included; the work's or the
// handler's own statements not), as Node's span attribute idempotency.round_trips: one
// round trip each with pgx, while lib/pq parses a statement with parameters in an exchange
// of its own first. Key is empty unless Client.ObserveKeys is set: keys may carry customer
// data.
type ClaimEvent struct {
	Helper     string
	Scope      string
	Key        string
	Outcome    Outcome
	Attempt    int
	Duration   time.Duration
	Err        error
	Status     int
	RoundTrips int
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

// roundTripsKey is the context key of the round-trip counter (an *int32) of the helper call
// being observed.
type roundTripsKey struct{}

// countingRoundTrips is ctx with a new round-trip counter, for a helper call that is observed.
func countingRoundTrips(ctx context.Context) context.Context {
	return context.WithValue(ctx, roundTripsKey{}, new(int32))
}

// noteRoundTrip counts one round trip of the helper call observed in ctx; nothing when none is.
func noteRoundTrip(ctx context.Context) {
	if n, ok := ctx.Value(roundTripsKey{}).(*int32); ok {
		atomic.AddInt32(n, 1)
	}
}

// roundTrips is the count of the helper call observed in ctx (0 when none is).
func roundTrips(ctx context.Context) int {
	if n, ok := ctx.Value(roundTripsKey{}).(*int32); ok {
		return int(atomic.LoadInt32(n))
	}
	return 0
}

// detached is context.Background() with ctx's round-trip counter: for the statements a helper
// sends whether or not its caller is still there (storing an answer, releasing a claim).
func detached(ctx context.Context) context.Context {
	if n, ok := ctx.Value(roundTripsKey{}).(*int32); ok {
		return context.WithValue(context.Background(), roundTripsKey{}, n)
	}
	return context.Background()
}

// observe reports the call that began at start and returned (res, err) to c.Observer.
func (c *Client) observe(ctx context.Context, helper string, req Request, start time.Time,
	res *Result, err error) {
	e := ClaimEvent{Helper: helper, Scope: req.Scope, Duration: time.Since(start), Err: err,
		RoundTrips: roundTrips(ctx)}
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

// observeApplied reports a ConsumeOnce or ApplyOnce call (applied: a new key; not: a
// redelivery) to c.Observer.
func (c *Client) observeApplied(ctx context.Context, helper, scope string, key func() string,
	start time.Time, applied bool, err error) {
	e := ClaimEvent{Helper: helper, Scope: scope, Duration: time.Since(start), Err: err,
		RoundTrips: roundTrips(ctx)}
	if c.ObserveKeys {
		e.Key = key()
	}
	var outcome *OutcomeError
	switch {
	case err == nil && applied:
		e.Outcome = OutcomeNew
	case err == nil:
		e.Outcome = OutcomeReplay
	case errors.As(err, &outcome):
		e.Outcome = outcome.Outcome
	case errors.Is(err, ErrKeyInProgress): // claim_once's IK003
		e.Outcome = OutcomeInProgress
	case errors.Is(err, ErrKeyTooOld):
		e.Outcome = OutcomeTooOld
	}
	c.Observer.ObserveClaim(ctx, e)
}

// servedClaim is the Middleware's ResponseWriter while c.Observer is set: it keeps the status
// answered, and the claim's outcome and attempt once the server answered it.
type servedClaim struct {
	http.ResponseWriter
	status  int
	outcome Outcome
	attempt int
}

func (s *servedClaim) WriteHeader(status int) {
	if s.status == 0 {
		s.status = status
	}
	s.ResponseWriter.WriteHeader(status)
}

func (s *servedClaim) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// saw keeps reservation's outcome and attempt (s may be nil: not observed).
func (s *servedClaim) saw(reservation *Reservation) {
	if s != nil {
		s.outcome, s.attempt = reservation.Outcome, reservation.Attempt
	}
}

// observeServed reports a request the Middleware answered to c.Observer.
func (c *Client) observeServed(ctx context.Context, scope, key string, start time.Time, s *servedClaim) {
	e := ClaimEvent{Helper: "Middleware", Scope: scope, Outcome: s.outcome, Attempt: s.attempt,
		Duration: time.Since(start), Status: s.status, RoundTrips: roundTrips(ctx)}
	if c.ObserveKeys {
		e.Key = key
	}
	c.Observer.ObserveClaim(ctx, e)
}
