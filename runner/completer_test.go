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

// A runner that never polls starts every node of a chain once its upstream has
// completed: what wakes its fetchers is the completion itself (the completer, and the
// notification), not the poll.
func TestRunnerStartsDependentsWithoutPolling(t *testing.T) {
	b := testkit.Setup(t)
	testkit.DefineWorkflow(t, b, "chain", `{"nodes": [{"name": "a", "kind": "noop", "queue": "wf.one"},
		{"name": "b", "kind": "noop", "queue": "wf.two", "deps": ["a"]},
		{"name": "c", "kind": "noop", "queue": "wf.one", "deps": ["b"]}]}`)
	r := testkit.NewRunner(b.Pool, runner.Config{
		Queues:       map[string]runner.QueueConfig{"wf.one": {Workers: 4}, "wf.two": {Workers: 4}},
		PollInterval: time.Hour,
	})
	testkit.StartRunner(t, r)
	var runs []int64
	for range 20 {
		run, err := pgrun.StartRun(b.Ctx, b.Pool, "chain", nil, "")
		require.NoError(t, err)
		runs = append(runs, run.ID)
	}
	testkit.Eventually(t, 30*time.Second, "every run to succeed", func() bool {
		var left int
		require.NoError(t, b.Pool.QueryRow(context.Background(), `select count(*) from pgrun.runs
			where id = any ($1) and status <> 'succeeded'`, runs).Scan(&left))
		return left == 0
	})
	var early int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs d join pgrun.jobs u
		on u.run_id = d.run_id and ((u.node = 'a' and d.node = 'b') or (u.node = 'b' and d.node = 'c'))
		where d.run_id = any ($1) and d.started_at < u.finished_at`, runs).Scan(&early))
	require.Zero(t, early, "a node started before its upstream finished")
}

// One bad report does not poison a batch: a result the server refuses (a NUL
// character in a string) fails that job alone, for good, with class bad_result and
// the server's reason; the other jobs of the batch complete once.
func TestBadResultFailsOnlyItsJob(t *testing.T) {
	b := testkit.Setup(t)
	gate := make(chan struct{})
	r := testkit.NewRunner(b.Pool, runner.Config{Queues: map[string]runner.QueueConfig{"default": {Workers: 30}}})
	testkit.Handle(t, r, "result", func(ctx context.Context, j *runner.Job[struct{ Bad bool }]) (any, error) {
		<-gate // finish together, so the completions share a batch
		if j.Args.Bad {
			return map[string]string{"text": "nul \x00 here"}, nil
		}
		return map[string]int{"ok": 1}, nil
	})
	testkit.StartRunner(t, r)
	specs := make([]pgrun.JobSpec, 28)
	for i := range specs {
		specs[i] = pgrun.JobSpec{Kind: "result", Args: map[string]bool{"Bad": i == 13}}
	}
	jobs, err := pgrun.EnqueueMany(b.Ctx, b.Pool, specs)
	require.NoError(t, err)
	testkit.Eventually(t, 10*time.Second, "all running", func() bool { return testkit.CountStatus(t, b, pgrun.StatusRunning) == 28 })
	close(gate)
	testkit.Eventually(t, 15*time.Second, "all finished", func() bool {
		return testkit.CountStatus(t, b, pgrun.StatusSucceeded)+testkit.CountStatus(t, b, pgrun.StatusFailed) == 28
	})
	require.Equal(t, 27, testkit.CountStatus(t, b, pgrun.StatusSucceeded))
	bad, err := pgrun.GetJob(b.Ctx, b.Pool, jobs[13].ID)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusFailed, bad.Status)
	require.Contains(t, string(bad.Error), `"class": "bad_result"`)
	require.Contains(t, string(bad.Error), "unsupported Unicode escape sequence", "the server's own reason")
	var attempts int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select max(attempt) from pgrun.jobs`).Scan(&attempts))
	require.Equal(t, 1, attempts, "nothing ran twice")
}
