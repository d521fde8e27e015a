package idempotency

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var spaces = regexp.MustCompile(`\s+`)

// placeholders: $1, $2, ... (a "$" alone, as in a regular expression's end anchor, is none).
var placeholders = regexp.MustCompile(`\$[0-9]+`)

func folded(s string) string { return strings.TrimSpace(spaces.ReplaceAllString(s, " ")) }

// Every statement text of statements.go is the one of test/vectors/statements.json under its
// name, once runs of white space are folded (the placeholders are $n in both).
func TestStatementsMatchTheList(t *testing.T) {
	text, err := os.ReadFile("../../test/vectors/statements.json")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Statements map[string]struct {
			SQL    string     `json:"sql"`
			Params [][]string `json:"params"`
		} `json:"statements"`
	}
	if err := json.Unmarshal(text, &list); err != nil {
		t.Fatal(err)
	}
	if len(listedStatements) < 12 {
		t.Fatalf("only %d statements listed", len(listedStatements))
	}
	for name, sql := range listedStatements {
		listed, ok := list.Statements[name]
		if !ok {
			t.Errorf("%s: not in test/vectors/statements.json", name)
			continue
		}
		if folded(sql) != folded(listed.SQL) {
			t.Errorf("%s:\n client: %s\n listed: %s", name, folded(sql), folded(listed.SQL))
		}
		if n := len(placeholders.FindAllString(sql, -1)); n != len(listed.Params) {
			t.Errorf("%s: %d placeholders, %d parameters listed", name, n, len(listed.Params))
		}
	}
}

// No statement text outside statements.go and statements_gen.go (generated from the spec):
// the package's other files (tests left out) have no string literal that starts like a
// statement.
func TestStatementsInOneFile(t *testing.T) {
	statement := regexp.MustCompile("[\"`]\\s*(SELECT|INSERT|UPDATE|DELETE|BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE|SET|SHOW)\\b")
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range append(files, "pgxv4/pgxv4.go") {
		if strings.HasSuffix(f, "_test.go") || f == "statements.go" || f == "statements_gen.go" {
			continue
		}
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(text), "\n") {
			if code := strings.SplitN(line, "//", 2)[0]; statement.MatchString(code) {
				t.Errorf("%s:%d: a statement text outside statements.go: %s", f, i+1, strings.TrimSpace(line))
			}
		}
	}
}
