package idempotency

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// The edition statement is the one test/vectors/statements.json lists, white space folded.
func TestEditionStatementIsTheListedOne(t *testing.T) {
	text, err := os.ReadFile("../../test/vectors/statements.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Statements map[string]struct{ SQL string } `json:"statements"`
	}
	if err := json.Unmarshal(text, &file); err != nil {
		t.Fatal(err)
	}
	fold := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	listed, ok := file.Statements["edition"]
	if !ok {
		t.Fatal("no statement \"edition\" in test/vectors/statements.json")
	}
	if got := fold(sqlEdition); got != listed.SQL {
		t.Fatalf("the edition statement differs from the listed one:\n%s\n%s", got, listed.SQL)
	}
}
