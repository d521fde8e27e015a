package drivertest

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgidempotency/idempotency/clients/go"
)

const insertReturning = "INSERT INTO orders (scope, key, item) VALUES ($1, $2, $3) RETURNING id, item"

// A new key: execute_once alone (one statement) runs the insert and answers its row; a replay:
// the same statement, the stored answer, nothing run; another body: mismatch; a key another
// transaction holds: in_progress.
func TestRunOnceStatement(t *testing.T) {
	eachClient(t, func(t *testing.T, ctx context.Context, db *sql.DB, c *idempotency.Client) {
		scope, key := "acct_exec", newKey("exec")
		req := idempotency.Request{Scope: scope, Key: key, Request: []byte(`{"item": "lamp"}`)}
		st := idempotency.OneStatement{SQL: insertReturning, Params: []interface{}{scope, key, "lamp"}}
		var first, again *idempotency.Result
		statements := counting(func() {
			var err error
			first, err = c.RunOnceStatement(ctx, req, st)
			must(t, err)
		})
		if len(statements) != 1 || !strings.Contains(statements[0], "idempotency.execute_once(") {
			t.Fatalf("statements: %q", statements)
		}
		var row struct {
			ID   int64  `json:"id"`
			Item string `json:"item"`
		}
		must(t, json.Unmarshal(first.Response, &row))
		if first.Replayed || first.StatusCode != 201 || row.ID == 0 || row.Item != "lamp" {
			t.Fatalf("first: %+v %s", first, first.Response)
		}
		statements = counting(func() {
			var err error
			again, err = c.RunOnceStatement(ctx, req, st)
			must(t, err)
		})
		if len(statements) != 1 || !again.Replayed || again.StatusCode != 201 || string(again.Response) != string(first.Response) {
			t.Fatalf("replay: %q %+v", statements, again)
		}
		if n := countOrders(t, db, scope, key); n != 1 {
			t.Fatalf("%d orders", n)
		}
		req.Request = []byte(`{"item": "sofa"}`)
		if _, err := c.RunOnceStatement(ctx, req, st); !errors.Is(err, idempotency.ErrKeyMismatch) {
			t.Fatalf("mismatch: %v", err)
		}
		// a key held by another transaction: in_progress, and the statement does not run
		held := newKey("held")
		defer holdKey(t, ctx, db, scope, held).Rollback()
		_, err := c.RunOnceStatement(ctx, idempotency.Request{Scope: scope, Key: held},
			idempotency.OneStatement{SQL: insertReturning, Params: []interface{}{scope, held, "lamp"}})
		var oe *idempotency.OutcomeError
		if !errors.As(err, &oe) || oe.Outcome != idempotency.OutcomeInProgress || oe.HTTPStatus() != 409 {
			t.Fatalf("in progress: %v", err)
		}
		if n := countOrders(t, db, scope, held); n != 0 {
			t.Fatalf("%d orders for a held key", n)
		}
	})
}

// holdKey reserves scope/key in a transaction it leaves open (roll it back when done).
func holdKey(t *testing.T, ctx context.Context, db *sql.DB, scope, key string) *sql.Tx {
	tx, err := db.BeginTx(ctx, nil)
	must(t, err)
	_, err = idempotency.Reserve(ctx, tx, scope, key, nil, idempotency.ReserveOptions{})
	must(t, err)
	return tx
}

type uuidType [16]byte

