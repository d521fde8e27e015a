// The connection layer: the only file that knows how database/sql and its drivers report
// errors and hold a server connection: error translation (a lost connection included), the
// session a helper takes from the pool, and several statements in one round trip through a
// driver's Pipeliner. Every value reaches the server as a bound parameter ($1, $2, ...); no
// value is ever written into a statement's text.

package idempotency

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Querier is what *sql.DB, *sql.Conn and *sql.Tx have in common: the key calls run on any of
// them (on a *sql.Tx, inside the caller's transaction).
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...interface{}) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...interface{}) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...interface{}) *sql.Row
}

// exec runs one statement; errors come out typed (translate).
func exec(ctx context.Context, q Querier, query string, args ...interface{}) error {
	noteRoundTrip(ctx)
	_, err := q.ExecContext(ctx, query, args...)
	return translate(err)
}

// queryRow runs one statement that returns one row and scans it into dest.
func queryRow(ctx context.Context, q Querier, query string, args []interface{}, dest ...interface{}) error {
	noteRoundTrip(ctx)
	return translate(q.QueryRowContext(ctx, query, args...).Scan(dest...))
}

// sqlState is the SQLSTATE of a server error of any driver that says it (pgx's
// *pgconn.PgError and lib/pq's *pq.Error both have SQLState()), or "".
func sqlState(err error) string {
	var s interface{ SQLState() string }
	if errors.As(err, &s) {
		return s.SQLState()
	}
	return ""
}

// serverField reads a string field (Message, Detail, Hint) of a driver's error struct: pgx
// and lib/pq name them alike; other drivers may have none.
func serverField(err error, name string) string {
	var s interface{ SQLState() string }
	if !errors.As(err, &s) {
		return ""
	}
	v := reflect.ValueOf(s)
	for v.Kind() == reflect.Ptr || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return ""
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return ""
	}
	f := v.FieldByName(name)
	if f.IsValid() && f.Kind() == reflect.String {
		return f.String()
	}
	return ""
}

var lostSQLStates = map[string]bool{"57P01": true, "57P02": true, "57P03": true}

// lostCause reports whether err (not one of ours) means the connection is gone: the
// server's class 08 and 57P01-57P03, database/sql's bad and done connections, and the
// network's errors (a reset, a broken pipe, a refused or cut connection, an end of stream).
func lostCause(err error) bool {
	if err == nil {
		return false
	}
	if code := sqlState(err); code != "" {
		return strings.HasPrefix(code, "08") || lostSQLStates[code]
	}
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNABORTED) ||
		errors.Is(err, syscall.ENOENT) || errors.Is(err, net.ErrClosed) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	// drivers that wrap without Unwrap (pgx's "conn closed", lib/pq's "driver: bad connection")
	msg := err.Error()
	for _, s := range []string{"conn closed", "bad connection", "connection reset", "broken pipe",
		"unexpected EOF", "connection refused", "failed to connect", "server closed the connection"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// translate turns a driver's error into the typed errors of errors.go: *Error with the
// server's SQLSTATE for a code the client knows, ErrConnectionLost for a connection that is
// gone; other errors (sql.ErrNoRows, a context's) come out as they are.
func translate(err error) error {
	if err == nil {
		return nil
	}
	var own *Error
	if errors.As(err, &own) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, sql.ErrNoRows) {
		return err
	}
	if lostCause(err) {
		return &Error{Code: CodeConnectionLost, Message: "the connection to the server was lost: " + err.Error(), Err: err}
	}
	code := sqlState(err)
	if code == "" || !knownCodes[code] {
		return err
	}
	msg := serverField(err, "Message")
	if msg == "" {
		msg = err.Error()
	}
	e := &Error{Code: code, Message: msg, Detail: serverField(err, "Detail"), Hint: serverField(err, "Hint"), Err: err}
	if code == CodeTransactionAborted && e.Hint == "" {
		e.Hint = "roll the transaction back before calling the idempotency helpers"
	}
	return e
}

// interval is a duration as the text of a PostgreSQL interval (bound, cast with ::interval).
func interval(d time.Duration) string {
	return fmt.Sprintf("%d %s", d.Microseconds(), durationUnit)
}

// nullable: a nil slice as SQL NULL (drivers send a nil []byte as an empty value).
func nullableBytes(b []byte) interface{} {
	if b == nil {
		return nil
	}
	return b
}

