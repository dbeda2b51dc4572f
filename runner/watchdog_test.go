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

// A handler that ignores its cancelled context is abandoned AbandonAfter later: its
// slot is freed, its job reported without it (here: the cancellation stands), and
// it is counted; past the threshold the runner says so (the CLI exits with
// ExitAbandoned).
func TestAbandonment(t *testing.T) {
	b := testkit.Setup(t)
	clk := testkit.NewClock(time.Unix(1_900_000_000, 0))
	var tooMany atomic.Int32
	stuck := make(chan struct{})
	defer close(stuck)
	r := testkit.NewRunner(b.Pool, runner.Config{Watchdog: runner.WatchdogConfig{
		AbandonAfter: 30 * time.Second, MaxAbandoned: 1,
		Interval: 5 * time.Millisecond, Now: clk.Now,
		OnTooManyAbandoned: func(n int) { tooMany.Store(int32(n)) },
	}})
	var rudeCancelled atomic.Int32
	testkit.Handle(t, r, "rude", func(ctx context.Context, j *runner.Job[struct{}]) (any, error) {
		context.AfterFunc(ctx, func() { rudeCancelled.Add(1) })
		<-stuck // ignores ctx
		return nil, nil
	})
	testkit.StartRunner(t, r)
	for i := range 2 {
		rude, err := pgrun.Enqueue(b.Ctx, b.Pool, "rude", nil, pgrun.MaxAttempts(1))
		require.NoError(t, err)
		testkit.Eventually(t, 10*time.Second, "rude running", func() bool { return testkit.JobStatus(t, b, rude.ID) == pgrun.StatusRunning })
		_, err = b.Pool.Exec(b.Ctx, `select pgrun.cancel_job($1, 'stop')`, rude.ID)
		require.NoError(t, err)
		testkit.Eventually(t, 10*time.Second, "rude cancelled", func() bool { return rudeCancelled.Load() == int32(i+1) })
		require.EqualValues(t, i, r.Abandoned(), "not abandoned yet")
		clk.Advance(31 * time.Second) // abandon
		testkit.Eventually(t, 10*time.Second, "rude abandoned", func() bool { return r.Abandoned() == int64(i+1) })
		require.Equal(t, pgrun.StatusCancelled, testkit.JobStatus(t, b, rude.ID))
	}
	testkit.Eventually(t, 5*time.Second, "threshold reached", func() bool { return tooMany.Load() == 2 })
}
