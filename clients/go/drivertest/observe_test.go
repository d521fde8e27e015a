package drivertest

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"sync"
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

// ConsumeOnce and ApplyOnce are observed: new when applied, replay for a redelivery,
// in_progress (409) with its error; ApplyOnce's scope is the consumer.
func TestClaimObserverConsumers(t *testing.T) {
	eachClient(t, func(t *testing.T, ctx context.Context, db *sql.DB, c *idempotency.Client) {
		var events []idempotency.ClaimEvent
		c.Observer = idempotency.ClaimObserverFunc(func(_ context.Context, e idempotency.ClaimEvent) {
			events = append(events, e)
		})
		work := func(ctx context.Context, tx idempotency.Querier) error { return nil }
		key, held := newKey("consume"), newKey("consume-held")
		for i := 0; i < 2; i++ {
			_, err := c.ConsumeOnce(ctx, "queue_observe", key, idempotency.ClaimOnceOptions{}, work)
			must(t, err)
		}
		tx := holdKey(t, ctx, db, "queue_observe", held)
		_, inProgress := c.ConsumeOnce(ctx, "queue_observe", held, idempotency.ClaimOnceOptions{}, work)
		must(t, tx.Rollback())
		consumer := newKey("stream_observe")
		c.ObserveKeys = true
		for i := 0; i < 2; i++ {
			_, err := c.ApplyOnce(ctx, consumer, "p0", idempotency.PositionInt(7), false, work)
			must(t, err)
		}
		want := []struct {
			helper, scope, key string
			outcome            idempotency.Outcome
		}{
			{"ConsumeOnce", "queue_observe", "", idempotency.OutcomeNew},
			{"ConsumeOnce", "queue_observe", "", idempotency.OutcomeReplay},
			{"ConsumeOnce", "queue_observe", "", idempotency.OutcomeInProgress},
			{"ApplyOnce", consumer, "p0@7", idempotency.OutcomeNew},
			{"ApplyOnce", consumer, "p0@7", idempotency.OutcomeReplay},
		}
		if len(events) != len(want) {
			t.Fatalf("%d events: %+v", len(events), events)
		}
		for i, w := range want {
			e := events[i]
			if e.Helper != w.helper || e.Scope != w.scope || e.Key != w.key || e.Outcome != w.outcome {
				t.Fatalf("event %d: %+v, want %+v", i, e, w)
			}
		}
		var status interface{ HTTPStatus() int }
		if events[2].Err != inProgress || !errors.As(inProgress, &status) || status.HTTPStatus() != 409 {
			t.Fatalf("in progress: %v", events[2].Err)
		}
	})
}

// Each request of the Middleware, once its key is read, is observed with the status it
// answered: new 201, replay 201, the 422 of a mismatch and the 409 of a key in progress as
// answers (no Err); a request without a key is not a claim.
func TestClaimObserverMiddleware(t *testing.T) {
	eachDriver(t, func(t *testing.T, db *sql.DB) {
		var mu sync.Mutex
		var events []idempotency.ClaimEvent
		c := idempotency.New(db)
		c.Observer = idempotency.ClaimObserverFunc(func(_ context.Context, e idempotency.ClaimEvent) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, e)
		})
		srv := httptest.NewServer(c.Middleware(idempotency.MiddlewareOptions{Scope: scopeFromHeader})(orderHandler(t)))
		defer srv.Close()
		key, held := newKey("mw-observe"), newKey("mw-observe-held")
		statuses := []int{
			post(t, srv.URL, key, "application/json", `{"item": "lamp"}`).status,
			post(t, srv.URL, key, "application/json", `{"item": "lamp"}`).status,
			post(t, srv.URL, key, "application/json", `{"item": "sofa"}`).status,
		}
		tx := holdKey(t, context.Background(), db, "acct_mw", held)
		statuses = append(statuses, post(t, srv.URL, held, "application/json", `{}`).status)
		must(t, tx.Rollback())
		post(t, srv.URL, "", "application/json", `{}`)
		mu.Lock()
		defer mu.Unlock()
		want := []struct {
			outcome idempotency.Outcome
			status  int
		}{
			{idempotency.OutcomeNew, 201}, {idempotency.OutcomeReplay, 201},
			{idempotency.OutcomeMismatch, 422}, {idempotency.OutcomeInProgress, 409},
		}
		if len(events) != len(want) {
			t.Fatalf("%d events: %+v (statuses %v)", len(events), events, statuses)
		}
		for i, w := range want {
			e := events[i]
			if e.Helper != "Middleware" || e.Scope != "acct_mw" || e.Outcome != w.outcome ||
				e.Status != w.status || e.Err != nil || e.Duration <= 0 {
				t.Fatalf("event %d: %+v, want %+v", i, e, w)
			}
		}
		if events[0].Attempt != 1 {
			t.Fatalf("attempt: %+v", events[0])
		}
	})
}

