// The orders API of docs/http.md in Go: net/http, database/sql with pgx v4's stdlib driver,
// and the idempotency middleware. POST /orders with an Idempotency-Key creates one order per
// key however often it is retried; GET /healthz answers once the database does.
//
//	PGHOST=... PGPORT=... PGUSER=... PGDATABASE=... PORT=3001 ./http-go
package main

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"

	_ "github.com/jackc/pgx/v4/stdlib" // the "pgx" driver of database/sql

	"github.com/pgidempotency/idempotency/clients/go"
	_ "github.com/pgidempotency/idempotency/clients/go/pgxv4" // complete and COMMIT in one round trip on pgx's connections
)

// catalog: prices in cents.
var catalog = map[string]int64{"widget": 250, "gadget": 1000, "gizmo": 4200}

// tokens: a bearer token per account (the scope of the account's keys).
var tokens = map[string]string{"alice-token": "acct_alice", "bob-token": "acct_bob"}

// schemaFile is the orders schema all the orders examples apply at start, the Node example's
// (examples/http-node/schema.sql, found beside this source file); ORDERS_SCHEMA names another.
func schemaFile() string {
	if f := os.Getenv("ORDERS_SCHEMA"); f != "" {
		return f
	}
	_, src, _, _ := runtime.Caller(0)
	dir := filepath.Dir(src)
	if real, err := filepath.EvalSymlinks(dir); err == nil { // GOPATH/src links to this folder
		dir = real
	}
	return filepath.Join(dir, "..", "http-node", "schema.sql")
}

// applySchema creates the orders table if it is missing (every statement may run again).
func applySchema(db *sql.DB) error {
	schema, err := os.ReadFile(schemaFile())
	if err == nil {
		_, err = db.Exec(string(schema))
	}
	return err
}

var bearer = regexp.MustCompile(`(?i)^Bearer +(\S+)$`)

func account(r *http.Request) (string, error) {
	m := bearer.FindStringSubmatch(r.Header.Get("Authorization"))
	if m == nil || tokens[m[1]] == "" {
		return "", errors.New(`a valid "Authorization: Bearer <token>" is required`)
	}
	return tokens[m[1]], nil
}

func problem(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": code, "message": message})
}

// createOrder runs inside the claim's transaction (idempotency.TxFrom): the order and the
// stored answer commit together.
func createOrder(w http.ResponseWriter, r *http.Request) {
	var order struct {
		Item     string  `json:"item"`
		Quantity int     `json:"quantity"`
		Note     *string `json:"note"`
	}
	if err := json.NewDecoder(r.Body).Decode(&order); err != nil || catalog[order.Item] == 0 ||
		order.Quantity < 1 || order.Quantity > 1000 {
		problem(w, 400, "invalid_order", "an order is {item: widget|gadget|gizmo, quantity: 1..1000}")
		return
	}
	claim := idempotency.ClaimFrom(r.Context())
	var body []byte
	err := claim.Tx.QueryRowContext(r.Context(), `
		INSERT INTO orders (account, idempotency_key, item, quantity, total_cents, note)
		VALUES ($1, $2, $3, $4, $5, $6)
		RETURNING json_build_object('id', id, 'item', item, 'quantity', quantity,
		  'total_cents', total_cents, 'note', note)::jsonb::text`,
		claim.Scope, claim.Key, order.Item, order.Quantity, catalog[order.Item]*int64(order.Quantity), order.Note).Scan(&body)
	if err != nil {
		// a 5xx is not stored: the claim rolls back with the insert, and a retry runs afresh
		// (the middleware answers 503 instead when the connection is gone)
		log.Printf("order: %v", err)
		problem(w, 500, "internal_error", "the order could not be created; retry with the same Idempotency-Key")
		return
	}
	var id struct{ ID int64 }
	_ = json.Unmarshal(body, &id)
	// compact jsonb: the replay of this answer (stored as jsonb, sent compact) is the same bytes
	var compact bytes.Buffer
	_ = json.Compact(&compact, body)
	body = compact.Bytes()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", fmt.Sprintf("/orders/%d", id.ID))
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(body)
}

// Handler is the service: /orders behind the middleware, /healthz.
func Handler(db *sql.DB) http.Handler {
	mw := idempotency.New(db).Middleware(idempotency.MiddlewareOptions{
		Scope:   account,
		Exclude: []string{"client_sent_at"}, // a replay carries Location as it was
	})
	mux := http.NewServeMux()
	orders := mw(http.HandlerFunc(createOrder))
	mux.HandleFunc("/orders", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			problem(w, 405, "method_not_allowed", "POST /orders")
			return
		}
		if _, err := account(r); err != nil { // 401 before any claim
			w.Header().Set("WWW-Authenticate", "Bearer")
			problem(w, 401, "unauthorized", err.Error())
			return
		}
		orders.ServeHTTP(w, r)
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := db.PingContext(r.Context()); err != nil {
			problem(w, 503, "database_unavailable", "the database could not be reached")
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	return mux
}

func main() {
	db, err := sql.Open("pgx", "") // PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD
	if err != nil {
		log.Fatal(err)
	}
	if err := applySchema(db); err != nil {
		log.Fatalf("schema: %v", err)
	}
	addr := net.JoinHostPort(envOr("HOST", "127.0.0.1"), envOr("PORT", "3001"))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("listening on http://%s\n", strings.Replace(ln.Addr().String(), "[::]", "localhost", 1))
	log.Fatal(http.Serve(ln, Handler(db)))
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}
