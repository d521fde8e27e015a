// The Idempotency-Key middleware in the routers Go services run: gin and echo through their
// adapters (idemgin, idemecho), and chi, whose middleware is net/http's, with
// Client.Middleware as it is. Each against PostgreSQL (the PG* environment's cluster), through
// the router's own handlers and error answers.
package frameworks_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/go-chi/chi/v5"
	_ "github.com/jackc/pgx/v4/stdlib"
	"github.com/labstack/echo/v4"

	idempotency "github.com/pgidempotency/idempotency/clients/go"
	"github.com/pgidempotency/idempotency/clients/go/idemecho"
	"github.com/pgidempotency/idempotency/clients/go/idemgin"
)

const testDB = "goframeworks"

func TestMain(m *testing.M) {
	if err := setup(); err != nil {
		fmt.Fprintln(os.Stderr, "setup:", err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}

func setup() error {
	admin, err := sql.Open("pgx", "dbname=postgres sslmode=disable")
	if err != nil {
		return err
	}
	defer admin.Close()
	ctx := context.Background()
	for _, q := range []string{"DROP DATABASE IF EXISTS " + testDB + " WITH (FORCE)", "CREATE DATABASE " + testDB} {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	db, err := sql.Open("pgx", "dbname="+testDB+" sslmode=disable")
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, `CREATE EXTENSION idempotency;
		CREATE TABLE orders (id bigserial PRIMARY KEY, scope text NOT NULL, key text NOT NULL, item text)`)
	return err
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func scope(r *http.Request) (string, error) {
	if a := r.Header.Get("X-Account"); a != "" {
		return a, nil
	}
	return "", idempotency.ErrScopeMissing
}

// order is what every router's handler does: one order in the claim's transaction, then 201
// with its id; a body with "refuse" is answered 409 by the router's own error answer after the
// insert, one with "fail" 500 (both after the insert, which only a stored answer keeps).
type order struct {
	runs atomic.Int64
}

// A body with "terminate" has its backend killed after the insert, in the middle of the
// request.
func (o *order) insert(r *http.Request) (int64, string, error) {
	o.runs.Add(1)
	claim := idempotency.ClaimFrom(r.Context())
	body, _ := io.ReadAll(r.Body)
	var id int64
	err := claim.Tx.QueryRowContext(r.Context(),
		"INSERT INTO orders (scope, key, item) VALUES ($1, $2, $3) RETURNING id", claim.Scope, claim.Key, string(body)).Scan(&id)
	if err == nil && strings.Contains(string(body), "terminate") {
		_, err = claim.Tx.ExecContext(r.Context(), "SELECT pg_terminate_backend(pg_backend_pid())")
	}
	return id, string(body), err
}

type router struct {
	name string
	new  func(c *idempotency.Client, o *order) http.Handler
}

var routers = []router{
	{"gin", func(c *idempotency.Client, o *order) http.Handler {
		gin.SetMode(gin.ReleaseMode)
		r := gin.New()
		r.POST("/orders", idemgin.Middleware(c, idempotency.MiddlewareOptions{Scope: scope}), func(ctx *gin.Context) {
			id, body, err := o.insert(ctx.Request)
			switch {
			case err != nil || strings.Contains(body, "fail"):
				ctx.JSON(500, gin.H{"failed": true})
			case strings.Contains(body, "refuse"):
				ctx.AbortWithStatusJSON(409, gin.H{"refused": id})
			default:
				ctx.Header("Location", fmt.Sprintf("/orders/%d", id))
				ctx.JSON(201, gin.H{"id": id})
			}
		})
		return r
	}},
	{"echo", func(c *idempotency.Client, o *order) http.Handler {
		e := echo.New()
		e.HideBanner = true
		e.POST("/orders", func(ec echo.Context) error {
			id, body, err := o.insert(ec.Request())
			switch {
			case err != nil || strings.Contains(body, "fail"):
				return errors.New("failed") // echo's error handler: 500
			case strings.Contains(body, "refuse"):
				return echo.NewHTTPError(409, fmt.Sprintf("refused %d", id))
			}
			ec.Response().Header().Set("Location", fmt.Sprintf("/orders/%d", id))
			return ec.JSON(201, map[string]int64{"id": id})
		}, idemecho.Middleware(c, idempotency.MiddlewareOptions{Scope: scope}))
		return e
	}},
	{"chi", func(c *idempotency.Client, o *order) http.Handler {
		r := chi.NewRouter()
		r.Use(c.Middleware(idempotency.MiddlewareOptions{Scope: scope}))
		r.Post("/orders", func(w http.ResponseWriter, r *http.Request) {
			id, body, err := o.insert(r)
			w.Header().Set("Content-Type", "application/json")
			switch {
			case err != nil || strings.Contains(body, "fail"):
				w.WriteHeader(500)
			case strings.Contains(body, "refuse"):
				w.WriteHeader(409)
				fmt.Fprintf(w, `{"refused":%d}`, id)
			default:
				w.Header().Set("Location", fmt.Sprintf("/orders/%d", id))
				w.WriteHeader(201)
				fmt.Fprintf(w, `{"id":%d}`, id)
			}
		})
		return r
	}},
}

type answer struct {
	status int
	header http.Header
	body   string
}

// replayOf: a JSON answer's body as its replays send it, the JSON text compacted (the stored
// form keeps a JSON body as its value: test/vectors/http_answers.json). gin's and chi's
// handlers here write compact JSON, replayed byte for byte; echo's JSON ends with a newline,
// which its replays do not have.
func replayOf(body string) string { return strings.TrimSuffix(body, "\n") }

func post(t testing.TB, url, account, key, body string) answer {
	t.Helper()
	req, err := http.NewRequest("POST", url+"/orders", strings.NewReader(body))
	must(t, err)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	req.Header.Set("X-Account", account)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	must(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	must(t, err)
	return answer{res.StatusCode, res.Header, string(b)}
}

func orders(t testing.TB, db *sql.DB, account, key string) int {
	t.Helper()
	var n int
	must(t, db.QueryRow("SELECT count(*) FROM orders WHERE scope = $1 AND key = $2", account, key).Scan(&n))
	return n
}

// problem: the answer is the middleware's problem details with this status and code.
func problem(t testing.TB, a answer, status int, code string) {
	t.Helper()
	var p struct {
		Type, Error string
		Status      int
	}
	if a.status != status || a.header.Get("Content-Type") != "application/problem+json" ||
		json.Unmarshal([]byte(a.body), &p) != nil || p.Error != code || p.Status != status ||
		p.Type != idempotency.ProblemTypeBase+code {
		t.Errorf("want %d %s as problem details, got %d %s %q", status, code, a.status, a.header.Get("Content-Type"), a.body)
	}
}

func TestRouters(t *testing.T) {
	db, err := sql.Open("pgx", "dbname="+testDB+" sslmode=disable")
	must(t, err)
	t.Cleanup(func() { db.Close() })
	client := idempotency.New(db)
	for _, rt := range routers {
		rt := rt
		t.Run(rt.name, func(t *testing.T) {
			o := &order{}
			srv := httptest.NewServer(rt.new(client, o))
			t.Cleanup(srv.Close)
			acct := "acct_" + rt.name

			first := post(t, srv.URL, acct, "k-1", `{"item": "widget"}`)
			if first.status != 201 || first.header.Get("Location") == "" || first.header.Get("Idempotent-Replayed") != "" {
				t.Fatalf("first: %+v", first)
			}
			again := post(t, srv.URL, acct, `"k-1"`, `{ "item" : "widget" }`) // the sf-string spelling
			if again.status != 201 || again.body != replayOf(first.body) || again.header.Get("Idempotent-Replayed") != "true" ||
				again.header.Get("Location") != first.header.Get("Location") ||
				again.header.Get("Content-Type") != first.header.Get("Content-Type") {
				t.Errorf("replay %+v of %+v", again, first)
			}
			if n := o.runs.Load(); n != 1 || orders(t, db, acct, "k-1") != 1 {
				t.Errorf("runs %d, orders %d", n, orders(t, db, acct, "k-1"))
			}
			problem(t, post(t, srv.URL, acct, "k-1", `{"item": "chair"}`), 422, "idempotency_key_reused")
			problem(t, post(t, srv.URL, acct, "", `{"item": "chair"}`), 400, "idempotency_key_missing")
			problem(t, post(t, srv.URL, acct, `"k-1";v=1`, `{"item": "chair"}`), 400, "idempotency_key_malformed")
			problem(t, post(t, srv.URL, "", "k-1", `{"item": "chair"}`), 400, "idempotency_scope_missing")

			// a 5xx of the router rolls the handler's insert back; the retry runs afresh
			runs := o.runs.Load()
			if a := post(t, srv.URL, acct, "k-fail", `{"item": "fail"}`); a.status != 500 {
				t.Errorf("fail: %+v", a)
			}
			if a := post(t, srv.URL, acct, "k-fail", `{"item": "fail"}`); a.status != 500 || o.runs.Load() != runs+2 ||
				orders(t, db, acct, "k-fail") != 0 {
				t.Errorf("fail again: %+v, runs %d, orders %d", a, o.runs.Load()-runs, orders(t, db, acct, "k-fail"))
			}
			// the backend killed mid-request: 503, nothing committed, the service keeps serving
			problem(t, post(t, srv.URL, acct, "k-terminate", `{"item": "terminate"}`), 503, "database_unavailable")
			if n := orders(t, db, acct, "k-terminate"); n != 0 {
				t.Errorf("terminated: %d orders", n)
			}
			if a := post(t, srv.URL, acct, "k-after-terminate", `{"item": "widget"}`); a.status != 201 {
				t.Errorf("after the terminated backend: %+v", a)
			}

			// the router's own 4xx answer is stored with the insert, and replayed
			refused := post(t, srv.URL, acct, "k-refuse", `{"item": "refuse"}`)
			replayed := post(t, srv.URL, acct, "k-refuse", `{"item": "refuse"}`)
			if refused.status != 409 || replayed.status != 409 || replayed.body != replayOf(refused.body) ||
				replayed.header.Get("Idempotent-Replayed") != "true" || orders(t, db, acct, "k-refuse") != 1 {
				t.Errorf("refused %+v, replayed %+v", refused, replayed)
			}

			// a burst of one key from 16 clients: one order, every answer the first or 409
			var wg sync.WaitGroup
			answers := make([]answer, 16)
			for i := range answers {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					answers[i] = post(t, srv.URL, acct, "k-burst", `{"item": "burst"}`)
				}(i)
			}
			wg.Wait()
			created := 0
			for _, a := range answers {
				switch {
				case a.status == 201 && a.header.Get("Idempotent-Replayed") == "":
					created++
				case a.status == 201:
				case a.status == 409:
					problem(t, a, 409, "idempotency_key_in_use")
				default:
					t.Errorf("burst: %+v", a)
				}
			}
			if created != 1 || orders(t, db, acct, "k-burst") != 1 {
				t.Errorf("burst: %d created, %d orders", created, orders(t, db, acct, "k-burst"))
			}
		})
	}
}

// PostgreSQL stops with -m immediate (a crash) and starts again (IDEM_GO_CRASH, from
// scripts/test.sh) under each router's service: the service survives, its first request after
// is answered (201, or 503 problem details when it met a connection of before), and a key
// retried until its answer makes one order.
func TestRoutersSurviveACrash(t *testing.T) {
	crash := os.Getenv("IDEM_GO_CRASH")
	if crash == "" {
		t.Skip("IDEM_GO_CRASH is not set (scripts/test.sh sets it to crash and restart its cluster)")
	}
	db, err := sql.Open("pgx", "dbname="+testDB+" sslmode=disable")
	must(t, err)
	t.Cleanup(func() { db.Close() })
	db.SetMaxIdleConns(4)
	client := idempotency.New(db)
	for _, rt := range routers {
		rt := rt
		t.Run(rt.name, func(t *testing.T) {
			srv := httptest.NewServer(rt.new(client, &order{}))
			t.Cleanup(srv.Close)
			acct := "acct_crash_" + rt.name
			if a := post(t, srv.URL, acct, "before", `{"item": "widget"}`); a.status != 201 {
				t.Fatalf("before the crash: %+v", a)
			}
			if out, err := exec.Command("bash", "-c", crash).CombinedOutput(); err != nil {
				t.Fatalf("crash: %v %s", err, out)
			}
			first := post(t, srv.URL, acct, "after", `{"item": "widget"}`)
			if first.status != 201 {
				problem(t, first, 503, "database_unavailable")
			}
			final := first
			for tries := 0; final.status == 503 && tries < 50; tries++ {
				final = post(t, srv.URL, acct, "after", `{"item": "widget"}`)
			}
			if final.status != 201 || orders(t, db, acct, "after") != 1 {
				t.Errorf("after the crash: %+v, %d orders", final, orders(t, db, acct, "after"))
			}
		})
	}
}
