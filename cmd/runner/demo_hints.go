package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// demoHints is what the demo prints at its end: the database it used and commands
// to look around with, each complete on its own line so that it works when pasted
// into the user's own shell. (`make demo` sets PGRUN_DATABASE_URL for its own
// command only, so a hint relying on it would fail in the user's shell.) runner is
// how to invoke this program there (runnerCommand). The runner commands come
// first; the run's view in SQL follows, for a client in another language.
func demoHints(dbURL string, runID int64, runner string) string {
	u := shellQuote(dbURL)
	var b strings.Builder
	fmt.Fprintf(&b, "\nDatabase: %s\n", dbURL)
	where := ""
	if strings.HasPrefix(runner, "go run ") {
		where = " (from the repository root)"
	}
	fmt.Fprintf(&b, "Look around, in your own shell%s:\n", where)
	fmt.Fprintf(&b, "  %s --database-url %s workflow status %d\n", runner, u, runID)
	fmt.Fprintf(&b, "  %s --database-url %s status\n", runner, u)
	fmt.Fprintf(&b, "  %s --database-url %s top\n", runner, u)
	fmt.Fprintf(&b, "Or once for the shell: export PGRUN_DATABASE_URL=%s\n", u)
	b.WriteString("The run from SQL, in psql or any client:\n")
	fmt.Fprintf(&b, "  psql %s -c 'select * from pgrun.run_status where run_id = %d'\n", u, runID)
	return b.String()
}

// runnerCommand is how the user runs this program from their shell: "go run
// ./cmd/runner" when it was started by go run (its executable is a temporary
// build), its name when that is what PATH finds, else its absolute path.
func runnerCommand() string {
	exe, err := os.Executable()
	if err != nil {
		return "go run ./cmd/runner"
	}
	if strings.Contains(exe, string(filepath.Separator)+"go-build") {
		return "go run ./cmd/runner"
	}
	name := filepath.Base(os.Args[0])
	if found, err := exec.LookPath(name); err == nil && os.Args[0] == name {
		if same(found, exe) {
			return name
		}
	}
	return shellQuote(exe)
}

// same reports whether paths a and b name the same file.
func same(a, b string) bool {
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}

// shellQuote quotes s for a POSIX shell: as is when it holds only safe characters,
// else in single quotes.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:@%+=,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
