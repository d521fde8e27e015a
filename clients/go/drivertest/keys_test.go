package drivertest

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pgidempotency/idempotency/clients/go"
)

var seq int

// newKey: a key no other test uses.
func newKey(prefix string) string {
	seq++
	return fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano(), seq)
}

func TestKeyLifecycle(t *testing.T) {
	eachDriver(t, func(t *testing.T, db *sql.DB) {
		ctx := context.Background()
		scope, key := "acct_1", newKey("life")
		hash, err := idempotency.Fingerprint([]byte(`{"amount": 100}`))
		must(t, err)
		r, err := idempotency.Reserve(ctx, db, scope, key, hash, idempotency.ReserveOptions{})
		must(t, err)
		if r.Outcome != idempotency.OutcomeNew || r.Attempt != 1 || r.LockedUntil == nil {
			t.Fatalf("reserve: %+v", r)
		}
		// released for a retry: the next reserve is attempt 2
		must(t, idempotency.Fail(ctx, db, scope, key, json.RawMessage(`{"error": "timeout"}`), 1))
		r, err = idempotency.Reserve(ctx, db, scope, key, hash, idempotency.ReserveOptions{})
		must(t, err)
		if r.Outcome != idempotency.OutcomeNew || r.Attempt != 2 {
			t.Fatalf("after fail: %+v", r)
		}
		// a stale holder's calls are refused with IK001
		err = idempotency.Checkpoint(ctx, db, scope, key, "charged", 1)
		if !errors.Is(err, idempotency.ErrStaleAttempt) {
			t.Fatalf("stale checkpoint: %v", err)
		}
		var e *idempotency.Error
		if !errors.As(err, &e) || e.Code != "IK001" || e.Message == "" {
			t.Fatalf("typed: %#v", err)
		}
		must(t, idempotency.Checkpoint(ctx, db, scope, key, "charged", 2))
		must(t, idempotency.Complete(ctx, db, scope, key, 201, json.RawMessage(`{"id": 7}`), 2))
		r, err = idempotency.Reserve(ctx, db, scope, key, hash, idempotency.ReserveOptions{})
		must(t, err)
		if r.Outcome != idempotency.OutcomeReplay || r.StatusCode != 201 || string(r.Response) != `{"id": 7}` {
			t.Fatalf("replay: %+v %s", r, r.Response)
		}
		other, _ := idempotency.Fingerprint([]byte(`{"amount": 200}`))
		r, err = idempotency.Reserve(ctx, db, scope, key, other, idempotency.ReserveOptions{})
		must(t, err)
		if r.Outcome != idempotency.OutcomeMismatch {
			t.Fatalf("mismatch: %+v", r)
		}
		rec, err := idempotency.Lookup(ctx, db, scope, key)
		must(t, err)
		if rec == nil || rec.State != "completed" || rec.StatusCode != 201 || rec.Attempt != 2 ||
			rec.RecoveryPoint == nil || *rec.RecoveryPoint != "charged" || len(rec.RequestHash) != 32 {
			t.Fatalf("lookup: %+v", rec)
		}
		err = idempotency.Complete(ctx, db, scope, key, 500, json.RawMessage(`{}`), 0)
		if !errors.Is(err, idempotency.ErrResultConflict) {
			t.Fatalf("conflicting complete: %v", err)
		}
		existed, err := idempotency.Forget(ctx, db, scope, key)
		must(t, err)
		rec, err = idempotency.Lookup(ctx, db, scope, key)
		must(t, err)
		if !existed || rec != nil {
			t.Fatalf("forget: %v %+v", existed, rec)
		}
	})
}

// Keys, scopes and bodies with quotes, backslashes and non-ASCII reach the server as they
// are (bound parameters), whatever the session's string settings, on a UTF8 server and an
// EUC_JP one. lib/pq always sets client_encoding to UTF8; pgx v4 keeps the server's unless the
// connection string sets it (docs/clients-go.md says so), and is given it here.
func TestValuesAreBound(t *testing.T) {
	eachDriver(t, func(t *testing.T, db *sql.DB) {
		valuesAreBound(t, db)
		name := strings.TrimPrefix(t.Name(), "TestValuesAreBound/")
		eucjp, err := sql.Open("counting-"+name, strings.Replace(dsn(name), "dbname="+testDB, "dbname="+testDB+"_eucjp", 1)+
			" client_encoding=UTF8")
		must(t, err)
		defer eucjp.Close()
		var encoding string
		must(t, eucjp.QueryRow("SHOW server_encoding").Scan(&encoding))
		if encoding != "EUC_JP" {
			t.Fatalf("server_encoding %s", encoding)
		}
		valuesAreBound(t, eucjp)
	})
}

