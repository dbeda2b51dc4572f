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

// ResizeBatch is a coordinator's args with a preflight check.
type ResizeBatch struct {
	Images []string `json:"images"`
}

func (a ResizeBatch) Validate() error {
	if len(a.Images) == 0 {
		return errors.New("images must not be empty")
	}
	return nil
}

// A Go handler fans out with runner.Defer; the parent succeeds when its children
// have. Args that fail Validate fail the job permanently before anything runs.
func TestRunnerDeferAndPreflight(t *testing.T) {
	b := testkit.Setup(t)
	r := testkit.NewRunner(b.Pool, runner.Config{})
	var bodies atomic.Int32
	testkit.Handle(t, r, "batch", func(_ context.Context, j *runner.Job[ResizeBatch]) (any, error) {
		bodies.Add(1)
		children := make([]pgrun.JobSpec, len(j.Args.Images))
		for i, img := range j.Args.Images {
			children[i] = pgrun.JobSpec{Kind: runner.KindEcho, Args: map[string]any{"image": img}}
		}
		return nil, runner.Defer(children...)
	})
	good, err := pgrun.Enqueue(b.Ctx, b.Pool, "batch", ResizeBatch{Images: []string{"a", "b", "c"}})
	require.NoError(t, err)
	bad, err := pgrun.Enqueue(b.Ctx, b.Pool, "batch", ResizeBatch{})
	require.NoError(t, err)
	testkit.StartRunner(t, r)
	testkit.Eventually(t, 15*time.Second, "both finished", func() bool {
		return testkit.JobStatus(t, b, good.ID).Finished() && testkit.JobStatus(t, b, bad.ID).Finished()
	})
	require.Equal(t, pgrun.StatusSucceeded, testkit.JobStatus(t, b, good.ID))
	j, err := pgrun.GetJob(b.Ctx, b.Pool, bad.ID)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusFailed, j.Status)
	require.Equal(t, 1, j.Attempt, "a failed preflight is not retried")
	require.Contains(t, string(j.Error), "images must not be empty")
	require.Contains(t, string(j.Error), `"class": "invalid_args"`)
	require.EqualValues(t, 1, bodies.Load(), "the handler body never ran for the invalid job")
	var children int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs where parent_id = $1`, bad.ID).Scan(&children))
	require.Zero(t, children)
}
