package idempotency

import (
	"encoding/json"
	"os"
	"testing"
	"time"
)

// Every duration of test/vectors/client.json is sent as the text the spec gives: whole
// microseconds, nothing rounded (a sub-millisecond lease keeps its microseconds).
func TestDurationsAsTheSpecEncodesThem(t *testing.T) {
	text, err := os.ReadFile("../../test/vectors/client.json")
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Duration struct {
			Vectors []struct {
				Microseconds int64  `json:"microseconds"`
				Text         string `json:"text"`
			} `json:"vectors"`
		} `json:"duration"`
	}
	if err := json.Unmarshal(text, &spec); err != nil {
		t.Fatal(err)
	}
	if len(spec.Duration.Vectors) == 0 {
		t.Fatal("no duration vectors")
	}
	for _, v := range spec.Duration.Vectors {
		if got := interval(time.Duration(v.Microseconds) * time.Microsecond); got != v.Text {
			t.Errorf("%d µs: %q, the spec says %q", v.Microseconds, got, v.Text)
		}
	}
	lockTTL, _, _ := ReserveOptions{LockTTL: 1500 * time.Microsecond}.values()
	if lockTTL != "1500 microseconds" {
		t.Errorf("a lease of 1.5 ms is sent as %q", lockTTL)
	}
}
