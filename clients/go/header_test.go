package idempotency_test

import (
	"encoding/json"
	"errors"
	"os"
	"testing"

	idempotency "github.com/pgidempotency/idempotency/clients/go"
)

// The Idempotency-Key header, against test/vectors/idempotency_key.json, which every client's
// tests check.
func TestIdempotencyKeyVectors(t *testing.T) {
	text, err := os.ReadFile("../../test/vectors/idempotency_key.json")
	must(t, err)
	var v struct {
		Keys []struct {
			Name   string  `json:"name"`
			Header *string `json:"header"`
			Key    string  `json:"key"`
			Error  string  `json:"error"`
		} `json:"keys"`
	}
	must(t, json.Unmarshal(text, &v))
	if len(v.Keys) < 10 {
		t.Fatalf("idempotency_key.json has %d vectors", len(v.Keys))
	}
	for _, c := range v.Keys {
		header := ""
		if c.Header != nil {
			header = *c.Header
		}
		key, err := idempotency.ParseIdempotencyKey(header)
		var he *idempotency.KeyHeaderError
		switch {
		case c.Error == "" && err != nil:
			t.Errorf("%s: %q: %v, want the key %q", c.Name, header, err, c.Key)
		case c.Error == "" && key != c.Key:
			t.Errorf("%s: %q: the key %q, want %q", c.Name, header, key, c.Key)
		case c.Error != "" && !errors.As(err, &he):
			t.Errorf("%s: %q: the key %q (%v), want %s", c.Name, header, key, err, c.Error)
		case c.Error != "" && he.Code != c.Error:
			t.Errorf("%s: %q: %s, want %s", c.Name, header, he.Code, c.Error)
		}
	}
}
