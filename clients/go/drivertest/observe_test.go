package drivertest

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"testing"

	"github.com/pgidempotency/idempotency/clients/go"
)

// The Observer sees each helper call's outcome and attempt: new, replay, mismatch (422) and
// in_progress (409) with their *OutcomeError; the key only with ObserveKeys.
func TestClaimObserver(t *testing.T) {
	eachClient(t, func(t *testing.T, ctx context.Context, db *sql.DB, c *idempotency.Client) {
		var events []idempotency.ClaimEvent
		c.Observer = idempotency.ClaimObserverFunc(func(_ context.Context, e idempotency.ClaimEvent) {
			events = append(events, e)
		})
		scope, key := "acct_observe", newKey("observe")
		req := idempotency.Request{Scope: scope, Key: key, Request: []byte(`{"item": "lamp"}`)}
		work := func(ctx context.Context, tx idempotency.Querier, r *idempotency.Reservation) (int, json.RawMessage, error) {
			return 201, json.RawMessage(`{"id": 1}`), nil
		}
		_, err := c.RunOnce(ctx, req, work)
		must(t, err)
		_, err = c.RunOnce(ctx, req, work)
		must(t, err)
		other := req
		other.Request = []byte(`{"item": "sofa"}`)
		_, mismatch := c.RunOnce(ctx, other, work)
		held := newKey("held")
		defer holdKey(t, ctx, db, scope, held).Rollback()
		c.ObserveKeys = true
		_, inProgress := c.RunOnceStatement(ctx, idempotency.Request{Scope: scope, Key: held},
			idempotency.OneStatement{SQL: "SELECT 1"})
		want := []struct {
			helper  string
			outcome idempotency.Outcome
			key     string
			err     error
		}{
			{"RunOnce", idempotency.OutcomeNew, "", nil},
			{"RunOnce", idempotency.OutcomeReplay, "", nil},
			{"RunOnce", idempotency.OutcomeMismatch, "", mismatch},
			{"RunOnceStatement", idempotency.OutcomeInProgress, held, inProgress},
		}
		if len(events) != len(want) {
			t.Fatalf("%d events: %+v", len(events), events)
		}
		for i, w := range want {
			e := events[i]
			if e.Helper != w.helper || e.Outcome != w.outcome || e.Scope != scope || e.Key != w.key ||
				e.Err != w.err || e.Duration <= 0 {
				t.Fatalf("event %d: %+v, want %+v", i, e, w)
			}
		}
		if events[0].Attempt != 1 || events[1].Attempt != 1 {
			t.Fatalf("attempts: %+v", events[:2])
		}
		var oe *idempotency.OutcomeError
		if !errors.As(events[2].Err, &oe) || oe.HTTPStatus() != 422 ||
			!errors.As(events[3].Err, &oe) || oe.HTTPStatus() != 409 {
			t.Fatalf("errors: %v, %v", events[2].Err, events[3].Err)
		}
	})
}

// A helper call that fails before the claim's answer (the database gone) is observed with no
// outcome and its error.
func TestClaimObserverError(t *testing.T) {
	db, err := sql.Open("pgx", "host=/nonexistent-socket-dir dbname=none connect_timeout=1")
	must(t, err)
	defer db.Close()
	var events []idempotency.ClaimEvent
	c := idempotency.New(db)
	c.Observer = idempotency.ClaimObserverFunc(func(_ context.Context, e idempotency.ClaimEvent) {
		events = append(events, e)
	})
	_, err = c.RunOnceStatement(context.Background(),
		idempotency.Request{Scope: "s", Key: "k"}, idempotency.OneStatement{SQL: "SELECT 1"})
	if err == nil || len(events) != 1 || events[0].Outcome != "" || events[0].Err != err {
		t.Fatalf("err %v, events %+v", err, events)
	}
}