func nullableString(s *string) interface{} {
	if s == nil {
		return nil
	}
	return *s
}

func nullableInt(attempt int) interface{} {
	if attempt <= 0 {
		return nil
	}
	return attempt
}

// session is one server connection taken from the pool for a claim.
type session struct {
	conn       *sql.Conn
	pipeliners []Pipeliner // the client's own (WithPipeliner), before the registered ones
	open       bool        // a transaction is open on it
	bad        bool        // discard it (broken, or its state unknown)
	// background is for the statements sent whether or not the caller is still there (a
	// ROLLBACK, storing an answer), with the round-trip counter of the call (detached)
	background context.Context
}

// release gives the connection back to the pool, or closes it if it is broken or its
// transaction could not be ended (database/sql closes a connection whose Raw returns
// driver.ErrBadConn).
func (s *session) release() {
	if s.bad || s.open {
		_ = s.conn.Raw(func(interface{}) error { return driver.ErrBadConn })
	}
	_ = s.conn.Close()
}

// rollback ends an open transaction; a broken connection gets no statement (the server has
// rolled back on its own).
func (s *session) rollback() {
	if !s.open || s.bad {
		return
	}
	noteRoundTrip(s.background)
	if _, err := s.conn.ExecContext(s.background, sqlRollback); err == nil {
		s.open = false
	} else {
		s.bad = true
	}
}

func (s *session) note(err error) error {
	err = translate(err)
	if IsConnectionLost(err) {
		s.bad = true
	}
	return err
}

func (c *Client) session(ctx context.Context) (*session, error) {
	conn, err := c.DB.Conn(ctx)
	if err != nil {
		if t := translate(err); IsConnectionLost(t) || lostCause(err) {
			return nil, t
		}
		return nil, &Error{Code: CodeConnectionLost, Message: "no connection to the server: " + err.Error(), Err: err}
	}
	return &session{conn: conn, pipeliners: c.pipeliners, background: detached(ctx)}, nil
}

// Statement is one statement of a pipeline: its text and its parameters as text (nil: NULL).
type Statement struct {
	SQL  string
	Args []*string
}

// StatementResult is what one statement of a pipeline returned: its rows, each value as text
// (nil for NULL), and its command tag ("COMMIT", or "ROLLBACK" for a COMMIT of a failed
// transaction).
type StatementResult struct {
	Rows [][][]byte
	Tag  string
}

// Pipeliner sends statements to the server in one round trip (one Sync in the extended
// protocol: the server skips the rest after a failed statement) on a driver's connection, with
// their parameters bound, and returns each statement's result. handled is false for a
// connection of a driver it does not know. database/sql has no such call; an adapter for a
// driver gives one: to a Client (WithPipeliner), or to every client (RegisterPipeliner, which
// the pgxv4 adapter's import does for pgx v4's stdlib driver).
type Pipeliner func(ctx context.Context, driverConn interface{}, statements []Statement) (results []StatementResult, handled bool, err error)

var (
	pipelinersMu sync.RWMutex
	pipeliners   []Pipeliner
)

// RegisterPipeliner adds p, which is tried before those registered earlier: the first that
// handles a connection is used.
func RegisterPipeliner(p Pipeliner) {
	pipelinersMu.Lock()
	defer pipelinersMu.Unlock()
	pipeliners = append([]Pipeliner{p}, pipeliners...)
}

func text(v string) *string { return &v }

// pipeline runs statements on s's connection in one round trip when a Pipeliner handles its
// driver (the client's own first, then the registered ones); ok is false when none does (the
// caller sends them one by one).
func (s *session) pipeline(ctx context.Context, statements []Statement) (rows []StatementResult, ok bool, err error) {
	conn := s.conn
	pipelinersMu.RLock()
	ps := append(append([]Pipeliner(nil), s.pipeliners...), pipeliners...)
	pipelinersMu.RUnlock()
	if len(ps) == 0 {
		return nil, false, nil
	}
	rawErr := conn.Raw(func(driverConn interface{}) error {
		for _, p := range ps {
			r, handled, e := p(ctx, driverConn, statements)
			if handled {
				noteRoundTrip(ctx)
				rows, ok, err = r, true, e
				if e != nil && lostCause(e) {
					return driver.ErrBadConn // database/sql closes the connection
				}
				return nil
			}
		}
		return nil
	})
	if rawErr != nil && err == nil {
		err = rawErr
	}
	return rows, ok, translate(err)
}