// The parameters reach the statement as the types it gives them: numbers, booleans, text with
// quotes and backslashes, times, durations, UUIDs, JSON, bytes, NULL.
func TestExecuteOnceParameterTypes(t *testing.T) {
	eachDriver(t, func(t *testing.T, db *sql.DB) {
		ctx := context.Background()
		when := time.Date(2026, 11, 27, 13, 45, 6, 123456000, time.UTC)
		text := `it's "quoted" \ {a,b} NULL`
		u := uuidType{0x01, 0x8f, 0x3a, 0x4b, 0x5c, 0x6d, 0x7e, 0x8f, 0x90, 0xa1, 0xb2, 0xc3, 0xd4, 0xe5, 0xf6, 0x07}
		var nilPtr *string
		r, err := idempotency.ExecuteOnce(ctx, db, "acct_exec", newKey("types"), nil,
			`SELECT $1::integer + 1 AS i, $2::float8 AS f, $3::boolean AS b, $4 AS s, $5::timestamptz = '2026-11-27 13:45:06.123456+00' AS t,
			        $6::interval = '90 seconds' AS d, $7::uuid AS u, $8::jsonb AS j, $9::text IS NULL AS n, $10::bytea = '\x0102ff' AS by,
			        $11::jsonb AS arr, $12::numeric AS big, $13::text IS NULL AS np, $14::numeric AS num`,
			[]interface{}{41, 2.5, true, text, when, 90 * time.Second, u, map[string]interface{}{"a": []int{1, 2}},
				nil, []byte{1, 2, 255}, []string{"x", "y"}, uint64(1) << 63, nilPtr, json.Number("12.50")},
			idempotency.ExecuteOptions{StatusCode: 200})
		must(t, err)
		want := `{"i": 42, "f": 2.5, "b": true, "s": "it's \"quoted\" \\ {a,b} NULL", "t": true, "d": true, ` +
			`"u": "018f3a4b-5c6d-7e8f-90a1-b2c3d4e5f607", "j": {"a": [1, 2]}, "n": true, "by": true, "arr": ["x", "y"], ` +
			`"big": 9223372036854775808, "np": true, "num": 12.50}`
		var got, expected interface{}
		must(t, json.Unmarshal(r.Response, &got))
		must(t, json.Unmarshal([]byte(want), &expected))
		if r.Outcome != "new" || r.StatusCode != 200 || fmt.Sprint(got) != fmt.Sprint(expected) {
			t.Fatalf("%+v\n got %s\nwant %s", r, r.Response, want)
		}
		if _, err := idempotency.StatementParams([]interface{}{make(chan int)}); err == nil {
			t.Fatal("a channel was converted")
		}
	})
}

// No row: a NULL response; a single json column: taken as it is; several rows: 21000 and the
// key stays new; an error of the statement: the key stays new, and a later call runs it.
func TestExecuteOnceResponsesAndErrors(t *testing.T) {
	eachDriver(t, func(t *testing.T, db *sql.DB) {
		ctx := context.Background()
		scope := "acct_exec"
		r, err := idempotency.ExecuteOnce(ctx, db, scope, newKey("norow"), nil, "SELECT 1 WHERE false", nil, idempotency.ExecuteOptions{})
		must(t, err)
		if r.Outcome != "new" || r.Response != nil || r.StatusCode != 201 {
			t.Fatalf("no row: %+v", r)
		}
		r, err = idempotency.ExecuteOnce(ctx, db, scope, newKey("json"), nil, "SELECT jsonb_build_array($1::int, $2)", []interface{}{7, "x"}, idempotency.ExecuteOptions{})
		must(t, err)
		if string(r.Response) != `[7, "x"]` {
			t.Fatalf("json column: %s", r.Response)
		}
		key := newKey("rows")
		_, err = idempotency.ExecuteOnce(ctx, db, scope, key, nil, "SELECT g FROM generate_series(1, 2) g", nil, idempotency.ExecuteOptions{})
		if sqlStateOf(err) != "21000" {
			t.Fatalf("several rows: %v", err)
		}
		key = newKey("boom")
		st := idempotency.OneStatement{SQL: "INSERT INTO orders (scope, key, item) VALUES ($1, $2, 'x') RETURNING 1 / $3::int AS q"}
		st.Params = []interface{}{scope, key, 0}
		_, err = idempotency.New(db).RunOnceStatement(ctx, idempotency.Request{Scope: scope, Key: key}, st)
		if sqlStateOf(err) != "22012" {
			t.Fatalf("division by zero: %v", err)
		}
		rec, err := idempotency.Lookup(ctx, db, scope, key)
		must(t, err)
		if rec != nil || countOrders(t, db, scope, key) != 0 {
			t.Fatalf("left behind: %+v", rec)
		}
		st.Params = []interface{}{scope, key, 1}
		res, err := idempotency.New(db).RunOnceStatement(ctx, idempotency.Request{Scope: scope, Key: key}, st)
		must(t, err)
		if res.Replayed || string(res.Response) != `{"q": 1}` || countOrders(t, db, scope, key) != 1 {
			t.Fatalf("after the error: %+v %s", res, res.Response)
		}
	})
}

func sqlStateOf(err error) string {
	var s interface{ SQLState() string }
	if errors.As(err, &s) {
		return s.SQLState()
	}
	return ""
}

