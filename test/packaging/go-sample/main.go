// The packaging suite's Go sample: a user's service built on the released Go modules (module
// mode), POST /orders through the middleware; it sends itself a burst of one key and checks
// that the burst made one order. Connects with the PG* environment.
package main

import (
	"bytes"
	"database/sql"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"

	_ "github.com/jackc/pgx/v4/stdlib"

	idempotency "github.com/pgidempotency/idempotency/clients/go"
	_ "github.com/pgidempotency/idempotency/clients/go/pgxv4"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "go-sample:", err)
		os.Exit(1)
	}
}

func run() error {
	db, err := sql.Open("pgx", "")
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS go_sample_orders (id bigserial PRIMARY KEY, key text NOT NULL)`); err != nil {
		return err
	}
	mw := idempotency.New(db).Middleware(idempotency.MiddlewareOptions{
		Scope: func(*http.Request) (string, error) { return "go-sample", nil },
	})
	orders := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		claim := idempotency.ClaimFrom(r.Context())
		var id int64
		if err := claim.Tx.QueryRowContext(r.Context(),
			"INSERT INTO go_sample_orders (key) VALUES ($1) RETURNING id", claim.Key).Scan(&id); err != nil {
			http.Error(w, `{"error": "internal_error"}`, 500)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		fmt.Fprintf(w, `{"id": %d}`, id)
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go http.Serve(ln, orders) //nolint:errcheck // ends with the process
	url := "http://" + ln.Addr().String() + "/orders"

	key := fmt.Sprintf("go-sample-%d", os.Getpid())
	const burst = 8
	statuses := make([]int, burst)
	var wg sync.WaitGroup
	for i := 0; i < burst; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			req, _ := http.NewRequest("POST", url, bytes.NewBufferString(`{"item": "widget"}`))
			req.Header.Set("Idempotency-Key", key)
			req.Header.Set("Content-Type", "application/json")
			if res, err := http.DefaultClient.Do(req); err == nil {
				statuses[i] = res.StatusCode
				res.Body.Close()
			}
		}(i)
	}
	wg.Wait()
	var n int
	if err := db.QueryRow("SELECT count(*) FROM go_sample_orders WHERE key = $1", key).Scan(&n); err != nil {
		return err
	}
	for _, s := range statuses {
		if s != 201 && s != 409 {
			return fmt.Errorf("answers %v", statuses)
		}
	}
	if n != 1 {
		return fmt.Errorf("a burst of %d requests with one key made %d orders (answers %v)", burst, n, statuses)
	}
	fmt.Printf("go-sample: a burst of %d requests with one key made 1 order (answers %v)\n", burst, statuses)
	return nil
}
