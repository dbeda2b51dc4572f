package tests

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// sqlAgainstPgrun matches SQL that reaches into schema pgrun: a statement keyword
// followed, in the same string, by a name qualified with pgrun. ("select ... from
// pgrun.jobs", "call pgrun.x()"). A Go regexp written to read a SQL file spells the
// dot escaped (`pgrun\.`), so it is not taken for a statement.
var sqlAgainstPgrun = regexp.MustCompile(`(?is)\b(select|insert|update|delete|from|call)\b.*?\bpgrun\.`)

// sqlAllowed are files outside internal/sqlapi that may still hold SQL against
// schema pgrun, each with the reason.
var sqlAllowed = map[string]string{
	// A psql command the demo prints for the user to run: text shown, never sent.
	"cmd/runner/demo_hints.go": "the demo's closing hints print a psql command",
}

// Issue 11: every SQL statement Go sends lives in internal/sqlapi. This walks every
// non-test .go file of the module (examples included; the separate bench/ module
// and internal/sqlapi itself skipped) and fails on any string literal that holds SQL
// against schema pgrun, naming it by file and line. Only string literals count:
// a comment that quotes a statement is documentation.
func TestNoSQLOutsideBinding(t *testing.T) {
	t.Parallel()
	var found []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(repoRoot, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == "." {
				return nil
			}
			if strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "testdata" ||
				rel == "internal/sqlapi" || rel == "internal/testkit" { // testkit: the tests' own helpers, tests aside
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // another module (bench/)
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		if _, ok := sqlAllowed[rel]; ok {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				s = lit.Value
			}
			if m := sqlAgainstPgrun.FindString(s); m != "" {
				pos := fset.Position(lit.Pos())
				found = append(found, rel+":"+strconv.Itoa(pos.Line)+": "+clipSQL(m))
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) > 0 {
		t.Fatalf("SQL against schema pgrun outside internal/sqlapi (move each statement there, issue 11):\n%s",
			strings.Join(found, "\n"))
	}
}

// clipSQL shows the start of a matched statement on one line.
func clipSQL(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 80 {
		s = s[:80] + "..."
	}
	return s
}
