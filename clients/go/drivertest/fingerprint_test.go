package drivertest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strings"
	"testing"

	"github.com/pgidempotency/idempotency/clients/go"
)

type vector struct {
	Name      string   `json:"name"`
	JSON      string   `json:"json"`
	Exclude   []string `json:"exclude"`
	Canonical *string  `json:"canonical"`
	SHA256    string   `json:"sha256"`
	Error     string   `json:"error"`
}

func loadVectors(t *testing.T) []vector {
	f, err := os.Open("../../../test/vectors/fingerprint.jsonl")
	must(t, err)
	defer f.Close()
	var out []vector
	s := bufio.NewScanner(f)
	s.Buffer(nil, 1<<24)
	for s.Scan() {
		var v vector
		must(t, json.Unmarshal(s.Bytes(), &v))
		out = append(out, v)
	}
	must(t, s.Err())
	return out
}

// Every vector of test/vectors: the canonical form and its SHA-256, or the SQLSTATE.
func TestVectors(t *testing.T) {
	vectors := loadVectors(t)
	if len(vectors) < 100 {
		t.Fatalf("only %d vectors", len(vectors))
	}
	for _, v := range vectors {
		v := v
		t.Run(v.Name, func(t *testing.T) {
			canonical, err := idempotency.CanonicalJSON([]byte(v.JSON), v.Exclude...)
			sum, err2 := idempotency.Fingerprint([]byte(v.JSON), v.Exclude...)
			if v.Error != "" {
				var e *idempotency.Error
				if !errors.As(err, &e) || e.Code != v.Error || !errors.As(err2, &e) || e.Code != v.Error {
					t.Fatalf("want SQLSTATE %s, got %v / %v", v.Error, err, err2)
				}
				return
			}
			must(t, err)
			must(t, err2)
			if v.Canonical != nil && string(canonical) != *v.Canonical {
				t.Fatalf("canonical %q, want %q", canonical, *v.Canonical)
			}
			if hex.EncodeToString(sum) != v.SHA256 {
				t.Fatalf("sha256 %x, want %s", sum, v.SHA256)
			}
		})
	}
}

func TestFingerprintErrorsAreTyped(t *testing.T) {
	_, err := idempotency.Fingerprint([]byte(`{"a":1`))
	if !errors.Is(err, idempotency.ErrInvalidJSON) {
		t.Fatalf("got %v", err)
	}
	_, err = idempotency.Fingerprint([]byte(`{"a":1}`), "a..b")
	if !errors.Is(err, idempotency.ErrInvalidParameterValue) {
		t.Fatalf("got %v", err)
	}
	_, err = idempotency.Fingerprint([]byte(strings.Repeat("[", 1001) + strings.Repeat("]", 1001)))
	if !errors.Is(err, idempotency.ErrProgramLimitExceeded) {
		t.Fatalf("got %v", err)
	}
	// a syntax error anywhere wins over a limit, even far below the nesting limit
	_, err = idempotency.Fingerprint([]byte(strings.Repeat("[", 200000) + "x" + strings.Repeat("]", 200000)))
	if !errors.Is(err, idempotency.ErrInvalidJSON) {
		t.Fatalf("got %v", err)
	}
	_, err = idempotency.FingerprintValue(map[string]interface{}{"a": "\xff"})
	if !errors.Is(err, idempotency.ErrInvalidJSON) {
		t.Fatalf("got %v", err)
	}
}

func TestFingerprintValue(t *testing.T) {
	a, err := idempotency.FingerprintValue(map[string]interface{}{"b": []interface{}{1.5, "x"}, "a": json.Number("1.10")})
	must(t, err)
	b, err := idempotency.Fingerprint([]byte(`{"a": 1.1, "b": [15e-1, "\u0078"]}`))
	must(t, err)
	if !bytes.Equal(a, b) {
		t.Fatalf("%x != %x", a, b)
	}
}

// random JSON texts with the shapes that matter: numbers written every way, escapes,
// characters outside the BMP, duplicate and dotted names, nesting.
func randomJSON(r *rand.Rand, depth int) string {
	names := []string{"a", "b", "a.b", "é", "\\u00e9", "😀", "\\uffff", "", "A", "sent_at", "z\\n"}
	switch k := r.Intn(9); {
	case depth > 3 || k < 3:
		switch r.Intn(6) {
		case 0:
			return fmt.Sprintf("%d", r.Int63n(1<<62)-(1<<61))
		case 1:
			return fmt.Sprintf("%d.%d0e%d", r.Intn(1000), r.Intn(1000), r.Intn(40)-20)
		case 2:
			return `"` + names[r.Intn(len(names))] + ` \" \\ \t \u0001 ☃"`
		case 3:
			return []string{"true", "false", "null"}[r.Intn(3)]
		case 4:
			return "-0.000"
		default:
			return fmt.Sprintf("%v", r.NormFloat64()*1e6)
		}
	case k < 6:
		n := r.Intn(4)
		parts := make([]string, n)
		for i := range parts {
			parts[i] = randomJSON(r, depth+1)
		}
		return "[ " + strings.Join(parts, " ,") + "]"
	default:
		n := r.Intn(5)
		parts := make([]string, n)
		for i := range parts {
			parts[i] = `"` + names[r.Intn(len(names))] + `" : ` + randomJSON(r, depth+1)
		}
		return "{" + strings.Join(parts, ",\n") + "}"
	}
}

// Random bodies and exclude lists: the client's fingerprint equals the server's.
func TestFingerprintMatchesServer(t *testing.T) {
	db := open(t, "pgx")
	r := rand.New(rand.NewSource(45))
	ctx := context.Background()
	excludes := [][]string{nil, {"a"}, {"a.b"}, {"sent_at", "b.a"}, {"é"}}
	for i := 0; i < 300; i++ {
		text := randomJSON(r, 0)
		exclude := excludes[r.Intn(len(excludes))]
		mine, err := idempotency.Fingerprint([]byte(text), exclude...)
		must(t, err)
		var server []byte
		if err := db.QueryRowContext(ctx, "SELECT idempotency.fingerprint($1::jsonb, $2::text[])",
			text, "{"+strings.Join(quoteAll(exclude), ",")+"}").Scan(&server); err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		if !bytes.Equal(mine, server) {
			c, _ := idempotency.CanonicalJSON([]byte(text), exclude...)
			t.Fatalf("body %s exclude %v: client %x (%s), server %x", text, exclude, mine, c, server)
		}
	}
}

// quoteAll: array elements as a text[] literal's, for the bound parameter $2.
func quoteAll(items []string) []string {
	out := make([]string, len(items))
	for i, s := range items {
		out[i] = `"` + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), `"`, `\"`) + `"`
	}
	return out
}