// In the caller's transaction: one statement, and the claim and the insert go with the
// transaction (rolled back here: the key is new again).
func TestRunOnceStatementTx(t *testing.T) {
	eachDriver(t, func(t *testing.T, db *sql.DB) {
		ctx := context.Background()
		scope, key := "acct_exec", newKey("tx")
		tx, err := db.BeginTx(ctx, nil)
		must(t, err)
		var res *idempotency.Result
		statements := counting(func() {
			res, err = idempotency.RunOnceStatementTx(ctx, tx, idempotency.Request{Scope: scope, Key: key},
				idempotency.OneStatement{SQL: insertReturning, Params: []interface{}{scope, key, "tx"}, StatusCode: 202})
		})
		must(t, err)
		if len(statements) != 1 || res.StatusCode != 202 || res.Replayed {
			t.Fatalf("%q %+v", statements, res)
		}
		must(t, tx.Rollback())
		rec, err := idempotency.Lookup(ctx, db, scope, key)
		must(t, err)
		if rec != nil || countOrders(t, db, scope, key) != 0 {
			t.Fatalf("left behind after the rollback: %+v", rec)
		}
	})
}

// A server without execute_once (the extension at 0.2.0): an error that names it.
func TestExecuteOnceMissing(t *testing.T) {
	admin, err := sql.Open("pgx", "dbname=postgres sslmode=disable")
	must(t, err)
	defer admin.Close()
	for _, q := range []string{"DROP DATABASE IF EXISTS " + testDB + "_old WITH (FORCE)", "CREATE DATABASE " + testDB + "_old"} {
		_, err := admin.Exec(q)
		must(t, err)
	}
	for _, d := range drivers {
		db, err := sql.Open(d, fmt.Sprintf("dbname=%s_old sslmode=disable", testDB))
		must(t, err)
		defer db.Close()
		_, err = db.Exec("CREATE EXTENSION IF NOT EXISTS idempotency VERSION '0.2.0'")
		must(t, err)
		_, err = idempotency.New(db).RunOnceStatement(context.Background(), idempotency.Request{Scope: "s", Key: "k"},
			idempotency.OneStatement{SQL: "SELECT 1"})
		var e *idempotency.Error
		if !errors.Is(err, idempotency.ErrUndefinedFunction) || !errors.As(err, &e) ||
			!strings.Contains(e.Message, "idempotency.execute_once") || !strings.Contains(e.Message, "0.3.0") {
			t.Fatalf("%s: %v", d, err)
		}
		srv := statementService(t, db)
		if a := post(t, srv.URL, newKey("old"), "application/json", `{"item": "x"}`); a.status != 500 || errorCode(t, a) != "internal_error" {
			t.Fatalf("%s: %+v", d, a)
		}
	}
}

// statementService: the middleware with the Statement option (no handler): an order from the
// body's "item"; logging to logger when given.
func statementService(t testing.TB, db *sql.DB, logger ...idempotency.Logger) *httptest.Server {
	var l idempotency.Logger
	if len(logger) > 0 {
		l = logger[0]
	}
	mw := idempotency.New(db).Middleware(idempotency.MiddlewareOptions{Scope: scopeFromHeader, Logger: l,
		Statement: &idempotency.StatementOptions{
			// an empty item fails the statement (division by zero)
			SQL: "INSERT INTO orders (scope, key, item) SELECT $1, $2, $3 WHERE 1 / length($3) >= 0 RETURNING id, item",
			Params: func(r *http.Request, body []byte) ([]interface{}, error) {
				var b struct{ Item *string }
				if err := json.Unmarshal(body, &b); err != nil || b.Item == nil {
					return nil, errors.New("the body needs an item")
				}
				claim := r.Header.Get("X-Account")
				return []interface{}{claim, r.Header.Get("Idempotency-Key"), *b.Item}, nil
			},
		}})
	srv := httptest.NewServer(mw(nil))
	t.Cleanup(srv.Close)
	return srv
}

// recordingLogger keeps what the middleware logs.
type recordingLogger struct {
	mu    sync.Mutex
	lines []string
}

func (l *recordingLogger) Printf(format string, v ...interface{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, v...))
}

// What the middleware cannot answer with goes to its Logger option, not to the log package.
func TestMiddlewareLogger(t *testing.T) {
	eachDriver(t, func(t *testing.T, db *sql.DB) {
		var logged recordingLogger
		var standard strings.Builder
		log.SetOutput(&standard)
		defer log.SetOutput(os.Stderr)
		srv := statementService(t, db, &logged)
		bad := newKey("logger")
		if a := post(t, srv.URL, bad, "application/json", `{"item": ""}`); a.status != 500 {
			t.Fatalf("statement error: %+v", a)
		}
		logged.mu.Lock()
		defer logged.mu.Unlock()
		if len(logged.lines) != 1 || !strings.Contains(logged.lines[0], fmt.Sprintf("the statement of key %q failed", bad)) {
			t.Fatalf("logged %q", logged.lines)
		}
		if standard.Len() != 0 {
			t.Fatalf("the log package got %q", standard.String())
		}
	})
}

