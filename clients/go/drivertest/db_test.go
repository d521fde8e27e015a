// Test scaffolding: a database of its own on the cluster of the PG* environment (scripts/
// test.sh's test cluster), created afresh, and a *sql.DB per driver under test: pgx v4's
// stdlib driver and lib/pq, each wrapped in a driver that counts the statements sent.

package drivertest

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v4/stdlib"
	"github.com/lib/pq"

	"github.com/pgidempotency/idempotency/clients/go"
	"github.com/pgidempotency/idempotency/clients/go/pgxv4"
)

const testDB = "goclient"

// drivers: the name each is registered under (counting), by the driver's own name.
var drivers = []string{"pgx", "postgres"}

func init() {
	sql.Register("counting-pgx", &countingDriver{inner: stdlib.GetDefaultDriver()})
	sql.Register("counting-postgres", &countingDriver{inner: &pq.Driver{}})
	// pgx v4's pipelining (idempotency/pgxv4), counted as one entry: its statements joined
	// by "; ". lib/pq has none: its statements go one by one.
	idempotency.RegisterPipeliner(func(ctx context.Context, dc interface{}, statements []idempotency.Statement) ([]idempotency.StatementResult, bool, error) {
		rows, handled, err := pgxv4.Pipeline(ctx, dc, statements)
		if handled {
			texts := make([]string, len(statements))
			for i, s := range statements {
				texts[i] = s.SQL
			}
			record(strings.Join(texts, "; "))
		}
		return rows, handled, err
	})
}

// statements counts, per database/sql connection string, the statements sent (each Exec or
// Query of database/sql, BEGIN and COMMIT of a *sql.Tx included).
var (
	countMu sync.Mutex
	sent    []string
)

func record(query string) {
	countMu.Lock()
	sent = append(sent, query)
	countMu.Unlock()
}

// counting runs fn and returns the statements it sent.
func counting(fn func()) []string {
	countMu.Lock()
	sent = nil
	countMu.Unlock()
	fn()
	countMu.Lock()
	defer countMu.Unlock()
	return append([]string(nil), sent...)
}

type countingDriver struct{ inner driver.Driver }

func (d *countingDriver) Open(name string) (driver.Conn, error) {
	c, err := d.inner.Open(name)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c}, nil
}

type countingConn struct{ driver.Conn }

// Unwrap gives the driver's own connection (to idempotency/pgxv4).
func (c *countingConn) Unwrap() driver.Conn { return c.Conn }

func (c *countingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	record(query)
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, query, args)
}

func (c *countingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	record(query)
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, query, args)
}

func (c *countingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	record("BEGIN")
	tx, err := c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return countingTx{tx}, nil
}

func (c *countingConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *countingConn) IsValid() bool {
	if v, ok := c.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (c *countingConn) CheckNamedValue(nv *driver.NamedValue) error {
	if n, ok := c.Conn.(driver.NamedValueChecker); ok {
		return n.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

type countingTx struct{ driver.Tx }

func (t countingTx) Commit() error {
	record("COMMIT")
	return t.Tx.Commit()
}

func (t countingTx) Rollback() error {
	record("ROLLBACK")
	return t.Tx.Rollback()
}

// dsn: the test database; host, port and user come from the PG* environment (both drivers
// read it).
func dsn(driverName string) string {
	if driverName == "postgres" {
		// lib/pq's binary_parameters: Parse, Bind and Execute in one round trip (without it,
		// a statement with parameters costs two)
		return fmt.Sprintf("dbname=%s sslmode=disable binary_parameters=yes", testDB)
	}
	return fmt.Sprintf("dbname=%s sslmode=disable", testDB)
}

func open(t testing.TB, driverName string) *sql.DB {
	t.Helper()
	db, err := sql.Open("counting-"+driverName, dsn(driverName))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// eachClient runs fn as a subtest per driver, with a Client over the driver's pool.
func eachClient(t *testing.T, fn func(t *testing.T, ctx context.Context, db *sql.DB, c *idempotency.Client)) {
	eachDriver(t, func(t *testing.T, db *sql.DB) { fn(t, context.Background(), db, idempotency.New(db)) })
}

// eachDriver runs fn as a subtest per driver.
func eachDriver(t *testing.T, fn func(t *testing.T, db *sql.DB)) {
	for _, d := range drivers {
		d := d
		t.Run(d, func(t *testing.T) { fn(t, open(t, d)) })
	}
}

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
	for _, q := range []string{
		"DROP DATABASE IF EXISTS " + testDB + " WITH (FORCE)",
		"CREATE DATABASE " + testDB,
		"DROP DATABASE IF EXISTS " + testDB + "_eucjp WITH (FORCE)",
		// a server encoding in which a character's second byte can be a backslash (0x5C)
		"CREATE DATABASE " + testDB + "_eucjp ENCODING 'EUC_JP' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0",
	} {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	eucjp, err := sql.Open("pgx", fmt.Sprintf("dbname=%s_eucjp sslmode=disable", testDB))
	if err != nil {
		return err
	}
	defer eucjp.Close()
	if _, err := eucjp.ExecContext(ctx, "CREATE EXTENSION idempotency"); err != nil {
		return err
	}
	db, err := sql.Open("pgx", dsn("pgx"))
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, `CREATE EXTENSION idempotency;
		CREATE TABLE orders (id bigserial PRIMARY KEY, scope text NOT NULL, key text NOT NULL, item text);
		SELECT idempotency.create_stream('go_stream')`)
	return err
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// countOrders: the orders of a key.
func countOrders(t testing.TB, db *sql.DB, scope, key string) int {
	t.Helper()
	var n int
	must(t, db.QueryRow("SELECT count(*) FROM orders WHERE scope = $1 AND key = $2", scope, key).Scan(&n))
	return n
}
