package batch_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"
)

// Every outcome code of package sched is listed where users look: the
// README's table and this package's documentation (go doc).
func TestEveryCodeDocumented(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "../outcome.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Values) != 1 {
			return true
		}
		if id, ok := vs.Type.(*ast.Ident); ok && id.Name == "Code" {
			if lit, ok := vs.Values[0].(*ast.BasicLit); ok {
				s, _ := strconv.Unquote(lit.Value)
				codes = append(codes, s)
			}
		}
		return true
	})
	if len(codes) < 10 {
		t.Fatalf("found %d codes in sched/outcome.go: %v", len(codes), codes)
	}
	for _, doc := range []string{"../../README.md", "batch.go"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range codes {
			if !strings.Contains(string(b), c) {
				t.Errorf("%s does not list the code %s", doc, c)
			}
		}
	}
}
