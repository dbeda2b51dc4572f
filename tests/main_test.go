// Package tests holds pgrun's integration and invariant tests against a real
// PostgreSQL server, one file per concern named after sql/functions
// (claim_*, transitions_*, leases_*, dag_*, ...); invariants in
// invariant_<concern>_*_test.go; tests that drive the `runner` binary (signals, exit
// codes, its logs) in process_*_test.go and invariant_process_*. Each test gets its
// own database, cloned from a migrated template (internal/testdb); the helpers are
// internal/testkit's. The Go runner's own behaviour is tested beside it, in runner/.
package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/pgrun/pgrun/internal/testkit"
)

// runnerBin is the `runner` command built once for the tests that drive it as a
// user would (signals, exit codes).
var runnerBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pgrun-tests-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	runnerBin = filepath.Join(dir, "runner")
	build := exec.Command("go", "build", "-o", runnerBin, "../cmd/runner")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building cmd/runner:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// startWorker starts `runner work` against the test's database.
func startWorker(t *testing.T, b *testkit.DB, args ...string) *testkit.Proc {
	t.Helper()
	return startWorkerURL(t, b.URL, args...)
}

// startWorkerURL starts `runner work` against the database at dbURL, with the example
// handlers the tests' jobs use (--examples).
func startWorkerURL(t *testing.T, dbURL string, args ...string) *testkit.Proc {
	t.Helper()
	return testkit.StartProc(t, "runner", exec.Command(runnerBin, append([]string{"work", "--examples", "--database-url", dbURL}, args...)...))
}
