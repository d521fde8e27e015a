package drivertest

import (
	"bytes"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pgidempotency/idempotency/clients/go"
)

// The middleware's answers and what it stores, against test/vectors/http_answers.json, which
// the Node, Python and Java middlewares' tests check too: the same bodies, word for word.

type vectorAnswer struct {
	Status  int               `json:"status"`
	Headers map[string]string `json:"headers"`
	Body    json.RawMessage   `json:"body"`
}

type vectorMessage struct {
	Status     int               `json:"status"`
	Headers    map[string]string `json:"headers"`
	Body       *string           `json:"body"`
	BodyBase64 *string           `json:"body_base64"`
}

func (m vectorMessage) bytes(t testing.TB) []byte {
	if m.BodyBase64 != nil {
		b, err := base64.StdEncoding.DecodeString(*m.BodyBase64)
		must(t, err)
		return b
	}
	return []byte(*m.Body)
}

type vectors struct {
	Problems map[string]vectorAnswer `json:"problems"`
	Titles   map[string]string       `json:"titles"`
	Answers  map[string]vectorAnswer `json:"answers"`
	Stored   []struct {
		Answer vectorMessage   `json:"answer"`
		Stored json.RawMessage `json:"stored"`
		Replay vectorMessage   `json:"replay"`
	} `json:"stored"`
	Legacy struct {
		Stored json.RawMessage `json:"stored"`
		Replay vectorMessage   `json:"replay"`
	} `json:"legacy"`
}

func readVectors(t testing.TB) vectors {
	text, err := os.ReadFile("../../../test/vectors/http_answers.json")
	must(t, err)
	var v vectors
	must(t, json.Unmarshal(text, &v))
	if len(v.Answers) == 0 || len(v.Problems) != len(v.Answers) || len(v.Stored) == 0 {
		t.Fatal("http_answers.json has no answers")
	}
	return v
}

func sameJSON(t testing.TB, what string, got, want []byte) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: %s is not JSON: %v", what, got, err)
	}
	must(t, json.Unmarshal(want, &w))
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s: got %s, want %s", what, got, want)
	}
}

// expectAnswer: the answer name of the vectors, as problem details or (legacy) the old body,
// with the Link header of documentation ("": none).
func expectAnswer(t testing.TB, v vectors, legacy bool, documentation, name string, status int, header http.Header, body []byte) {
	t.Helper()
	want, ok := v.Problems[name]
	if legacy {
		want, ok = v.Answers[name]
		if ct := header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: Content-Type %q", name, ct)
		}
	}
	link := ""
	if documentation != "" {
		link = "<" + documentation + `>; rel="describedby"`
	}
	if got := header.Get("Link"); got != link {
		t.Errorf("%s: Link %q, want %q", name, got, link)
	}
	if !ok {
		t.Fatalf("no answer %q in the vectors", name)
	}
	if status != want.Status {
		t.Errorf("%s: status %d, want %d", name, status, want.Status)
	}
	sameJSON(t, name, body, want.Body)
	for k, val := range want.Headers {
		if got := header.Get(k); got != val {
			t.Errorf("%s: %s is %q, want %q", name, k, got, val)
		}
	}
}

func TestAnswersBeforeTheClaim(t *testing.T) {
	t.Run("problem details", func(t *testing.T) { testAnswersBeforeTheClaim(t, idempotency.AnswerOptions{}) })
	t.Run("problem details and documentation", func(t *testing.T) {
		testAnswersBeforeTheClaim(t, idempotency.AnswerOptions{Documentation: "https://api.example.com/docs/idempotency"})
	})
	t.Run("legacy", func(t *testing.T) { testAnswersBeforeTheClaim(t, idempotency.AnswerOptions{Legacy: true}) })
}

