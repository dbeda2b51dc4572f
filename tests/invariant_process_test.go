package tests

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/runner"
)

// proc is a `runner work` process under test.
type proc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	logs bytes.Buffer
	done chan error
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.Write(b)
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// startWorker starts `runner work` against the test's database.
func startWorker(t *testing.T, b *bundle, args ...string) *proc {
	t.Helper()
	return startWorkerURL(t, b.url, args...)
}

// startWorkerURL starts `runner work` against the database at dbURL, with the example
// handlers the tests' jobs use (--examples).
func startWorkerURL(t *testing.T, dbURL string, args ...string) *proc {
	t.Helper()
	return startProc(t, "runner", exec.Command(runnerBin, append([]string{"work", "--examples", "--database-url", dbURL}, args...)...))
}

// startProc starts cmd, collecting its output, and kills it at test end (printing its
// output if the test failed).
func startProc(t *testing.T, name string, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{cmd: cmd, done: make(chan error, 1)}
	p.cmd.Stdout, p.cmd.Stderr = p, p
	require.NoError(t, p.cmd.Start())
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("%s output:\n%s", name, p.output())
		}
	})
	return p
}

// wait returns the process's exit code, failing the test if it does not exit within d.
func (p *proc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err // keep it for Cleanup
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if st, ok := ee.Sys().(syscall.WaitStatus); ok && st.Signaled() {
				return 128 + int(st.Signal())
			}
			return ee.ExitCode()
		}
		require.NoError(t, err)
		return 0
	case <-time.After(d):
		t.Fatalf("runner did not exit within %s", d)
		return -1
	}
}

// runningBy counts jobs running under worker ids that start with prefix.
func runningBy(t *testing.T, b *bundle, ids []int64) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, `select count(*) from pgrun.jobs
		where id = any($1) and status = 'running'`, ids).Scan(&n))
	return n
}

func enqueueSleeps(t *testing.T, b *bundle, n int, ms int64) []int64 {
	t.Helper()
	specs := make([]pgrun.JobSpec, n)
	for i := range specs {
		specs[i] = pgrun.JobSpec{Kind: runner.KindSleep, Args: runner.SleepArgs{MS: ms}}
	}
	jobs, err := pgrun.EnqueueMany(b.ctx, b.pool, specs)
	require.NoError(t, err)
	ids := make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	return ids
}

// A runner killed with SIGKILL mid-job loses nothing: once its leases run out the
// reaper requeues the jobs, another runner runs them, and they succeed.
func TestKilledRunnerJobsRunElsewhereAndSucceed(t *testing.T) {
	b := setup(t)
	ids := enqueueSleeps(t, b, 6, 600_000)
	p := startWorker(t, b, "--queues", "default=6", "--lease", "2s")
	eventually(t, 20*time.Second, "the runner holds all jobs", func() bool { return runningBy(t, b, ids) == len(ids) })

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	require.Equal(t, 128+int(syscall.SIGKILL), p.wait(t, 10*time.Second))

	// The survivor runs "sleep" quickly: what matters is that it gets the jobs.
	r := newBareRunner(b.pool, runner.Config{WorkerID: "survivor"})
	handle(t, r, runner.KindSleep, func(context.Context, *runner.Job[runner.SleepArgs]) (any, error) {
		return "rerun", nil
	})
	startRunner(t, r)
	eventually(t, 30*time.Second, "all jobs succeeded elsewhere", func() bool {
		return countStatus(t, b, pgrun.StatusSucceeded) == len(ids)
	})
	for _, id := range ids {
		j, err := pgrun.GetJob(b.ctx, b.pool, id)
		require.NoError(t, err)
		require.Equal(t, "survivor", *j.ClaimedBy)
		require.Equal(t, 2, j.Attempt, "one claim by the killed runner, one by the survivor")
		require.Equal(t, 1, j.LeaseExpiries)
		require.Equal(t, 0, j.Failures, "a lost lease is not a failed attempt")
		evs, err := pgrun.Events(b.ctx, b.pool, id)
		require.NoError(t, err)
		require.NotEmpty(t, evs)
		require.Equal(t, "job.lease_expired_requeue", evs[0].Event)
	}
}

// SIGTERM stops claiming, waits the grace period, then cancels what still runs and
// requeues it without spending an attempt, and the process exits 0.
func TestSigtermRequeuesUnfinishedJobsWithoutSpendingAnAttempt(t *testing.T) {
	b := setup(t)
	long := enqueueSleeps(t, b, 3, 600_000)
	p := startWorker(t, b, "--queues", "default=3", "--grace", "300ms")
	eventually(t, 20*time.Second, "the runner holds all jobs", func() bool { return runningBy(t, b, long) == len(long) })

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, p.wait(t, 20*time.Second))

	for _, id := range long {
		j, err := pgrun.GetJob(b.ctx, b.pool, id)
		require.NoError(t, err)
		require.Equal(t, pgrun.StatusQueued, j.Status)
		require.Equal(t, 0, j.Failures, "a shutdown requeue spends no attempt")
		require.Equal(t, 0, j.LeaseExpiries)
		require.Nil(t, j.LeaseExpiresAt)
		evs, err := pgrun.Events(b.ctx, b.pool, id)
		require.NoError(t, err)
		require.Len(t, evs, 1)
		require.Equal(t, "job.requeued", evs[0].Event)
	}
	var state string
	require.NoError(t, b.pool.QueryRow(b.ctx, `select state from pgrun.workers`).Scan(&state))
	require.Equal(t, "stopped", state)
}

// Jobs that finish within the grace period complete normally on SIGTERM.
func TestSigtermLetsJobsFinishWithinGrace(t *testing.T) {
	b := setup(t)
	ids := enqueueSleeps(t, b, 2, 1500)
	p := startWorker(t, b, "--queues", "default=2", "--grace", "60s")
	eventually(t, 20*time.Second, "the runner holds all jobs", func() bool { return runningBy(t, b, ids) == len(ids) })

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, p.wait(t, 30*time.Second))
	require.Equal(t, len(ids), countStatus(t, b, pgrun.StatusSucceeded))
}

// A second signal exits at once, leaving the jobs to their leases.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	b := setup(t)
	ids := enqueueSleeps(t, b, 1, 600_000)
	p := startWorker(t, b, "--queues", "default=1", "--grace", "60s")
	eventually(t, 20*time.Second, "the runner holds the job", func() bool { return runningBy(t, b, ids) == 1 })

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	eventually(t, 10*time.Second, "the runner to start stopping", func() bool {
		return strings.Contains(p.output(), "waiting for in-flight jobs")
	})
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	require.Equal(t, 130, p.wait(t, 10*time.Second))
	require.Equal(t, pgrun.StatusRunning, jobStatus(t, b, ids[0]), "left to its lease")
}
