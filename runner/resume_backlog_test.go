package runner_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
)

// The runner resumes its claims after the last key it claimed, and a notification
// naming a lower key makes it scan from the start: a job enqueued while a backlog
// burns down, sorting before the runner's key, starts before the backlog is done.
//
// The backlog must still be there when the early job is enqueued, however the
// machine schedules the test: past its first hundred jobs the backlog waits at a gate
// that opens once the early job is in. And the runner must be listening by then, so
// that what brings it back is the notification (or, if its listener connects later,
// the listener's scan from the start on connecting).
func TestRunnerFindsJobsEnqueuedBelowItsKey(t *testing.T) {
	b := testkit.Setup(t)
	specs := make([]pgrun.JobSpec, 5000)
	for i := range specs {
		specs[i] = pgrun.JobSpec{Kind: "slowish", Queue: "resume", Priority: 1}
	}
	_, err := pgrun.EnqueueMany(b.Ctx, b.Pool, specs)
	require.NoError(t, err)

	var probeClaims atomic.Int32
	r := testkit.NewRunner(b.Pool, runner.Config{
		Queues:       map[string]runner.QueueConfig{"resume": {Workers: 4}, "probe": {Workers: 1}},
		PollInterval: time.Hour, // no poll: only the notification can bring the runner back
		Hooks: []runner.Hooks{{OnClaim: func(e runner.ClaimEvent) {
			if e.Queue == "probe" {
				probeClaims.Add(1)
			}
		}}},
	})
	gate := make(chan struct{}) // closed once the early job is enqueued
	var ran atomic.Int32
	testkit.Handle(t, r, "slowish", func(ctx context.Context, j *runner.Job[struct{}]) (any, error) {
		if ran.Add(1) > 100 {
			select {
			case <-gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		// A little work per job, so that the backlog lasts a while.
		deadline := time.Now().Add(time.Millisecond)
		for time.Now().Before(deadline) {
		}
		return nil, nil
	})
	testkit.StartRunner(t, r)
	listening(t, b, &probeClaims)
	testkit.Eventually(t, 30*time.Second, "the runner to be into the backlog", func() bool {
		return testkit.CountStatus(t, b, pgrun.StatusSucceeded) >= 100
	})
	// Sorts before everything left: the same priority, a run_at an hour ago.
	early, err := pgrun.Enqueue(b.Ctx, b.Pool, "slowish", nil, pgrun.Queue("resume"), pgrun.Priority(1),
		pgrun.RunAt(time.Now().Add(-time.Hour)))
	require.NoError(t, err)
	close(gate)
	// Jobs of one claim share its started_at, and the claim that took the early job
	// may have taken many backlog jobs with it; those claimed after it may not have
	// started when it finishes. So the count is taken once everything has run: had the
	// early job waited for the whole backlog, no backlog job would start after it.
	testkit.Eventually(t, 60*time.Second, "the early job and the backlog to finish", func() bool {
		return testkit.CountStatus(t, b, pgrun.StatusSucceeded) >= len(specs)+2 // and the probe
	})
	var queuedWhenItStarted int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs b, pgrun.jobs e
		where e.id = $1 and b.queue = 'resume' and b.id <> e.id and b.started_at > e.started_at`, early.ID).Scan(&queuedWhenItStarted))
	require.Greater(t, queuedWhenItStarted, 0, "the early job waited for the whole backlog")
}

// listening waits until a runner that never polls has LISTENed on pgrun_jobs: it
// serves queue probe, whose claims probeClaims counts (runner.Hooks.OnClaim). Once
// the probe fetcher's first claim has come back (empty) it claims again only when
// woken, by a notification or by its listener connecting, so a job enqueued in probe
// after that claim runs only once the runner listens.
func listening(t *testing.T, b *testkit.DB, probeClaims *atomic.Int32) {
	t.Helper()
	testkit.Eventually(t, 30*time.Second, "the probe queue's first claim", func() bool { return probeClaims.Load() > 0 })
	probe, err := pgrun.Enqueue(b.Ctx, b.Pool, runner.KindNoop, nil, pgrun.Queue("probe"))
	require.NoError(t, err)
	testkit.Eventually(t, 30*time.Second, "the runner to listen (its probe job to run)", func() bool {
		return testkit.JobStatus(t, b, probe.ID) == pgrun.StatusSucceeded
	})
}

// A job that is queued below the runner's key without a notification naming it (a
// notification lost, a row written with triggers off) is found by the sweep that
// every resumeEvery-th poll sends from the queue's start: the claims after the key
// never reach it.
func TestSweepFindsAJobMissedBelowTheKey(t *testing.T) {
	b := testkit.Setup(t)
	var probeClaims atomic.Int32
	r := testkit.NewRunner(b.Pool, runner.Config{
		Queues:       map[string]runner.QueueConfig{"resume": {Workers: 4}, "probe": {Workers: 1}},
		PollInterval: runner.MinPollInterval,
		Hooks: []runner.Hooks{{OnClaim: func(e runner.ClaimEvent) {
			if e.Queue == "probe" {
				probeClaims.Add(1)
			}
		}}},
	})
	testkit.StartRunner(t, r)
	// Listening already: its listener's first connection drops every key (what was
	// missed before may sort anywhere), which would find the job below too.
	listening(t, b, &probeClaims)
	// The runner's key: the last job it claimed, at priority 1 and now.
	first, err := pgrun.Enqueue(b.Ctx, b.Pool, runner.KindNoop, nil, pgrun.Queue("resume"), pgrun.Priority(1))
	require.NoError(t, err)
	testkit.Eventually(t, 30*time.Second, "the first job to run", func() bool {
		return testkit.JobStatus(t, b, first.ID) == pgrun.StatusSucceeded
	})

	// Below the key (the same priority, an hour earlier), inserted as the server's own
	// user with triggers off: no notification names it.
	conn := testkit.AsServerUser(t, b.URL)
	_, err = conn.Exec(b.Ctx, `set session_replication_role = replica`)
	require.NoError(t, err)
	var missed int64
	require.NoError(t, conn.QueryRow(b.Ctx, `
		insert into pgrun.jobs (kind, queue, priority, run_at, max_attempts, timeout)
		values ('noop', 'resume', 1, now() - interval '1 hour', 25, interval '1 hour') returning id`).Scan(&missed))
	testkit.Eventually(t, 30*time.Second, "the missed job to run", func() bool {
		return testkit.JobStatus(t, b, missed) == pgrun.StatusSucceeded
	})
}
