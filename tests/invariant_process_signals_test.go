package tests

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
)

// runningBy counts the jobs of ids that are running.
func runningBy(t *testing.T, b *testkit.DB, ids []int64) int {
	t.Helper()
	var n int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs
		where id = any($1) and status = 'running'`, ids).Scan(&n))
	return n
}

// enqueueSleeps enqueues n sleep jobs of ms milliseconds each and returns their ids.
func enqueueSleeps(t *testing.T, b *testkit.DB, n int, ms int64) []int64 {
	t.Helper()
	specs := make([]pgrun.JobSpec, n)
	for i := range specs {
		specs[i] = pgrun.JobSpec{Kind: runner.KindSleep, Args: runner.SleepArgs{MS: ms}}
	}
	jobs, err := pgrun.EnqueueMany(b.Ctx, b.Pool, specs)
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
	b := testkit.Setup(t)
	ids := enqueueSleeps(t, b, 6, 600_000)
	p := startWorker(t, b, "--queues", "default=6", "--lease", "2s")
	testkit.Eventually(t, 20*time.Second, "the runner holds all jobs", func() bool { return runningBy(t, b, ids) == len(ids) })

	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGKILL))
	require.Equal(t, 128+int(syscall.SIGKILL), p.Wait(t, 10*time.Second))

	// The survivor runs "sleep" quickly: what matters is that it gets the jobs.
	r := testkit.NewBareRunner(b.Pool, runner.Config{WorkerID: "survivor"})
	testkit.Handle(t, r, runner.KindSleep, func(context.Context, *runner.Job[runner.SleepArgs]) (any, error) {
		return "rerun", nil
	})
	testkit.StartRunner(t, r)
	testkit.Eventually(t, 30*time.Second, "all jobs succeeded elsewhere", func() bool {
		return testkit.CountStatus(t, b, pgrun.StatusSucceeded) == len(ids)
	})
	for _, id := range ids {
		j, err := pgrun.GetJob(b.Ctx, b.Pool, id)
		require.NoError(t, err)
		require.Equal(t, "survivor", *j.ClaimedBy)
		require.Equal(t, 2, j.Attempt, "one claim by the killed runner, one by the survivor")
		require.Equal(t, 1, j.LeaseExpiries)
		require.Equal(t, 0, j.Failures, "a lost lease is not a failed attempt")
		evs, err := pgrun.Events(b.Ctx, b.Pool, id)
		require.NoError(t, err)
		require.NotEmpty(t, evs)
		require.Equal(t, "job.lease_expired_requeue", evs[0].Event)
	}
}

// SIGTERM stops claiming, waits the grace period, then cancels what still runs and
// requeues it without spending an attempt, and the process exits 0.
func TestSigtermRequeuesUnfinishedJobsWithoutSpendingAnAttempt(t *testing.T) {
	b := testkit.Setup(t)
	long := enqueueSleeps(t, b, 3, 600_000)
	p := startWorker(t, b, "--queues", "default=3", "--grace", "300ms")
	testkit.Eventually(t, 20*time.Second, "the runner holds all jobs", func() bool { return runningBy(t, b, long) == len(long) })

	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, p.Wait(t, 20*time.Second))

	for _, id := range long {
		j, err := pgrun.GetJob(b.Ctx, b.Pool, id)
		require.NoError(t, err)
		require.Equal(t, pgrun.StatusQueued, j.Status)
		require.Equal(t, 0, j.Failures, "a shutdown requeue spends no attempt")
		require.Equal(t, 0, j.LeaseExpiries)
		require.Nil(t, j.LeaseExpiresAt)
		evs, err := pgrun.Events(b.Ctx, b.Pool, id)
		require.NoError(t, err)
		require.Len(t, evs, 1)
		require.Equal(t, "job.requeued", evs[0].Event)
	}
	var state string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select state from pgrun.workers`).Scan(&state))
	require.Equal(t, "stopped", state)
}

// Jobs that finish within the grace period complete normally on SIGTERM.
func TestSigtermLetsJobsFinishWithinGrace(t *testing.T) {
	b := testkit.Setup(t)
	ids := enqueueSleeps(t, b, 2, 1500)
	p := startWorker(t, b, "--queues", "default=2", "--grace", "60s")
	testkit.Eventually(t, 20*time.Second, "the runner holds all jobs", func() bool { return runningBy(t, b, ids) == len(ids) })

	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, p.Wait(t, 30*time.Second))
	require.Equal(t, len(ids), testkit.CountStatus(t, b, pgrun.StatusSucceeded))
}

// A second signal exits at once, leaving the jobs to their leases.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	b := testkit.Setup(t)
	ids := enqueueSleeps(t, b, 1, 600_000)
	p := startWorker(t, b, "--queues", "default=1", "--grace", "60s")
	testkit.Eventually(t, 20*time.Second, "the runner holds the job", func() bool { return runningBy(t, b, ids) == 1 })

	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGTERM))
	testkit.Eventually(t, 10*time.Second, "the runner to start stopping", func() bool {
		return strings.Contains(p.Output(), "waiting for in-flight jobs")
	})
	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGINT))
	require.Equal(t, 130, p.Wait(t, 10*time.Second))
	require.Equal(t, pgrun.StatusRunning, testkit.JobStatus(t, b, ids[0]), "left to its lease")
}
