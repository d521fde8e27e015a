package drivertest

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

	"github.com/pgidempotency/idempotency/clients/go"
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

// The Go examples of docs/clients-go.md compile and pass go vet against the client: a
// block that is a whole file as it is, a block of declarations with the imports they use.
func TestDocsExamplesCompile(t *testing.T) {
	blocks := goBlocks(t, "../../../docs/clients-go.md")
	if len(blocks) < 3 {
		t.Fatalf("only %d go blocks", len(blocks))
	}
	// Packages of this module, in a folder of its own, built with this module's requirements.
	dir, err := os.MkdirTemp(".", "docs-blocks-")
	must(t, err)
	defer os.RemoveAll(dir)
	var pkgs []string
	for i, b := range blocks {
		if !strings.HasPrefix(b, "package ") {
			b = snippetHeader + b
		}
		pkg := filepath.Join(dir, fmt.Sprintf("block%d", i))
		must(t, os.MkdirAll(pkg, 0o755))
		must(t, os.WriteFile(filepath.Join(pkg, "main.go"), []byte(b), 0o644))
		pkgs = append(pkgs, "./"+pkg)
	}
	out, err := exec.Command("go", append([]string{"vet"}, pkgs...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go vet of the docs' blocks: %v\n%s", err, out)
	}
}
