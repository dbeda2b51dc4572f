package runner_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
)

// Two runners burn down a queue split into four claim lanes: they claim from lanes
// (each lane claim's jobs are that lane's, id % 4), every job runs once, and when one
// runner stops halfway the other runs what its lanes held.
func TestRunnersBurnDownALanedQueue(t *testing.T) {
	b := testkit.Setup(t)
	c, err := pgrun.NewClient(b.Pool, pgrun.Config{})
	require.NoError(t, err)
	_, err = c.SetQueue(b.Ctx, "laned", pgrun.QueueSettings{ClaimLanes: new(4)})
	require.NoError(t, err)
	const jobs = 6000
	specs := make([]pgrun.JobSpec, jobs)
	for i := range specs {
		specs[i] = pgrun.JobSpec{Kind: "slowish", Queue: "laned"}
	}
	_, err = c.EnqueueMany(b.Ctx, specs)
	require.NoError(t, err)

	var laneClaims, strays, ran atomic.Int64
	var mu sync.Mutex
	runs := map[int64]int{}
	start := func(id string) func() {
		r := testkit.NewRunner(b.Pool, runner.Config{
			WorkerID: id,
			Queues:   map[string]runner.QueueConfig{"laned": {Workers: 50}},
			Hooks: []runner.Hooks{{OnClaim: func(e runner.ClaimEvent) {
				if e.Lane == nil || len(e.Jobs) == 0 {
					return
				}
				for _, j := range e.Jobs {
					if j.ID%4 != int64(*e.Lane) {
						strays.Add(1)
					}
				}
				laneClaims.Add(1)
			}}},
		})
		testkit.Handle(t, r, "slowish", func(ctx context.Context, j *runner.Job[struct{}]) (any, error) {
			ran.Add(1)
			mu.Lock()
			runs[j.ID]++
			mu.Unlock()
			deadline := time.Now().Add(200 * time.Microsecond) // a little work: the backlog lasts
			for time.Now().Before(deadline) {
			}
			return nil, nil
		})
		return testkit.StartRunner(t, r)
	}
	start("lanes-a")
	stopB := start("lanes-b")
	testkit.Eventually(t, time.Minute, "half the jobs done", func() bool { return ran.Load() >= jobs/2 })
	stopB()
	testkit.Eventually(t, time.Minute, "every job done", func() bool {
		return testkit.CountStatus(t, b, pgrun.StatusSucceeded) == jobs
	})
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, runs, jobs, "every job ran")
	for id, n := range runs {
		require.Equal(t, 1, n, "job %d ran more than once", id)
	}
	require.Positive(t, laneClaims.Load(), "no claim took from a lane")
	require.Zero(t, strays.Load(), "a lane claim brought jobs of another lane")
}
