package idempotency

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"io"
	"testing"
	"time"
)

// editionDriver answers the edition statement; a connection of a DSN "hang" waits for release
// (a server that does not answer) before it does.
type editionDriver struct{ release chan struct{} }

type editionConn struct {
	hang    bool
	release chan struct{}
}

type editionRows struct{ done bool }

func (d *editionDriver) Open(dsn string) (driver.Conn, error) {
	return &editionConn{hang: dsn == "hang", release: d.release}, nil
}
func (c *editionConn) Prepare(string) (driver.Stmt, error) { return nil, driver.ErrSkip }
func (c *editionConn) Close() error                        { return nil }
func (c *editionConn) Begin() (driver.Tx, error)           { return nil, driver.ErrSkip }
func (c *editionConn) QueryContext(ctx context.Context, _ string, _ []driver.NamedValue) (driver.Rows, error) {
	if c.hang {
		select {
		case <-c.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return &editionRows{}, nil
}
func (r *editionRows) Columns() []string {
	return []string{"name", "version", "installed_as", "functions"}
}
func (r *editionRows) Close() error { return nil }
func (r *editionRows) Next(dest []driver.Value) error {
	if r.done {
		return io.EOF
	}
	r.done = true
	dest[0], dest[1], dest[2], dest[3] = "extension", "0.3.0", "idempotency", "reserve complete"
	return nil
}

// One caller's question to a server that does not answer holds up no other caller of the
// same cache: the lock is never held across the network.
func TestEditionCacheHoldsNoLockAcrossTheQuestion(t *testing.T) {
	release := make(chan struct{})
	sql.Register("edition-test", &editionDriver{release: release})
	hanging, err := sql.Open("edition-test", "hang")
	if err != nil {
		t.Fatal(err)
	}
	answering, err := sql.Open("edition-test", "answer")
	if err != nil {
		t.Fatal(err)
	}
	var cache editionCache
	first := make(chan error, 1)
	go func() {
		_, err := cache.get(context.Background(), hanging, false)
		first <- err
	}()
	second := make(chan error, 1)
	go func() {
		e, err := cache.get(context.Background(), answering, true)
		if err == nil && !e.Offers("complete") {
			t.Errorf("edition %+v", e)
		}
		second <- err
	}()
	select {
	case err := <-second:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a caller waited for another caller's question to the server")
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if e, err := cache.get(context.Background(), hanging, false); err != nil || e.Version != "0.3.0" {
		t.Fatalf("cached: %+v, %v", e, err)
	}
}