func testAnswersBeforeTheClaim(t *testing.T, answers idempotency.AnswerOptions) {
	v := readVectors(t)
	// a database that cannot be reached: the claim's connection is refused
	db, err := sql.Open("pgx", "host=127.0.0.1 port=1 dbname=none sslmode=disable connect_timeout=5")
	must(t, err)
	t.Cleanup(func() { db.Close() })
	mw := idempotency.New(db).Middleware(idempotency.MiddlewareOptions{
		Scope: func(r *http.Request) (string, error) {
			switch a := r.Header.Get("X-Account"); a {
			case "none":
				return "", fmt.Errorf("no X-Account: %w", idempotency.ErrScopeMissing)
			case "empty":
				return "", nil
			default:
				return a, nil
			}
		},
		Limit:   64,
		Answers: answers,
	})
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("the handler ran")
	})))
	t.Cleanup(srv.Close)
	send := func(name string, headers map[string]string, body string) {
		t.Helper()
		req, err := http.NewRequest("POST", srv.URL, strings.NewReader(body))
		must(t, err)
		req.Header.Set("Content-Type", "application/json")
		for k, val := range headers {
			req.Header.Set(k, val)
		}
		res, err := http.DefaultClient.Do(req)
		must(t, err)
		defer res.Body.Close()
		var b bytes.Buffer
		_, err = b.ReadFrom(res.Body)
		must(t, err)
		expectAnswer(t, v, answers.Legacy, answers.Documentation, name, res.StatusCode, res.Header, b.Bytes())
	}
	item := `{"item": "widget"}`
	send("idempotency_key_missing", map[string]string{"X-Account": "acct_1"}, item)
	key := map[string]string{"Idempotency-Key": "k-1", "X-Account": "acct_1"}
	with := func(k, val string) map[string]string {
		m := map[string]string{k: val}
		for a, b := range key {
			if a != k {
				m[a] = b
			}
		}
		return m
	}
	send("idempotency_key_malformed", with("Idempotency-Key", "has space"), item)
	send("idempotency_scope_missing", with("X-Account", "none"), item)
	send("idempotency_scope_empty", with("X-Account", "empty"), item)
	send("idempotency_scope_too_long", with("X-Account", strings.Repeat("a", 256)), item)
	send("invalid_json", key, `{"item": `)
	send("body_too_large", key, `{"item": "`+strings.Repeat("x", 100)+`"}`)
	send("database_unavailable", key, item)
}

func TestAnswersOfTheOutcomes(t *testing.T) {
	v := readVectors(t)
	now := time.Now()
	expect := func(name string, err error) {
		t.Helper()
		a := idempotency.AnswerFor(err, now)
		if a == nil {
			t.Fatalf("%s: no answer", name)
		}
		rec := httptest.NewRecorder()
		idempotency.WriteAnswer(rec, a)
		expectAnswer(t, v, false, "", name, rec.Code, rec.Header(), rec.Body.Bytes())
		rec = httptest.NewRecorder()
		a.Write(rec, idempotency.AnswerOptions{Legacy: true})
		expectAnswer(t, v, true, "", name, rec.Code, rec.Header(), rec.Body.Bytes())
	}
	holder := &idempotency.Reservation{} // inside its transaction: no lease
	expect("idempotency_key_in_use", &idempotency.OutcomeError{Outcome: idempotency.OutcomeInProgress, Scope: "s", Key: "k", Reservation: holder})
	expect("idempotency_key_reused", &idempotency.OutcomeError{Outcome: idempotency.OutcomeMismatch, Scope: "s", Key: "k", Reservation: holder})
	expect("idempotency_key_too_old", &idempotency.OutcomeError{Outcome: idempotency.OutcomeTooOld, Scope: "s", Key: "k", Reservation: holder})
	_, err := idempotency.ParseIdempotencyKey("")
	expect("idempotency_key_missing", err)
	expect("idempotency_scope_missing", idempotency.ErrScopeMissing)
	if !errors.Is(idempotency.ErrScopeMissing, idempotency.ErrScopeMissing) {
		t.Fatal("ErrScopeMissing")
	}
}

// Every code the middleware answers has the title of the vectors.
func TestProblemTitles(t *testing.T) {
	v := readVectors(t)
	if !reflect.DeepEqual(idempotency.ProblemTitles, v.Titles) {
		t.Errorf("titles %v, want %v", idempotency.ProblemTitles, v.Titles)
	}
}

