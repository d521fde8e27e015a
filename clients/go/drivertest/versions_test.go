package drivertest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"testing"

	"github.com/pgidempotency/idempotency/clients/go"
)

// testEdition: the edition the suite runs against (IDEM_EDITION=managed in the managed
// suite, the extension otherwise).
func testEdition() string {
	if e := os.Getenv("IDEM_EDITION"); e != "" {
		return e
	}
	return idempotency.EditionExtension
}

// The edition of the test database, asked once per Client: the second question sends nothing.
func TestEditionDetectedOnceAndCached(t *testing.T) {
	eachDriver(t, func(t *testing.T, db *sql.DB) {
		ctx := context.Background()
		c := idempotency.New(db)
		var e *idempotency.Edition
		first := counting(func() {
			var err error
			e, err = c.Edition(ctx)
			must(t, err)
		})
		if len(first) != 1 {
			t.Fatalf("first question: %q", first)
		}
		if e.Name != testEdition() || e.Version != "0.4.0" || e.InstalledAs != idempotency.InstalledAsExtension {
			t.Fatalf("edition %+v", e)
		}
		if !e.Offers("reserve") || !e.Offers("claim_once") || e.Offers("no_such_function") ||
			e.Offers("reserve_begin") != (e.Name == idempotency.EditionExtension) {
			t.Fatalf("offers: %v", e.Functions)
		}
		again := counting(func() {
			e2, err := c.Edition(ctx)
			must(t, err)
			if e2 != e {
				t.Fatalf("not the cached edition: %+v", e2)
			}
		})
		if len(again) != 0 {
			t.Fatalf("asked again: %q", again)
		}
		refreshed := counting(func() {
			_, err := c.RefreshEdition(ctx)
			must(t, err)
		})
		if len(refreshed) != 1 {
			t.Fatalf("refresh: %q", refreshed)
		}
	})
}

// A database without either edition, and one with the managed edition run as a plain script
// (no pg_extension row: the schema's comment names it).
func TestEditionOfOtherDatabases(t *testing.T) {
	ctx := context.Background()
	admin, err := sql.Open("pgx", "dbname=postgres sslmode=disable")
	must(t, err)
	defer admin.Close()
	script, err := os.ReadFile("../../../editions/managed/idempotency--0.4.0.sql")
	must(t, err)
	for _, name := range []string{"none", "script"} {
		db := testDB + "_edition_" + name
		for _, q := range []string{"DROP DATABASE IF EXISTS " + db + " WITH (FORCE)", "CREATE DATABASE " + db} {
			_, err := admin.ExecContext(ctx, q)
			must(t, err)
		}
		t.Cleanup(func() { _, _ = admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)") })
		conn, err := sql.Open("pgx", fmt.Sprintf("dbname=%s sslmode=disable", db))
		must(t, err)
		defer conn.Close()
		if name == "script" {
			_, err := conn.ExecContext(ctx, string(script))
			must(t, err)
		}
		e, err := idempotency.DetectEdition(ctx, conn)
		must(t, err)
		switch name {
		case "none":
			if e.Name != "" || e.Version != "" || e.InstalledAs != "" || len(e.Functions) != 0 {
				t.Fatalf("none: %+v", e)
			}
		case "script":
			if e.Name != idempotency.EditionManaged || e.Version != "0.4.0" ||
				e.InstalledAs != idempotency.InstalledAsScript || !e.Offers("reserve") || e.Offers("reserve_begin") {
				t.Fatalf("script: %+v", e)
			}
		}
	}
}
