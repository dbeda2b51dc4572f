package tests

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

// A queued job is cancelled at once and never claimed; a finished one is left alone;
// an unknown id is an error.
func TestCancelQueuedFinishedAndUnknown(t *testing.T) {
	b := testkit.Setup(t)
	job, err := pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil)
	require.NoError(t, err)
	j, err := pgrun.Cancel(b.Ctx, b.Pool, job.ID, "not needed")
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusCancelled, j.Status)
	require.NotNil(t, j.FinishedAt)
	var claimed int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.claim_jobs('default', 'w', 10)`).Scan(&claimed))
	require.Zero(t, claimed)
	evs, err := pgrun.Events(b.Ctx, b.Pool, job.ID)
	require.NoError(t, err)
	require.Len(t, evs, 1)
	require.Equal(t, "job.cancelled", evs[0].Event)
	require.JSONEq(t, `{"attempt": 0, "previous_status": "queued"}`, string(evs[0].Fields))

	before := testkit.RowJSON(t, b.Pool, job.ID)
	_, err = pgrun.Cancel(b.Ctx, b.Pool, job.ID, "again")
	require.ErrorIs(t, err, pgrun.ErrFinished)
	require.Equal(t, before, testkit.RowJSON(t, b.Pool, job.ID))

	done, err := pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil)
	require.NoError(t, err)
	id, attempt := testkit.ClaimOne(t, b.Pool, "w", "30 seconds")
	require.Equal(t, done.ID, id)
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.complete_jobs(array[$1::bigint], array[$2::int])`, id, attempt)
	require.NoError(t, err)
	var isNull bool
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select pgrun.cancel_job($1) is null`, id).Scan(&isNull))
	require.True(t, isNull)
	require.Equal(t, pgrun.StatusSucceeded, testkit.JobStatus(t, b, id))

	_, err = pgrun.Cancel(b.Ctx, b.Pool, 424242, "")
	require.ErrorIs(t, err, pgrun.ErrNotFound)
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.cancel_job(424242)`)
	require.Equal(t, "P0002", testkit.SQLState(err))
}

// Cancelling a running job cancels its handler's context within a second, with cause
// ErrJobCancelled, and the late return of the handler is ignored.
func TestCancelRunningJobCancelsHandlerWithinASecond(t *testing.T) {
	b := testkit.Setup(t)
	started := make(chan struct{})
	var cause atomic.Value
	var cancelledAt atomic.Int64
	r := testkit.NewRunner(b.Pool, runner.Config{})
	testkit.Handle(t, r, "blocker", func(ctx context.Context, _ *runner.Job[struct{}]) (any, error) {
		close(started)
		<-ctx.Done()
		cancelledAt.Store(time.Now().UnixNano())
		cause.Store(context.Cause(ctx))
		return "late result", nil // must be ignored
	})
	testkit.StartRunner(t, r)
	job, err := pgrun.Enqueue(b.Ctx, b.Pool, "blocker", nil)
	require.NoError(t, err)
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("handler did not start")
	}
	at := time.Now()
	_, err = pgrun.Cancel(b.Ctx, b.Pool, job.ID, "operator")
	require.NoError(t, err)
	testkit.Eventually(t, time.Second, "handler context cancelled", func() bool { return cancelledAt.Load() != 0 })
	t.Logf("cancel reached the handler after %s", time.Unix(0, cancelledAt.Load()).Sub(at))
	require.True(t, errors.Is(cause.Load().(error), runner.ErrJobCancelled), "cause %v", cause.Load())

	// Give the runner every chance to (wrongly) report the late result.
	r2 := testkit.NewRunner(b.Pool, runner.Config{WorkerID: "probe"})
	testkit.StartRunner(t, r2)
	probe, err := pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil)
	require.NoError(t, err)
	testkit.Eventually(t, 10*time.Second, "probe job done", func() bool { return testkit.JobStatus(t, b, probe.ID) == pgrun.StatusSucceeded })
	j, err := pgrun.GetJob(b.Ctx, b.Pool, job.ID)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusCancelled, j.Status)
	require.Nil(t, j.Result)
}

// A cancelled job can be redriven and then runs to success; retry_job of a job that
// is not failed or cancelled changes nothing.
func TestRetryRedrivesCancelledJob(t *testing.T) {
	b := testkit.Setup(t)
	job, err := pgrun.Enqueue(b.Ctx, b.Pool, runner.KindEcho, map[string]any{"n": 1})
	require.NoError(t, err)
	_, err = pgrun.Cancel(b.Ctx, b.Pool, job.ID, "")
	require.NoError(t, err)
	j, err := pgrun.Retry(b.Ctx, b.Pool, job.ID)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusQueued, j.Status)
	_, err = pgrun.Retry(b.Ctx, b.Pool, job.ID)
	require.ErrorIs(t, err, pgrun.ErrNotRetryable)

	testkit.StartRunner(t, testkit.NewRunner(b.Pool, runner.Config{}))
	testkit.Eventually(t, 10*time.Second, "redriven job succeeded", func() bool { return testkit.JobStatus(t, b, job.ID) == pgrun.StatusSucceeded })
}
