package drivertest

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/pgidempotency/idempotency/clients/go"
)

// orderHandler: an orders endpoint on the claim's transaction; ?status= picks the answer's
// status, and a body with "fail" makes it answer 500 after its insert.
func orderHandler(t testing.TB) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		claim := idempotency.ClaimFrom(r.Context())
		body, _ := io.ReadAll(r.Body)
		var id int64
		err := idempotency.TxFrom(r.Context()).QueryRowContext(r.Context(),
			"INSERT INTO orders (scope, key, item) VALUES ($1, $2, $3) RETURNING id", claim.Scope, claim.Key, string(body)).Scan(&id)
		if err != nil {
			w.WriteHeader(500)
			fmt.Fprintf(w, `{"error": %q}`, err.Error())
			return
		}
		if strings.Contains(string(body), "fail") {
			w.WriteHeader(500)
			return
		}
		status := 201
		if s := r.URL.Query().Get("status"); s != "" {
			status, _ = strconv.Atoi(s)
		}
		w.Header().Set("Location", fmt.Sprintf("/orders/%d", id))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"id": %d, "attempt": %d}`, id, claim.Attempt)
	})
}

func scopeFromHeader(r *http.Request) (string, error) {
	if a := r.Header.Get("X-Account"); a != "" {
		return a, nil
	}
	return "", errors.New("no account")
}

func newService(t testing.TB, db *sql.DB, h http.Handler) *httptest.Server {
	mw := idempotency.New(db).Middleware(idempotency.MiddlewareOptions{Scope: scopeFromHeader, Exclude: []string{"sent_at"}})
	srv := httptest.NewServer(mw(h))
	t.Cleanup(srv.Close)
	return srv
}

type answer struct {
	status int
	header http.Header
	body   string
}

func post(t testing.TB, url, key, contentType, body string) answer {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	must(t, err)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	req.Header.Set("X-Account", "acct_mw")
	req.Header.Set("Content-Type", contentType)
	res, err := http.DefaultClient.Do(req)
	must(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	must(t, err)
	return answer{res.StatusCode, res.Header, string(b)}
}

// errorCode is the code of one of the middleware's answers: its problem details' "error".
func errorCode(t testing.TB, a answer) string {
	var body struct{ Error, Type string }
	if err := json.Unmarshal([]byte(a.body), &body); err != nil {
		t.Fatalf("%d %q: %v", a.status, a.body, err)
	}
	if ct := a.header.Get("Content-Type"); ct != "application/problem+json" || body.Type != idempotency.ProblemTypeBase+body.Error {
		t.Errorf("%d %q (%s): not problem details", a.status, a.body, ct)
	}
	return body.Error
}

func TestMiddleware(t *testing.T) {
	eachDriver(t, func(t *testing.T, db *sql.DB) {
		srv := newService(t, db, orderHandler(t))
		key := newKey("mw")
		first := post(t, srv.URL+"/orders", key, "application/json", `{"item": "widget", "sent_at": 1}`)
		if first.status != 201 || first.header.Get("Idempotent-Replayed") != "" || first.header.Get("Location") == "" {
			t.Fatalf("first: %+v", first)
		}
		again := post(t, srv.URL+"/orders", key, "application/json", `{"sent_at": 2,  "item": "widget"}`)
		if again.status != 201 || again.header.Get("Idempotent-Replayed") != "true" ||
			again.header.Get("Content-Type") != "application/json" || again.body != strings.ReplaceAll(first.body, " ", "") {
			t.Fatalf("replay: %+v (first %q)", again, first.body)
		}
		if n := countOrders(t, db, "acct_mw", key); n != 1 {
			t.Fatalf("%d orders", n)
		}
		mismatch := post(t, srv.URL+"/orders", key, "application/json", `{"item": "gadget"}`)
		if mismatch.status != 422 || errorCode(t, mismatch) != "idempotency_key_reused" {
			t.Fatalf("mismatch: %+v", mismatch)
		}
		for _, c := range []struct {
			key, contentType, body string
			status                 int
			code                   string
		}{
			{"", "application/json", `{}`, 400, "idempotency_key_missing"},
			{"has space", "application/json", `{}`, 400, "idempotency_key_malformed"},
			{strings.Repeat("k", 256), "application/json", `{}`, 400, "idempotency_key_malformed"},
			{newKey("bad-json"), "application/json", `{"item": `, 400, "invalid_json"},
			{newKey("deep"), "application/problem+json", strings.Repeat("[", 1001) + strings.Repeat("]", 1001), 400, "invalid_json"},
			{newKey("big"), "text/plain", strings.Repeat("x", 1<<20+1), 413, "body_too_large"},
		} {
			a := post(t, srv.URL+"/orders", c.key, c.contentType, c.body)
			if a.status != c.status || errorCode(t, a) != c.code {
				t.Fatalf("%q: %d %q, want %d %s", c.key, a.status, a.body, c.status, c.code)
			}
		}
		// a body that is not JSON is fingerprinted by its bytes: other bytes are a 422
		text := newKey("text")
		if a := post(t, srv.URL+"/orders", text, "text/plain", "widget x 2"); a.status != 201 {
			t.Fatalf("text: %+v", a)
		}
		if a := post(t, srv.URL+"/orders", text, "text/plain", "widget x  2"); a.status != 422 {
			t.Fatalf("other bytes: %+v", a)
		}
		// a 5xx is sent, not stored, and rolls back with the claim
		failing := newKey("fail")
		if a := post(t, srv.URL+"/orders", failing, "application/json", `{"item": "fail"}`); a.status != 500 {
			t.Fatalf("5xx: %+v", a)
		}
		if n := countOrders(t, db, "acct_mw", failing); n != 0 {
			t.Fatalf("5xx kept %d orders", n)
		}
		if rec, _ := idempotency.Lookup(context.Background(), db, "acct_mw", failing); rec != nil {
			t.Fatalf("5xx kept the key: %+v", rec)
		}
		// a 4xx of the handler is final: stored and replayed
		final := newKey("final")
		if a := post(t, srv.URL+"/orders?status=409", final, "application/json", `{}`); a.status != 409 || a.header.Get("Retry-After") != "" {
			t.Fatalf("4xx: %+v", a)
		}
		if a := post(t, srv.URL+"/orders", final, "application/json", `{}`); a.status != 409 || a.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("4xx replay: %+v", a)
		}
	})
}

// While a request holds the key, another with the same key gets 409 + Retry-After.
func TestMiddlewareInProgress(t *testing.T) {
	eachDriver(t, func(t *testing.T, db *sql.DB) {
		entered := make(chan struct{})
		release := make(chan struct{})
		srv := newService(t, db, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(entered)
			<-release
			w.WriteHeader(201)
		}))
		key := newKey("busy")
		done := make(chan answer)
		go func() { done <- post(t, srv.URL, key, "application/json", `{}`) }()
		<-entered
		busy := post(t, srv.URL, key, "application/json", `{}`)
		close(release)
		if busy.status != 409 || busy.header.Get("Retry-After") == "" || errorCode(t, busy) != "idempotency_key_in_use" {
			t.Fatalf("busy: %+v", busy)
		}
		if first := <-done; first.status != 201 {
			t.Fatalf("holder: %+v", first)
		}
	})
}

// A handler that panics: nothing of it commits, the key is free again.
func TestMiddlewarePanic(t *testing.T) {
	db := open(t, "pgx")
	orders := orderHandler(t)
	srv := newService(t, db, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		claim := idempotency.ClaimFrom(r.Context())
		if r.Header.Get("X-Panic") == "" {
			orders.ServeHTTP(w, r)
			return
		}
		_, err := claim.Tx.ExecContext(r.Context(), "INSERT INTO orders (scope, key) VALUES ($1, $2)", claim.Scope, claim.Key)
		must(t, err)
		panic(http.ErrAbortHandler)
	}))
	key := newKey("panic")
	req, _ := http.NewRequest("POST", srv.URL, strings.NewReader(`{}`))
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("X-Account", "acct_mw")
	req.Header.Set("X-Panic", "1")
	if res, err := http.DefaultClient.Do(req); err == nil {
		res.Body.Close()
		t.Fatalf("answered %d", res.StatusCode)
	}
	// the retry runs afresh (409 only while the panicking request's rollback is under way)
	var retry answer
	waitFor(t, "the key to be free", func() bool {
		retry = post(t, srv.URL, key, "application/json", `{}`)
		return retry.status != 409
	})
	if retry.status != 201 || retry.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("retry: %+v", retry)
	}
	var n int
	must(t, db.QueryRow("SELECT count(*) FROM orders WHERE key = $1 AND item IS NULL", key).Scan(&n))
	if n != 0 || countOrders(t, db, "acct_mw", key) != 1 {
		t.Fatalf("the panicking handler's insert was kept")
	}
}

// The middleware's complete fails (here: the handler completed the key itself with another
// result, IK002): 500, and nothing of the handler commits.
func TestMiddlewareCompleteFails(t *testing.T) {
	eachDriver(t, func(t *testing.T, db *sql.DB) {
		orders := orderHandler(t)
		srv := newService(t, db, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			claim := idempotency.ClaimFrom(r.Context())
			must(t, idempotency.Complete(r.Context(), claim.Tx, claim.Scope, claim.Key, 299, json.RawMessage(`{}`), claim.Attempt))
			orders.ServeHTTP(w, r)
		}))
		key := newKey("conflict")
		a := post(t, srv.URL, key, "application/json", `{}`)
		if a.status != 500 || errorCode(t, a) != "internal_error" {
			t.Fatalf("answer %+v", a)
		}
		if rec, _ := idempotency.Lookup(context.Background(), db, "acct_mw", key); rec != nil || countOrders(t, db, "acct_mw", key) != 0 {
			t.Fatalf("committed: %+v", rec)
		}
		// the connection went back clean: the service goes on
		if a := post(t, srv.URL, newKey("after"), "application/json", `{}`); a.status != 500 {
			t.Fatalf("next: %+v", a)
		}
	})
}