func valuesAreBound(t *testing.T, db *sql.DB) {
	{
		ctx := context.Background()
		conn, err := db.Conn(ctx)
		must(t, err)
		defer conn.Close()
		for _, settings := range []string{
			"SET standard_conforming_strings = off; SET backslash_quote = on",
			"SET standard_conforming_strings = on; SET backslash_quote = off",
		} {
			for _, q := range strings.Split(settings, "; ") {
				_, err := conn.ExecContext(ctx, q)
				must(t, err)
			}
			scope := `o'hara\'); DROP TABLE orders; --`
			key := newKey(`k\'"ソ表`)
			r, err := idempotency.Reserve(ctx, conn, scope, key, nil, idempotency.ReserveOptions{})
			must(t, err)
			if r.Outcome != idempotency.OutcomeNew {
				t.Fatalf("%+v", r)
			}
			must(t, idempotency.Complete(ctx, conn, scope, key, 200, json.RawMessage(`{"s": "\\' ソ"}`), 0))
			var got string
			must(t, conn.QueryRowContext(ctx, "SELECT response->>'s' FROM idempotency.lookup($1, $2)", scope, key).Scan(&got))
			if got != `\' ソ` {
				t.Fatalf("stored %q", got)
			}
		}
	}
}

func TestKeyMalformedBeforeSending(t *testing.T) {
	db := open(t, "pgx")
	ctx := context.Background()
	sent := counting(func() {
		_, err := idempotency.Reserve(ctx, db, "s", strings.Repeat("k", 256), nil, idempotency.ReserveOptions{})
		var m *idempotency.KeyMalformedError
		if !errors.As(err, &m) || m.What != "key" || !errors.Is(err, idempotency.ErrProgramLimitExceeded) {
			t.Fatalf("long key: %v", err)
		}
		_, err = idempotency.ClaimOnce(ctx, db, "", "k", idempotency.ClaimOnceOptions{})
		if !errors.As(err, &m) || m.What != "scope" || !errors.Is(err, idempotency.ErrInvalidParameterValue) {
			t.Fatalf("empty scope: %v", err)
		}
	})
	if len(sent) != 0 {
		t.Fatalf("sent %v", sent)
	}
}

func TestClaimOnceAndStreams(t *testing.T) {
	eachDriver(t, func(t *testing.T, db *sql.DB) {
		ctx := context.Background()
		key := newKey("msg")
		tx, err := db.BeginTx(ctx, nil)
		must(t, err)
		claimed, err := idempotency.ClaimOnce(ctx, tx, "queue", key, idempotency.ClaimOnceOptions{})
		must(t, err)
		if !claimed {
			t.Fatal("first claim_once not claimed")
		}
		// another session, while the first holds the key: IK003
		_, err = idempotency.ClaimOnce(ctx, db, "queue", key, idempotency.ClaimOnceOptions{})
		if !errors.Is(err, idempotency.ErrKeyInProgress) {
			t.Fatalf("IK003: %v", err)
		}
		must(t, tx.Commit())
		claimed, err = idempotency.ClaimOnce(ctx, db, "queue", key, idempotency.ClaimOnceOptions{})
		must(t, err)
		if claimed {
			t.Fatal("redelivery claimed")
		}
		// a UUIDv7 key from 2 days ago, retention 1 day: IK004
		_, err = idempotency.ClaimOnce(ctx, db, "queue", "0190a000-0000-7000-8000-000000000000",
			idempotency.ClaimOnceOptions{Retention: 24 * time.Hour})
		if !errors.Is(err, idempotency.ErrKeyTooOld) {
			t.Fatalf("IK004: %v", err)
		}

		consumer := newKey("consumer")
		for _, c := range []struct {
			pos  int64
			want bool
		}{{5, true}, {5, false}, {4, false}, {9, true}} {
			ok, err := idempotency.Accept(ctx, db, consumer, "p0", idempotency.PositionInt(c.pos))
			must(t, err)
			if ok != c.want {
				t.Fatalf("accept %d: %v", c.pos, ok)
			}
		}
		mark, err := idempotency.Watermark(ctx, db, consumer, "p0")
		must(t, err)
		if mark == nil || mark.Int64() != 9 {
			t.Fatalf("watermark %v", mark)
		}
		u, _ := idempotency.PositionUUID("00000000-0000-0001-0000-000000000002")
		ok, err := idempotency.Accept(ctx, db, consumer, "p1", u)
		must(t, err)
		mark, err = idempotency.Watermark(ctx, db, consumer, "p1")
		must(t, err)
		if !ok || mark.String() != "18446744073709551618" {
			t.Fatalf("uuid watermark %v %v", ok, mark)
		}
		none, err := idempotency.Watermark(ctx, db, consumer, "nothing")
		must(t, err)
		if none != nil {
			t.Fatalf("no watermark: %v", none)
		}

		a, err := idempotency.NextKey(ctx, db, "go_stream")
		must(t, err)
		b, err := idempotency.NextKey(ctx, db, "go_stream")
		must(t, err)
		if b <= a {
			t.Fatalf("next_key %d then %d", a, b)
		}
	})
}
