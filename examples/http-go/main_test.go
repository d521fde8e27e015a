package main

import (
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// The example as docs/clients-go.md runs it: the same request twice is one order, the second
// answer replayed; another body with the key is a 422; no token is a 401.
func TestOrders(t *testing.T) {
	admin, err := sql.Open("pgx", "dbname=postgres")
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	for _, q := range []string{"DROP DATABASE IF EXISTS http_go_example WITH (FORCE)", "CREATE DATABASE http_go_example"} {
		if _, err := admin.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	db, err := sql.Open("pgx", "dbname=http_go_example")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := applySchema(db); err != nil { // as main does at start
		t.Fatal(err)
	}
	srv := httptest.NewServer(Handler(db))
	defer srv.Close()
	key := fmt.Sprintf("example-%d", time.Now().UnixNano())
	send := func(token, body string) (*http.Response, string) {
		req, _ := http.NewRequest("POST", srv.URL+"/orders", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}
	first, body := send("alice-token", `{"item": "widget", "quantity": 2, "client_sent_at": 1}`)
	again, replay := send("alice-token", `{"quantity": 2, "item": "widget", "client_sent_at": 2}`)
	if first.StatusCode != 201 || again.StatusCode != 201 || again.Header.Get("Idempotent-Replayed") != "true" ||
		again.Header.Get("Location") != first.Header.Get("Location") || replay != body || !strings.Contains(replay, `"total_cents":500`) {
		t.Fatalf("first %d %s, again %d %s %v", first.StatusCode, body, again.StatusCode, replay, again.Header)
	}
	var n int
	if err := db.QueryRow("SELECT count(*) FROM orders WHERE idempotency_key = $1", key).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d orders (%v)", n, err)
	}
	if res, _ := send("alice-token", `{"item": "gadget", "quantity": 1}`); res.StatusCode != 422 {
		t.Fatalf("other body: %d", res.StatusCode)
	}
	if res, _ := send("nobody", `{}`); res.StatusCode != 401 {
		t.Fatalf("no token: %d", res.StatusCode)
	}
}
