package runner_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testdb"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
)

// The timeout rule is the SQL one, for a Go handler as for any worker: past its
// timeout with no sign of life within the stall window, maintain() fails the
// attempt (class timeout) and the handler's context is cancelled with ErrTimeout.
// The runner itself puts no deadline on the handler.
func TestHandlerTimeoutFailsTheAttempt(t *testing.T) {
	b := testkit.Setup(t)
	var cause atomic.Value
	r := testkit.NewRunner(b.Pool, runner.Config{MaintenanceInterval: -1})
	testkit.Handle(t, r, "slow", func(ctx context.Context, _ *runner.Job[struct{}]) (any, error) {
		<-ctx.Done()
		cause.Store(context.Cause(ctx))
		return nil, ctx.Err()
	})
	testkit.StartRunner(t, r)
	job, err := pgrun.Enqueue(b.Ctx, b.Pool, "slow", nil, pgrun.Timeout(200*time.Millisecond), pgrun.MaxAttempts(1))
	require.NoError(t, err)
	testkit.Eventually(t, 10*time.Second, "the job failed", func() bool {
		_, err := b.Pool.Exec(b.Ctx, `select pgrun.maintain(stall_window => '0')`)
		require.NoError(t, err)
		return testkit.JobStatus(t, b, job.ID) == pgrun.StatusFailed
	})
	j, err := pgrun.GetJob(b.Ctx, b.Pool, job.ID)
	require.NoError(t, err)
	require.Contains(t, string(j.Error), `"class": "timeout"`)
	testkit.Eventually(t, 5*time.Second, "handler cancelled", func() bool { return cause.Load() != nil })
	require.ErrorIs(t, cause.Load().(error), runner.ErrTimeout)
}

// A Go handler that keeps beating past its timeout is spared, as a worker in any
// other language would be: the runner puts no deadline of its own on it.
func TestBeatingHandlerPastItsTimeoutIsSpared(t *testing.T) {
	b := testkit.Setup(t)
	release := make(chan struct{})
	r := testkit.NewRunner(b.Pool, runner.Config{MaintenanceInterval: -1, Lease: time.Second})
	testkit.Handle(t, r, "beating", func(ctx context.Context, j *runner.Job[struct{}]) (any, error) {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-release:
				return "done", nil
			case <-tick.C:
				j.Beat()
			}
		}
	})
	testkit.StartRunner(t, r)
	job, err := pgrun.Enqueue(b.Ctx, b.Pool, "beating", nil, pgrun.Timeout(100*time.Millisecond), pgrun.MaxAttempts(1))
	require.NoError(t, err)
	// Past the timeout, maintain() rounds spare it while its beats arrive (renewals
	// carry them every third of the 1 s lease).
	testkit.Eventually(t, 10*time.Second, "a beat recorded after the timeout", func() bool {
		var late bool
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select coalesce(heartbeat_at > started_at + timeout, false)
			from pgrun.jobs where id = $1`, job.ID).Scan(&late))
		return late
	})
	for range 3 {
		_, err := b.Pool.Exec(b.Ctx, `select pgrun.maintain(stall_window => '30 seconds')`)
		require.NoError(t, err)
		require.Equal(t, pgrun.StatusRunning, testkit.JobStatus(t, b, job.ID))
	}
	close(release)
	testkit.Eventually(t, 10*time.Second, "the job succeeded", func() bool { return testkit.JobStatus(t, b, job.ID) == pgrun.StatusSucceeded })
}

// A job whose lease this runner no longer holds (reclaimed elsewhere) has its
// handler's context cancelled with ErrLeaseLost at the next renewal.
func TestLostLeaseCancelsTheHandler(t *testing.T) {
	b := testkit.Setup(t)
	started, cause := runLongJob(t, b, time.Second)
	id := started.ID
	// Another worker has taken the job over (as after a lease expiry and re-claim).
	_, err := b.Pool.Exec(b.Ctx, `update pgrun.jobs set claimed_by = 'someone-else', attempt = attempt + 1 where id = $1`, id)
	require.NoError(t, err)
	testkit.Eventually(t, 5*time.Second, "handler cancelled", func() bool { return cause.Load() != nil })
	require.True(t, errors.Is(cause.Load().(error), runner.ErrLeaseLost))
	j, err := pgrun.GetJob(b.Ctx, b.Pool, id)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusRunning, j.Status, "the runner reports nothing for a job it lost")
	require.Equal(t, "someone-else", *j.ClaimedBy)
}

// The runner rides out its database connections being killed: claims, completions
// and the listener reconnect, and every job still succeeds exactly once.
func TestRunnerSurvivesKilledConnections(t *testing.T) {
	b := testkit.Setup(t)
	var runs atomic.Int64
	// The runner gets a pool of its own, named so that only its sessions are killed.
	victim := testdb.PoolFor(t, b.URL+"&application_name=victim")
	r := testkit.NewRunner(victim, runner.Config{})
	testkit.Handle(t, r, "counted", func(context.Context, *runner.Job[struct{}]) (any, error) {
		runs.Add(1)
		return nil, nil
	})
	testkit.StartRunner(t, r)
	const jobs = 300
	for i := range jobs {
		_, err := pgrun.Enqueue(b.Ctx, b.Pool, "counted", nil)
		require.NoError(t, err)
		if i%100 == 50 {
			// Kill the runner's sessions: its pool, its listener and its
			// maintenance connection.
			testkit.Eventually(t, 10*time.Second, "the runner's sessions to kill", func() bool {
				var killed int
				require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(pg_terminate_backend(pid)) from pg_stat_activity
					where datname = current_database() and application_name = 'victim'`).Scan(&killed))
				return killed > 0
			})
		}
	}
	testkit.Eventually(t, 60*time.Second, "all jobs succeeded", func() bool { return testkit.CountStatus(t, b, pgrun.StatusSucceeded) == jobs })
	require.EqualValues(t, jobs, runs.Load(), "no job ran twice")
}

