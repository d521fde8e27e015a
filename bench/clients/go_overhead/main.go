// The Go part of bench/clients.sh: the CPU per request of the Go client's RunOnce against the
// same statements sent by hand, over database/sql with pgx v4's driver and a pool of one
// connection (one backend, whose CPU is read from /proc/<pid>/schedstat).
//
//	go_overhead -bodies DIR -rounds 5 -requests 2000 -block 50 -out result.json
//
// Connects with the PG* environment. Per request, both variants fingerprint the 1 KB body
// with the package's Fingerprint and send the same statements in the same round trips:
//
//	bare    reserve_begin (which opens the transaction), W2's INSERT ... RETURNING id, then
//	        complete and COMMIT in one round trip (a pgconn batch on the driver's connection)
//	helper  Client.RunOnce with the same INSERT as its work (idempotency/pgxv4 sends complete
//	        and COMMIT in one round trip)
//
// The variants take turns block by block (-block requests each, the first of each turn
// alternating); a block's process CPU (getrusage: user + system, every thread of the process)
// and its backend's CPU are divided by its requests. Writes each round's figures per variant
// (microseconds per request) as JSON.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4/stdlib"

	"github.com/pgidempotency/idempotency/clients/go"
	_ "github.com/pgidempotency/idempotency/clients/go/pgxv4" // complete and COMMIT in one round trip for the helper
)

const (
	scope = "bench-clients-go"
	// W2's business write (bench/workloads/w2_extension.sql); clients 1 Python, 2 Node, 3 Go.
	insert       = "INSERT INTO bench.orders (client, amount, note) VALUES (3, $1, 'order') RETURNING id"
	reserveBegin = `SELECT r.outcome::text, r.status_code, r.response::text, r.attempt,
    r.recovery_point, r.first_seen_at, r.locked_until, r.expires_at
  FROM idempotency.reserve_begin($1, $2, $3::bytea, $4::interval, $5::interval, $6::interval) AS r`
	complete = `SELECT idempotency.complete($1, $2, $3::integer, $4::jsonb, $5::integer)`
)

var (
	ctx       = context.Background()
	db        *sql.DB
	client    *idempotency.Client
	body      []byte
	runID     = fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano())
	seq       int
	completed int
)

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

func nextKey(variant string) string {
	seq++
	return fmt.Sprintf("%s-%s-%d", runID, variant, seq)
}

