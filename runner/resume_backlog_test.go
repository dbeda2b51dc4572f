package runner_test

import (
	"context"
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
func TestRunnerFindsJobsEnqueuedBelowItsKey(t *testing.T) {
	b := testkit.Setup(t)
	specs := make([]pgrun.JobSpec, 5000)
	for i := range specs {
		specs[i] = pgrun.JobSpec{Kind: "slowish", Queue: "resume", Priority: 1}
	}
	_, err := pgrun.EnqueueMany(b.Ctx, b.Pool, specs)
	require.NoError(t, err)

	r := testkit.NewRunner(b.Pool, runner.Config{Queues: map[string]runner.QueueConfig{"resume": {Workers: 4}},
		PollInterval: time.Hour}) // no poll: only the notification can bring the runner back
	testkit.Handle(t, r, "slowish", func(ctx context.Context, j *runner.Job[struct{}]) (any, error) {
		// A little work per job, so that the backlog lasts a while.
		deadline := time.Now().Add(time.Millisecond)
		for time.Now().Before(deadline) {
		}
		return nil, nil
	})
	testkit.StartRunner(t, r)
	testkit.Eventually(t, 30*time.Second, "the runner to be into the backlog", func() bool {
		return testkit.CountStatus(t, b, pgrun.StatusSucceeded) >= 100
	})
	// Sorts before everything left: the same priority, a run_at an hour ago.
	early, err := pgrun.Enqueue(b.Ctx, b.Pool, "slowish", nil, pgrun.Queue("resume"), pgrun.Priority(1),
		pgrun.RunAt(time.Now().Add(-time.Hour)))
	require.NoError(t, err)
	testkit.Eventually(t, 30*time.Second, "the early job to finish", func() bool {
		return testkit.JobStatus(t, b, early.ID) == pgrun.StatusSucceeded
	})
	var queuedWhenItStarted int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs b, pgrun.jobs e
		where e.id = $1 and b.queue = 'resume' and b.id <> e.id and b.started_at > e.started_at`, early.ID).Scan(&queuedWhenItStarted))
	require.Greater(t, queuedWhenItStarted, 0, "the early job waited for the whole backlog")
}
