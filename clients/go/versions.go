// The server's edition: the C++ extension or the managed edition (SQL and PL/pgSQL, for
// managed databases that load no library), its version, and what it offers, told by one
// statement (the "edition" statement of test/vectors/statements.json) that raises nothing
// whatever is installed.

package idempotency

import (
	"context"
	"database/sql"
	"sort"
	"strings"
	"sync"
)

// The editions' names (Edition.Name) and how one was installed (Edition.InstalledAs).
const (
	EditionExtension     = "extension" // the C++ extension
	EditionManaged       = "managed"   // the managed edition (SQL and PL/pgSQL)
	InstalledAsExtension = "extension" // CREATE EXTENSION (through pg_tle for the managed edition)
	InstalledAsScript    = "script"    // the managed edition run with psql -f
)

// Edition is what the server offers. Name is EditionExtension, EditionManaged or "" (neither
// is installed in the database); Version is "" when not installed; InstalledAs is
// InstalledAsExtension, InstalledAsScript or ""; Functions are the names of the functions of
// schema idempotency the session may execute, sorted.
type Edition struct {
	Name        string
	Version     string
	InstalledAs string
	Functions   []string
}

// Offers tells whether the server has idempotency.<function> and the session may execute it
// (the managed edition has no reserve_begin, emit or stats; an extension before 0.3.0 no
// claim_once).
func (e *Edition) Offers(function string) bool {
	i := sort.SearchStrings(e.Functions, function)
	return i < len(e.Functions) && e.Functions[i] == function
}

// DetectEdition asks the server of q (a *sql.DB, *sql.Conn or *sql.Tx) for its edition: one
// statement, not cached (Client.Edition caches it).
func DetectEdition(ctx context.Context, q Querier) (*Edition, error) {
	var name, version, installedAs sql.NullString
	var functions string
	noteRoundTrip(ctx)
	if err := q.QueryRowContext(ctx, sqlEdition).Scan(&name, &version, &installedAs, &functions); err != nil {
		return nil, translate(err)
	}
	fs := strings.Fields(functions)
	sort.Strings(fs)
	return &Edition{Name: name.String, Version: version.String, InstalledAs: installedAs.String, Functions: fs}, nil
}

// editionCache holds a Client's edition once known. The lock guards the field only, never the
// question to the server: a caller whose connection hangs holds up no other (callers that
// find nothing cached yet each ask; the last answer stays).
type editionCache struct {
	mu      sync.Mutex
	edition *Edition
}

func (c *editionCache) get(ctx context.Context, q Querier, refresh bool) (*Edition, error) {
	if !refresh {
		c.mu.Lock()
		e := c.edition
		c.mu.Unlock()
		if e != nil {
			return e, nil
		}
	}
	e, err := DetectEdition(ctx, q)
	if err != nil {
		return nil, err // not cached: asked again next time
	}
	c.mu.Lock()
	c.edition = e
	c.mu.Unlock()
	return e, nil
}

// Edition is the edition of the database of c.DB: one statement the first time, cached in c
// from then on (RefreshEdition asks again, after ALTER EXTENSION UPDATE or a move between
// editions).
func (c *Client) Edition(ctx context.Context) (*Edition, error) {
	return c.edition.get(ctx, c.DB, false)
}

// RefreshEdition asks the server again and caches its answer.
func (c *Client) RefreshEdition(ctx context.Context) (*Edition, error) {
	return c.edition.get(ctx, c.DB, true)
}

// offers tells whether the server offers function, asked on conn (a connection the caller
// holds, so that a pool of one connection does not wait for itself) the first time. An error
// of that question says true: the call itself then meets the error and reports it.
func (c *Client) offers(ctx context.Context, conn Querier, function string) bool {
	e, err := c.edition.get(ctx, conn, false)
	return err != nil || e.Offers(function)
}