// processCPU: this process's user + system time (every thread), in microseconds.
func processCPU() float64 {
	var ru syscall.Rusage
	must(syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return float64(ru.Utime.Sec+ru.Stime.Sec)*1e6 + float64(ru.Utime.Usec+ru.Stime.Usec)
}

// backendCPU: the time the backend has run on a CPU (schedstat's first field), in microseconds.
func backendCPU(pid int) float64 {
	text, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	must(err)
	ns, err := strconv.ParseFloat(strings.Fields(string(text))[0], 64)
	must(err)
	return ns / 1000
}

func bare() {
	key := nextKey("bare")
	fp, err := idempotency.Fingerprint(body)
	must(err)
	conn, err := db.Conn(ctx)
	must(err)
	defer conn.Close()
	var (
		outcome                       string
		status, attempt               sql.NullInt64
		response, recovery            sql.NullString
		firstSeen, lockedUntil, until sql.NullTime
	)
	must(conn.QueryRowContext(ctx, reserveBegin, scope, key, fp, "5 minutes", "24 hours", "0").
		Scan(&outcome, &status, &response, &attempt, &recovery, &firstSeen, &lockedUntil, &until))
	if outcome != "new" {
		log.Fatalf("bare: reserve_begin of a fresh key gave %s", outcome)
	}
	var id int64
	must(conn.QueryRowContext(ctx, insert, seq).Scan(&id))
	answer := fmt.Sprintf(`{"order_id":%d,"status":"created"}`, id)
	must(conn.Raw(func(driverConn interface{}) error {
		batch := &pgconn.Batch{}
		batch.ExecParams(complete, [][]byte{[]byte(scope), []byte(key), []byte("201"), []byte(answer),
			[]byte(strconv.FormatInt(attempt.Int64, 10))}, nil, nil, nil)
		batch.ExecParams("COMMIT", nil, nil, nil, nil)
		_, err := driverConn.(*stdlib.Conn).Conn().PgConn().ExecBatch(ctx, batch).ReadAll()
		return err
	}))
	completed++
}

func helper() {
	key := nextKey("helper")
	res, err := client.RunOnce(ctx, idempotency.Request{Scope: scope, Key: key, Request: body},
		func(ctx context.Context, tx idempotency.Querier, r *idempotency.Reservation) (int, json.RawMessage, error) {
			var id int64
			if err := tx.QueryRowContext(ctx, insert, seq).Scan(&id); err != nil {
				return 0, nil, err
			}
			return 201, json.RawMessage(fmt.Sprintf(`{"order_id":%d,"status":"created"}`, id)), nil
		})
	must(err)
	if res.Replayed || res.StatusCode != 201 {
		log.Fatalf("helper: a fresh key gave %+v", res)
	}
	completed++
}

// figures: a variant's totals over a round.
type figures struct{ requests, wall, cpu, backend float64 }

func (f *figures) block(run func(), n int, pid int) {
	w0, c0, b0 := time.Now(), processCPU(), backendCPU(pid)
	for i := 0; i < n; i++ {
		run()
	}
	f.cpu += processCPU() - c0
	f.backend += backendCPU(pid) - b0
	f.wall += float64(time.Since(w0).Microseconds())
	f.requests += float64(n)
}

// takeTurns runs blocks of bare and helper requests by turns, requests of each in all.
func takeTurns(requests, block, pid int) (b, h figures) {
	for done, i := 0, 0; done < requests; i++ {
		n := block
		if requests-done < n {
			n = requests - done
		}
		if i%2 == 0 {
			b.block(bare, n, pid)
			h.block(helper, n, pid)
		} else {
			h.block(helper, n, pid)
			b.block(bare, n, pid)
		}
		done += n
	}
	return
}

func main() {
	bodies := flag.String("bodies", "", "the folder of body-1k.json")
	rounds := flag.Int("rounds", 5, "rounds")
	requests := flag.Int("requests", 2000, "requests per variant and round")
	block := flag.Int("block", 50, "requests per block")
	versions := flag.String("versions", "", "what the report says of the driver")
	out := flag.String("out", "", "the result file")
	flag.Parse()
	log.SetFlags(0)

	var err error
	body, err = os.ReadFile(filepath.Join(*bodies, "body-1k.json"))
	must(err)
	db, err = sql.Open("pgx", "")
	must(err)
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	client = idempotency.New(db)

	var pid int
	must(db.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid))
	var server []byte
	must(db.QueryRowContext(ctx, "SELECT idempotency.fingerprint($1::jsonb)", string(body)).Scan(&server))
	if fp, err := idempotency.Fingerprint(body); err != nil || string(fp) != string(server) {
		log.Fatalf("the fingerprint of body-1k: client and server differ (%v)", err)
	}

	// Warm-up (the server's caches, the pool): a tenth of a round, not recorded.
	takeTurns(max(10, *requests/10), *block, pid)
	var results []map[string]float64
	for r := 0; r < *rounds; r++ {
		b, h := takeTurns(*requests, *block, pid)
		row := map[string]float64{
			"bare_wall": b.wall / b.requests, "helper_wall": h.wall / h.requests,
			"bare_cpu": b.cpu / b.requests, "helper_cpu": h.cpu / h.requests,
			"bare_backend_cpu": b.backend / b.requests, "helper_backend_cpu": h.backend / h.requests,
		}
		results = append(results, row)
		log.Printf("  go round %d/%d: process CPU bare %.1f helper %.1f, backend CPU bare %.1f helper %.1f (us per request)",
			r+1, *rounds, row["bare_cpu"], row["helper_cpu"], row["bare_backend_cpu"], row["helper_backend_cpu"])
	}
	var n int
	must(db.QueryRowContext(ctx, "SELECT count(*) FROM idempotency.keys WHERE scope = $1 AND state = 'completed'",
		scope).Scan(&n))
	if n != completed {
		log.Fatalf("%d completed keys for %d requests", n, completed)
	}
	if pid2 := 0; db.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid2) != nil || pid2 != pid {
		log.Fatalf("the pool's connection changed during the run (backend %d, then %d)", pid, pid2)
	}
	text, err := json.MarshalIndent(map[string]interface{}{
		"client":   "go",
		"kind":     "cpu",
		"versions": fmt.Sprintf("idempotency (clients/go), %s, %s", *versions, runtime.Version()),
		"bodies":   map[string]int{"1k": len(body)},
		"counts":   map[string]int{"requests": *requests, "block": *block},
		"rounds":   results,
	}, "", " ")
	must(err)
	must(os.WriteFile(*out, text, 0o644))
}

func max(a, b int) int {
	if a > b {
		return a
	}
	return b
}
