package runner_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
)

func TestRunnerBurnsDownNoops(t *testing.T) {
	b := testkit.Setup(t)
	specs := make([]pgrun.JobSpec, 2000)
	for i := range specs {
		specs[i] = pgrun.JobSpec{Kind: runner.KindNoop}
	}
	_, err := pgrun.EnqueueMany(b.Ctx, b.Pool, specs)
	require.NoError(t, err)

	r := testkit.NewRunner(b.Pool, runner.Config{Queues: map[string]runner.QueueConfig{"default": {Workers: 50}}})
	testkit.StartRunner(t, r)
	testkit.Eventually(t, 30*time.Second, "all jobs succeeded", func() bool {
		return testkit.CountStatus(t, b, pgrun.StatusSucceeded) == len(specs)
	})
}

func TestRunnerRecordsResultsAndErrors(t *testing.T) {
	b := testkit.Setup(t)
	echo, err := pgrun.Enqueue(b.Ctx, b.Pool, runner.KindEcho, map[string]any{"hello": "world"})
	require.NoError(t, err)
	perm, err := pgrun.Enqueue(b.Ctx, b.Pool, runner.KindFail, runner.FailArgs{Message: "bad input", Permanent: true})
	require.NoError(t, err)
	var calls atomic.Int32
	r := testkit.NewRunner(b.Pool, runner.Config{})
	testkit.Handle(t, r, "panics", func(context.Context, *runner.Job[struct{}]) (any, error) {
		calls.Add(1)
		panic("kaboom")
	})
	testkit.Handle(t, r, "not-yet", func(_ context.Context, j *runner.Job[struct{}]) (any, error) {
		if j.Attempt == 1 {
			return nil, runner.RetryLater(time.Millisecond, "not yet")
		}
		return "done", nil
	})
	pan, err := pgrun.Enqueue(b.Ctx, b.Pool, "panics", nil, pgrun.MaxAttempts(1))
	require.NoError(t, err)
	later, err := pgrun.Enqueue(b.Ctx, b.Pool, "not-yet", nil, pgrun.MaxAttempts(1))
	require.NoError(t, err)
	testkit.StartRunner(t, r)

	testkit.Eventually(t, 20*time.Second, "jobs finished", func() bool {
		return testkit.JobStatus(t, b, echo.ID).Finished() && testkit.JobStatus(t, b, perm.ID).Finished() &&
			testkit.JobStatus(t, b, pan.ID).Finished() && testkit.JobStatus(t, b, later.ID).Finished()
	})
	j, err := pgrun.GetJob(b.Ctx, b.Pool, echo.ID)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusSucceeded, j.Status)
	require.JSONEq(t, `{"hello":"world"}`, string(j.Result))

	j, err = pgrun.GetJob(b.Ctx, b.Pool, perm.ID)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusFailed, j.Status)
	require.Equal(t, 1, j.Attempt, "a permanent error is not retried")
	require.Contains(t, string(j.Error), "bad input")

	j, err = pgrun.GetJob(b.Ctx, b.Pool, pan.ID)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusFailed, j.Status)
	require.Contains(t, string(j.Error), `"class": "panic"`)
	require.Contains(t, string(j.Error), "kaboom")
	require.Contains(t, string(j.Error), "goroutine", "the stack is kept")

	j, err = pgrun.GetJob(b.Ctx, b.Pool, later.ID)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusSucceeded, j.Status, "retry_later spends no attempt, so max_attempts 1 still allows the second run")
	require.Equal(t, 2, j.Attempt)
	require.Equal(t, 0, j.Failures)
	require.Equal(t, int32(1), calls.Load())
}

func TestRunnerMiddlewareWrapsHandlers(t *testing.T) {
	b := testkit.Setup(t)
	type key struct{}
	var seen atomic.Value
	mw := func(next runner.HandlerFunc) runner.HandlerFunc {
		return func(ctx context.Context, j *pgrun.Job) (any, error) {
			return next(context.WithValue(ctx, key{}, "tenant-"+j.Kind), j)
		}
	}
	r := testkit.NewRunner(b.Pool, runner.Config{Middleware: []runner.Middleware{mw}})
	testkit.Handle(t, r, "ctxcheck", func(ctx context.Context, _ *runner.Job[struct{}]) (any, error) {
		v, _ := ctx.Value(key{}).(string)
		seen.Store(v)
		if v == "" {
			return nil, errors.New("middleware did not run")
		}
		return nil, nil
	})
	j, err := pgrun.Enqueue(b.Ctx, b.Pool, "ctxcheck", nil)
	require.NoError(t, err)
	testkit.StartRunner(t, r)
	testkit.Eventually(t, 10*time.Second, "job succeeded", func() bool { return testkit.JobStatus(t, b, j.ID) == pgrun.StatusSucceeded })
	require.Equal(t, "tenant-ctxcheck", seen.Load())
}

// Progress and events reported by a handler show in the row, active_jobs and the
// audit log.
func TestHandlerProgressAndEvents(t *testing.T) {
	b := testkit.Setup(t)
	release := make(chan struct{})
	r := testkit.NewRunner(b.Pool, runner.Config{})
	testkit.Handle(t, r, "batch", func(ctx context.Context, j *runner.Job[struct{}]) (any, error) {
		if err := j.Progress(ctx, 45, 100); err != nil {
			return nil, err
		}
		if err := j.Emit(ctx, "batch.half", map[string]any{"rows": 45}); err != nil {
			return nil, err
		}
		<-release
		return nil, j.Progress(ctx, 100, 0)
	})
	testkit.StartRunner(t, r)
	job, err := pgrun.Enqueue(b.Ctx, b.Pool, "batch", nil)
	require.NoError(t, err)
	testkit.Eventually(t, 10*time.Second, "progress visible in active_jobs", func() bool {
		var pct *float64
		err := b.Pool.QueryRow(b.Ctx, `select progress_pct from pgrun.active_jobs where id = $1`, job.ID).Scan(&pct)
		return err == nil && pct != nil && *pct == 45
	})
	close(release)
	testkit.Eventually(t, 10*time.Second, "job succeeded", func() bool { return testkit.JobStatus(t, b, job.ID) == pgrun.StatusSucceeded })
	j, err := pgrun.GetJob(b.Ctx, b.Pool, job.ID)
	require.NoError(t, err)
	require.EqualValues(t, 100, j.ProgressCurrent)
	require.EqualValues(t, 100, *j.ProgressTotal)
	evs, err := pgrun.Events(b.Ctx, b.Pool, job.ID)
	require.NoError(t, err)
	require.Len(t, evs, 1)
	require.Equal(t, "batch.half", evs[0].Event)
	require.JSONEq(t, `{"rows": 45}`, string(evs[0].Fields))
}