func TestStoredAnswers(t *testing.T) {
	v := readVectors(t)
	for i, c := range v.Stored {
		header := http.Header{}
		for k, val := range c.Answer.Headers {
			header.Set(k, val)
		}
		stored := idempotency.StoredAnswer(c.Answer.bytes(t), header, []string{"ETag"})
		sameJSON(t, "stored "+string(c.Stored), stored, c.Stored)
		r := idempotency.ReplayOf(c.Stored)
		if !reflect.DeepEqual(r.Headers, c.Replay.Headers) {
			t.Errorf("case %d: replay headers %v, want %v", i, r.Headers, c.Replay.Headers)
		}
		if want := c.Replay.bytes(t); !bytes.Equal(r.Body, want) {
			t.Errorf("case %d: replay body %q, want %q", i, r.Body, want)
		}
	}
	// strings with the escapes JSON.stringify writes, and no others
	escaped := idempotency.ReplayOf(json.RawMessage(`{"idempotency_http": 1, "headers": {}, "body": {"s": "a\u00e9\n\u001F\"<\/"}}`))
	if want := `{"s":"aé\n\u001f\"</"}`; string(escaped.Body) != want {
		t.Errorf("escapes: %s, want %s", escaped.Body, want)
	}
	r := idempotency.ReplayOf(v.Legacy.Stored)
	if !reflect.DeepEqual(r.Headers, v.Legacy.Replay.Headers) || string(r.Body) != *v.Legacy.Replay.Body {
		t.Errorf("legacy: %v %q", r.Headers, r.Body)
	}
}

// An answer stored by SQL in the stored form (as any client's middleware writes it) replays
// through this middleware with the vectors' status, headers and body.
func TestReplayOfStoredRows(t *testing.T) {
	v := readVectors(t)
	db := open(t, "pgx")
	srv := newService(t, db, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("the handler ran on a replay")
	}))
	request := `{"item": "widget"}`
	hash, err := idempotency.Fingerprint([]byte(request))
	must(t, err)
	type storedRow struct {
		stored json.RawMessage
		replay vectorMessage
	}
	rows := []storedRow{{v.Legacy.Stored, v.Legacy.Replay}}
	for _, c := range v.Stored {
		rows = append(rows, storedRow{c.Stored, c.Replay})
	}
	for i, c := range rows {
		key := "stored-row-" + string(rune('a'+i))
		tx, err := db.Begin()
		must(t, err)
		var attempt int
		must(t, tx.QueryRow("SELECT attempt FROM idempotency.reserve($1, $2, $3::bytea)", "acct_mw", key, hash).Scan(&attempt))
		_, err = tx.Exec("SELECT idempotency.complete($1, $2, $3, $4::jsonb, $5)", "acct_mw", key, c.replay.Status, string(c.stored), attempt)
		must(t, err)
		must(t, tx.Commit())

		a := post(t, srv.URL, key, "application/json", request)
		if a.status != c.replay.Status {
			t.Errorf("%s: status %d, want %d", key, a.status, c.replay.Status)
		}
		if a.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("%s: not a replay: %v", key, a.header)
		}
		for k, val := range c.replay.Headers {
			if got := a.header.Get(k); got != val {
				t.Errorf("%s: %s is %q, want %q", key, k, got, val)
			}
		}
		if _, set := c.replay.Headers["content-type"]; !set && a.header.Get("Content-Type") != "" {
			t.Errorf("%s: a Content-Type %q the answer did not have", key, a.header.Get("Content-Type"))
		}
		if want := c.replay.bytes(t); a.body != string(want) {
			t.Errorf("%s: body %q, want %q", key, a.body, want)
		}
	}
}

// A replay carries the headers a client read the first time: Content-Type (here the one
// net/http sniffed), Location and the KeepHeaders, and the body byte for byte.
func TestReplayKeepsHeaders(t *testing.T) {
	db := open(t, "pgx")
	runs := 0
	mw := idempotency.New(db).Middleware(idempotency.MiddlewareOptions{Scope: scopeFromHeader, KeepHeaders: []string{"x-order"}})
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.Header().Set("X-Order", "o-1")
		w.Header().Set("X-Trace", "t-1") // not kept
		w.Header().Set("Location", "/orders/1")
		w.WriteHeader(202)
		_, _ = w.Write([]byte("accepted \u2615"))
	})))
	t.Cleanup(srv.Close)
	first := post(t, srv.URL, "keep-headers-1", "text/plain", "plain body")
	again := post(t, srv.URL, "keep-headers-1", "text/plain", "plain body")
	if runs != 1 || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("runs %d, replay %v", runs, again.header)
	}
	if again.status != 202 || again.body != first.body || again.body != "accepted \u2615" {
		t.Errorf("replay %d %q, first %d %q", again.status, again.body, first.status, first.body)
	}
	for _, h := range []string{"Content-Type", "Location", "X-Order"} {
		if again.header.Get(h) == "" || again.header.Get(h) != first.header.Get(h) {
			t.Errorf("%s: replay %q, first %q", h, again.header.Get(h), first.header.Get(h))
		}
	}
	if again.header.Get("X-Trace") != "" {
		t.Errorf("X-Trace was kept")
	}
}
