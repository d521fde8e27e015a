package idempotency_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// goBlocks: the ```go blocks of a Markdown page, but those marked as fragments.
func goBlocks(t *testing.T, path string) []string {
	text, err := os.ReadFile(path)
	must(t, err)
	var blocks []string
	lines := strings.Split(string(text), "\n")
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```go" {
			continue
		}
		fragment := i > 0 && strings.HasPrefix(lines[i-1], "<!-- fragment")
		var b strings.Builder
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			b.WriteString(lines[i] + "\n")
		}
		if !fragment {
			blocks = append(blocks, b.String())
		}
	}
	return blocks
}

const snippetHeader = `package snippet

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"idempotency"
)

var (
	_ = context.Background
	_ sql.DB
	_ json.RawMessage
	_ = fmt.Sprintf
	_ = time.Now
	_ = idempotency.New
)

`

// The Go examples of docs/clients-go.md compile and pass go vet against this package: a
// block that is a whole file as it is, a block of declarations with the imports they use.
func TestDocsExamplesCompile(t *testing.T) {
	if os.Getenv("GO111MODULE") != "off" || os.Getenv("GOPATH") == "" {
		t.Skip("builds in GOPATH mode, as scripts/test.sh's go suite runs it")
	}
	blocks := goBlocks(t, "../../docs/clients-go.md")
	if len(blocks) < 3 {
		t.Fatalf("only %d go blocks", len(blocks))
	}
	src := filepath.Join(filepath.SplitList(os.Getenv("GOPATH"))[0], "src")
	dir, err := os.MkdirTemp(src, "idempotency-docs-")
	must(t, err)
	defer os.RemoveAll(dir)
	// GOPATH mode resolves a major-version import path (github.com/labstack/echo/v4) only from
	// code under a go.mod ("minimal module compatibility")
	must(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module idempotency-docs\n"), 0o644))
	var pkgs []string
	for i, b := range blocks {
		if !strings.HasPrefix(b, "package ") {
			b = snippetHeader + b
		}
		pkg := filepath.Join(dir, fmt.Sprintf("block%d", i))
		must(t, os.MkdirAll(pkg, 0o755))
		must(t, os.WriteFile(filepath.Join(pkg, "main.go"), []byte(b), 0o644))
		pkgs = append(pkgs, strings.TrimPrefix(pkg, src+"/"))
	}
	out, err := exec.Command("go", append([]string{"vet"}, pkgs...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go vet of the docs' blocks: %v\n%s", err, out)
	}
}