// A cancel hint about a job this runner runs under the same worker id and attempt
// number, but another claim (an asynchronous failover undid the claim and the job was
// claimed again), stops the handler at once: the claim token tells the two apart,
// where the attempt number cannot.
func TestCancelHintForAnotherClaimStopsTheHandler(t *testing.T) {
	b := testkit.Setup(t)
	j, cause := runLongJob(t, b, time.Hour)
	require.False(t, j.ClaimID.IsZero())
	// The same worker and attempt, another claim; no renewal comes within the test.
	_, err := b.Pool.Exec(b.Ctx, `update pgrun.jobs set claim_id = gen_random_uuid() where id = $1`, j.ID)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.Ctx, `select pg_notify('pgrun_cancel', $1::bigint || ':' || $2::int)`, j.ID, j.Attempt)
	require.NoError(t, err)
	testkit.Eventually(t, 5*time.Second, "handler cancelled", func() bool { return cause.Load() != nil })
	require.True(t, errors.Is(cause.Load().(error), runner.ErrLeaseLost))
}

// runLongJob starts a runner (worker id "mine", the given lease, no maintenance) whose
// one "long" job runs until its context is cancelled, and returns the job once it
// runs, and where the cancellation's cause is stored. The job is enqueued once the
// runner hears cancel notifications (testkit.CancelProbe).
func runLongJob(t *testing.T, b *testkit.DB, lease time.Duration) (*pgrun.Job, *atomic.Value) {
	t.Helper()
	started := make(chan *pgrun.Job, 1)
	cause := new(atomic.Value)
	r := testkit.NewRunner(b.Pool, runner.Config{WorkerID: "mine", Lease: lease, MaintenanceInterval: -1})
	hearsCancels := testkit.CancelProbe(t, b, r)
	testkit.Handle(t, r, "long", func(ctx context.Context, j *runner.Job[struct{}]) (any, error) {
		started <- j.Job
		<-ctx.Done()
		cause.Store(context.Cause(ctx))
		return nil, ctx.Err()
	})
	testkit.StartRunner(t, r)
	hearsCancels()
	_, err := pgrun.Enqueue(b.Ctx, b.Pool, "long", nil)
	require.NoError(t, err)
	return <-started, cause
}