// Each event's RoundTrips is what the helper itself sent, as the driver saw it (each
// statement, BEGIN and COMMIT of a *sql.Tx, or pipelined batch), less the work's or the
// handler's own statement (one each here).
func TestClaimObserverRoundTrips(t *testing.T) {
	eachClient(t, func(t *testing.T, ctx context.Context, db *sql.DB, c *idempotency.Client) {
		if _, err := c.Edition(ctx); err != nil { // asked once per Client: not in the calls below
			t.Fatal(err)
		}
		seen := make(chan idempotency.ClaimEvent, 1)
		c.Observer = idempotency.ClaimObserverFunc(func(_ context.Context, e idempotency.ClaimEvent) {
			seen <- e
		})
		type call struct {
			helper   string
			outcome  idempotency.Outcome
			observed int
			helpers  int // the statements sent less the work's
			sent     []string
		}
		var calls []call
		// observed runs fn and keeps its event's round trips beside the statements sent
		observed := func(workStatements int, fn func()) {
			sent := counting(fn)
			e := <-seen // the middleware's is told after its answer: waited for here
			calls = append(calls, call{e.Helper, e.Outcome, e.RoundTrips, len(sent) - workStatements, sent})
		}
		scope, key, stmtKey, extKey, msg := "acct_trips", newKey("trips"), newKey("trips-stmt"),
			newKey("trips-ext"), newKey("trips-msg")
		runs := 0
		req := idempotency.Request{Scope: scope, Key: key, Request: []byte(`{}`)}
		observed(1, func() { _, err := c.RunOnce(ctx, req, insertOrder(scope, key, &runs)); must(t, err) })
		observed(0, func() { _, err := c.RunOnce(ctx, req, insertOrder(scope, key, &runs)); must(t, err) })
		stmt := idempotency.Request{Scope: scope, Key: stmtKey}
		for i := 0; i < 2; i++ {
			observed(0, func() {
				_, err := c.RunOnceStatement(ctx, stmt, idempotency.OneStatement{SQL: "SELECT 1"})
				must(t, err)
			})
		}
		observed(0, func() {
			_, err := c.RunExternal(ctx, idempotency.Request{Scope: scope, Key: extKey},
				idempotency.ExternalOptions{},
				func(ctx context.Context, a *idempotency.Attempt) (int, json.RawMessage, error) {
					return 200, nil, nil
				})
			must(t, err)
		})
		consume := func(ctx context.Context, tx idempotency.Querier) error {
			_, err := tx.ExecContext(ctx, "SELECT 1")
			return err
		}
		observed(1, func() {
			_, err := c.ConsumeOnce(ctx, "queue_trips", msg, idempotency.ClaimOnceOptions{}, consume)
			must(t, err)
		})
		observed(0, func() {
			_, err := c.ConsumeOnce(ctx, "queue_trips", msg, idempotency.ClaimOnceOptions{}, consume)
			must(t, err)
		})
		srv := httptest.NewServer(c.Middleware(idempotency.MiddlewareOptions{Scope: scopeFromHeader})(orderHandler(t)))
		defer srv.Close()
		mwKey := newKey("trips-mw")
		observed(1, func() { post(t, srv.URL, mwKey, "application/json", `{"item": "lamp"}`) })
		observed(0, func() { post(t, srv.URL, mwKey, "application/json", `{"item": "lamp"}`) })

		want := []struct {
			helper  string
			outcome idempotency.Outcome
		}{
			{"RunOnce", idempotency.OutcomeNew}, {"RunOnce", idempotency.OutcomeReplay},
			{"RunOnceStatement", idempotency.OutcomeNew}, {"RunOnceStatement", idempotency.OutcomeReplay},
			{"RunExternal", idempotency.OutcomeNew},
			{"ConsumeOnce", idempotency.OutcomeNew}, {"ConsumeOnce", idempotency.OutcomeReplay},
			{"Middleware", idempotency.OutcomeNew}, {"Middleware", idempotency.OutcomeReplay},
		}
		if len(calls) != len(want) {
			t.Fatalf("%d calls: %+v", len(calls), calls)
		}
		for i, w := range want {
			got := calls[i]
			if got.helper != w.helper || got.outcome != w.outcome || got.observed != got.helpers ||
				got.observed == 0 {
				t.Fatalf("call %d: %+v, want %+v and round trips as sent", i, got, w)
			}
		}
		// the statement form: one round trip for a new key and for a replay
		if calls[2].observed != 1 || calls[3].observed != 1 || calls[1].observed != 1 {
			t.Fatalf("statement form and replay: %+v", calls[1:4])
		}
	})
}
