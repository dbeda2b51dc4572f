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
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
	stopPgBouncer()
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

// stopHolding stops one of the runner processes procs (SIGSTOP), the one whose worker
// (workers, in the same order) is first seen holding at least atLeast running jobs,
// and returns its index and how many it holds, so that a SIGKILL after it kills a
// runner with jobs in their handlers: looked at while it ran, its short jobs could
// all finish and be reported between the look and the kill (they did, in a loaded
// CI). A runner found holding too few runs on (SIGCONT) and the next is looked at,
// round and round until timeout. Several candidates, because which runner holds work
// is not the test's to choose: a runner that completes a sequence's head is handed
// its next job, so the runners that started first can keep every sequence.
func stopHolding(t *testing.T, b *testkit.DB, procs []*testkit.Proc, workers []string, atLeast int, timeout time.Duration) (which, held int) {
	t.Helper()
	require.Len(t, workers, len(procs))
	next := 0
	testkit.Eventually(t, timeout, fmt.Sprintf("one of %v holds %d jobs", workers, atLeast), func() bool {
		which, next = next, (next+1)%len(procs)
		p := procs[which]
		require.NoError(t, p.Cmd.Process.Signal(syscall.SIGSTOP))
		held = countRowsTB(t, b, `select count(*) from pgrun.jobs where status = 'running' and claimed_by = $1`, workers[which])
		if held >= atLeast {
			return true
		}
		require.NoError(t, p.Cmd.Process.Signal(syscall.SIGCONT))
		return false
	})
	return which, held
}
