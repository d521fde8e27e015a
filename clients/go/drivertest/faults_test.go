// A database that goes away never takes the service down: a backend terminated during the
// work answers 503 with nothing half-committed, and the service keeps serving; a PostgreSQL
// restart while requests run is survived (clients that retry each key until answered end
// with exactly one order per key); a burst of one key makes one order.

package drivertest

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgidempotency/idempotency/clients/go"
)

func TestFaultBackendTerminatedDuringWork(t *testing.T) {
	eachDriver(t, func(t *testing.T, db *sql.DB) {
		admin := open(t, "pgx")
		pids := make(chan int, 1)
		proceed := make(chan struct{})
		orders := orderHandler(t)
		srv := newService(t, db, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Terminate") != "" {
				var pid int
				must(t, idempotency.TxFrom(r.Context()).QueryRowContext(r.Context(), "SELECT pg_backend_pid()").Scan(&pid))
				pids <- pid
				<-proceed
			}
			orders.ServeHTTP(w, r) // its insert meets the terminated connection
		}))
		key := newKey("terminated")
		done := make(chan answer)
		go func() {
			req, _ := http.NewRequest("POST", srv.URL, strings.NewReader(`{}`))
			req.Header.Set("Idempotency-Key", key)
			req.Header.Set("X-Account", "acct_mw")
			req.Header.Set("X-Terminate", "1")
			req.Header.Set("Content-Type", "application/json")
			res, err := http.DefaultClient.Do(req)
			must(t, err)
			defer res.Body.Close()
			var buf [512]byte
			n, _ := res.Body.Read(buf[:])
			done <- answer{res.StatusCode, res.Header, string(buf[:n])}
		}()
		var pid int
		select {
		case pid = <-pids:
		case a := <-done:
			t.Fatalf("answered before the work: %+v", a)
		}
		var terminated bool
		must(t, admin.QueryRow("SELECT pg_terminate_backend($1)", pid).Scan(&terminated))
		waitFor(t, "the backend to exit", func() bool {
			var n int
			must(t, admin.QueryRow("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n))
			return n == 0
		})
		close(proceed)
		a := <-done
		if !terminated || a.status != 503 || a.header.Get("Retry-After") != "1" || errorCode(t, a) != "database_unavailable" {
			t.Fatalf("terminated: %+v", a)
		}
		if rec, _ := idempotency.Lookup(context.Background(), admin, "acct_mw", key); rec != nil || countOrders(t, admin, "acct_mw", key) != 0 {
			t.Fatalf("half-committed: %+v", rec)
		}
		// the service keeps serving, the same key included
		for i := 0; i < 3; i++ {
			if a := post(t, srv.URL, key, "application/json", `{}`); a.status != 201 {
				t.Fatalf("after: %+v", a)
			}
		}
		if n := countOrders(t, admin, "acct_mw", key); n != 1 {
			t.Fatalf("%d orders", n)
		}
	})
}

// retryUntilFinal sends one key until the answer is final (not 409 / 503), as a client that
// keeps its key does.
func retryUntilFinal(t testing.TB, url, key, body string) answer {
	deadline := time.Now().Add(90 * time.Second)
	for {
		a, err := tryPost(url, key, body)
		if err == nil && a.status != 409 && a.status != 503 {
			return a
		}
		if time.Now().After(deadline) {
			t.Errorf("key %s: no final answer (last %+v, %v)", key, a, err)
			return a
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func tryPost(url, key, body string) (answer, error) {
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("X-Account", "acct_mw")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return answer{status: res.StatusCode, header: res.Header, body: string(b)}, err
}

// The server restarts (IDEM_GO_RESTART: the command, from scripts/test.sh) while 8 clients
// send requests: 503 meanwhile, and each key ends with exactly one order.
func TestFaultServerRestart(t *testing.T) {
	restart := os.Getenv("IDEM_GO_RESTART")
	if restart == "" {
		t.Skip("IDEM_GO_RESTART is not set (scripts/test.sh sets it to restart its cluster)")
	}
	eachDriver(t, func(t *testing.T, db *sql.DB) {
		srv := newService(t, db, orderHandler(t))
		stop := make(chan struct{})
		var (
			mu   sync.Mutex
			keys []string
			wg   sync.WaitGroup
		)
		for c := 0; c < 8; c++ {
			wg.Add(1)
			go func(c int) {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					key := newKeyConcurrent(fmt.Sprintf("restart-%d-%d", c, i))
					mu.Lock()
					keys = append(keys, key)
					mu.Unlock()
					if a := retryUntilFinal(t, srv.URL, key, ""); a.status != 201 {
						t.Errorf("key %s: %d", key, a.status)
					}
				}
			}(c)
		}
		// some requests before, during and after the restart
		waitFor(t, "requests before the restart", func() bool { mu.Lock(); defer mu.Unlock(); return len(keys) > 16 })
		cmd := exec.Command("bash", "-c", restart)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("restart: %v %s", err, out)
		}
		mu.Lock()
		atRestart := len(keys)
		mu.Unlock()
		waitFor(t, "requests after the restart", func() bool { mu.Lock(); defer mu.Unlock(); return len(keys) > atRestart+16 })
		close(stop)
		wg.Wait()
		admin := open(t, "pgx")
		for _, key := range keys {
			if n := countOrders(t, admin, "acct_mw", key); n != 1 {
				t.Errorf("key %s: %d orders", key, n)
			}
		}
	})
}

var keyMu sync.Mutex

func newKeyConcurrent(prefix string) string {
	keyMu.Lock()
	defer keyMu.Unlock()
	return newKey(prefix)
}

// 8 concurrent requests with one key: one order; every final answer is the same.
func TestFaultBurstOfOneKey(t *testing.T) {
	eachDriver(t, func(t *testing.T, db *sql.DB) {
		db.SetMaxOpenConns(8)
		burstOfOneKey(t, db, newService(t, db, orderHandler(t)).URL, newKey("burst"), "")
	})
}

// burstOfOneKey sends one key from 8 concurrent clients, each until its answer is final:
// every answer is 201, the 7 replays with the same body, and the key made one order.
func burstOfOneKey(t *testing.T, db *sql.DB, url, key, body string) {
	answers := make([]answer, 8)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range answers {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			answers[i] = retryUntilFinal(t, url, key, body)
		}(i)
	}
	close(start)
	wg.Wait()
	replayed, replayBody := 0, ""
	for _, a := range answers {
		if a.status != 201 {
			t.Fatalf("answer %+v", a)
		}
		if a.header.Get("Idempotent-Replayed") == "true" {
			if replayed++; replayed == 1 {
				replayBody = a.body
			} else if a.body != replayBody {
				t.Fatalf("replays %q and %q", replayBody, a.body)
			}
		}
	}
	if n := countOrders(t, db, "acct_mw", key); n != 1 || replayed != 7 {
		t.Fatalf("%d orders, %d replays", n, replayed)
	}
}

// No database at all: 503 + Retry-After, and the service answers.
func TestFaultDatabaseUnreachable(t *testing.T) {
	for _, d := range drivers {
		db, err := sql.Open("counting-"+d, "host=/nonexistent port=1 dbname=x sslmode=disable connect_timeout=2")
		must(t, err)
		defer db.Close()
		srv := newService(t, db, orderHandler(t))
		a := post(t, srv.URL, newKey("nodb"), "application/json", `{}`)
		if a.status != 503 || a.header.Get("Retry-After") != "1" || errorCode(t, a) != "database_unavailable" {
			t.Fatalf("%s: %+v", d, a)
		}
	}
}