// The middleware's Statement option: the statement's row as the 201 body, its replay, 422,
// 409, 400 (bad key, params refused), 500 for the statement's error (the key stays new).
func TestMiddlewareStatement(t *testing.T) {
	eachClient(t, func(t *testing.T, ctx context.Context, db *sql.DB, c *idempotency.Client) {
		srv := statementService(t, db)
		key := newKey("mws")
		var a answer
		statements := counting(func() { a = post(t, srv.URL, key, "application/json", `{"item": "desk"}`) })
		var row struct {
			ID   int64
			Item string
		}
		must(t, json.Unmarshal([]byte(a.body), &row))
		if a.status != 201 || a.header.Get("Content-Type") != "application/json" || row.Item != "desk" ||
			a.header.Get("Idempotent-Replayed") != "" || len(statements) != 1 {
			t.Fatalf("new: %+v %q", a, statements)
		}
		var b answer
		statements = counting(func() { b = post(t, srv.URL, key, "application/json", `{ "item" : "desk" }`) })
		if b.status != 201 || b.body != a.body || b.header.Get("Idempotent-Replayed") != "true" || len(statements) != 1 {
			t.Fatalf("replay: %+v %q", b, statements)
		}
		if n := countOrders(t, db, "acct_mw", key); n != 1 {
			t.Fatalf("%d orders", n)
		}
		if a := post(t, srv.URL, key, "application/json", `{"item": "chair"}`); a.status != 422 || errorCode(t, a) != "idempotency_key_reused" {
			t.Fatalf("mismatch: %+v", a)
		}
		if a := post(t, srv.URL, "", "application/json", `{"item": "chair"}`); a.status != 400 || errorCode(t, a) != "idempotency_key_missing" {
			t.Fatalf("no key: %+v", a)
		}
		if a := post(t, srv.URL, newKey("noitem"), "application/json", `{}`); a.status != 400 || errorCode(t, a) != "invalid_request" {
			t.Fatalf("params refused: %+v", a)
		}
		held := newKey("mws-held")
		tx, err := db.BeginTx(ctx, nil)
		must(t, err)
		_, err = idempotency.Reserve(ctx, tx, "acct_mw", held, nil, idempotency.ReserveOptions{})
		must(t, err)
		a = post(t, srv.URL, held, "application/json", `{"item": "desk"}`)
		must(t, tx.Rollback())
		if a.status != 409 || a.header.Get("Retry-After") == "" || errorCode(t, a) != "idempotency_key_in_use" {
			t.Fatalf("in progress: %+v", a)
		}
		// an empty item: the statement fails, 500, and the key stays new
		bad := newKey("mws-bad")
		if a := post(t, srv.URL, bad, "application/json", `{"item": ""}`); a.status != 500 || errorCode(t, a) != "internal_error" {
			t.Fatalf("statement error: %+v", a)
		}
		rec, err := idempotency.Lookup(ctx, db, "acct_mw", bad)
		must(t, err)
		if rec != nil {
			t.Fatalf("the key was kept: %+v", rec)
		}
		if a := post(t, srv.URL, bad, "application/json", `{"item": "ab"}`); a.status != 201 || countOrders(t, db, "acct_mw", bad) != 1 {
			t.Fatalf("after the error: %+v", a)
		}
		// a statement without parameters (no Params function), and another status
		plain := httptest.NewServer(c.Middleware(idempotency.MiddlewareOptions{Scope: scopeFromHeader,
			Statement: &idempotency.StatementOptions{SQL: "SELECT 1 AS one", Status: 200}})(nil))
		defer plain.Close()
		if a := post(t, plain.URL, newKey("plain"), "application/json", `{}`); a.status != 200 || a.body != `{"one":1}` {
			t.Fatalf("no params: %+v", a)
		}
	})
}

// 8 concurrent requests with one key through the Statement option: one order, and every
// answer the first one.
func TestMiddlewareStatementBurst(t *testing.T) {
	eachDriver(t, func(t *testing.T, db *sql.DB) {
		db.SetMaxOpenConns(8)
		burstOfOneKey(t, db, statementService(t, db).URL, newKey("sburst"), `{"item": "burst"}`)
	})
}
