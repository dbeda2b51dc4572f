package tests

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
)

func enqueueNoops(t *testing.T, b *testkit.DB, n int) {
	t.Helper()
	for done := 0; done < n; done += 5000 {
		specs := make([]pgrun.JobSpec, min(5000, n-done))
		for i := range specs {
			specs[i] = pgrun.JobSpec{Kind: runner.KindNoop}
		}
		_, err := pgrun.EnqueueMany(b.Ctx, b.Pool, specs)
		require.NoError(t, err)
	}
}

// Many claimers racing over one backlog never receive the same job: every job is
// claimed exactly once.
func TestConcurrentClaimersNeverClaimAJobTwice(t *testing.T) {
	b := testkit.Setup(t)
	jobs := 20000
	if testing.Short() {
		jobs = 4000
	}
	enqueueNoops(t, b, jobs)
	claimRace(t, b, "default", jobs)
}

// The same race in fair queues (by concurrency key and by tenant, 50 keys), whose
// claims run at once: the walk locks each key's job as it finds it (FOR UPDATE SKIP
// LOCKED), and no job is claimed twice.
func TestConcurrentFairClaimersNeverClaimAJobTwice(t *testing.T) {
	for _, by := range []string{"concurrency_key", "tenant"} {
		t.Run(by, func(t *testing.T) {
			b := testkit.Setup(t)
			const jobs = 4000
			testkit.ExecAll(t, b, `select pgrun.set_queue('fair', fair_by => '`+by+`')`,
				fmt.Sprintf(`insert into pgrun.jobs (kind, queue, concurrency_key, tenant, priority)
				 select '%s', 'fair', 'k' || (i %% 50), 'k' || (i %% 50), i %% 3 from generate_series(1, %d) i`, runner.KindNoop, jobs))
			claimRace(t, b, "fair", jobs)
		})
	}
}

// claimRace has 16 claimers claim queue's jobs 50 at a time and complete them until
// none is queued, then checks that each of the queue's jobs was claimed exactly once.
func claimRace(t *testing.T, b *testkit.DB, queue string, jobs int) {
	t.Helper()
	var mu sync.Mutex
	claims := map[int64]int{}
	var g errgroup.Group
	for w := range 16 {
		g.Go(func() error {
			worker := fmt.Sprintf("w%d", w)
			for {
				rows, err := b.Pool.Query(b.Ctx, `select id, attempt from pgrun.claim_jobs($1, $2, 50)`, queue, worker)
				if err != nil {
					return err
				}
				var ids []int64
				var attempts []int32
				var id int64
				var attempt int32
				if _, err := pgx.ForEachRow(rows, []any{&id, &attempt}, func() error {
					ids = append(ids, id)
					attempts = append(attempts, attempt)
					return nil
				}); err != nil {
					return err
				}
				if len(ids) == 0 {
					var left int
					if err := b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs where status = 'queued'`).Scan(&left); err != nil {
						return err
					}
					if left == 0 {
						return nil
					}
					continue
				}
				mu.Lock()
				for _, id := range ids {
					claims[id]++
				}
				mu.Unlock()
				if _, err := b.Pool.Exec(b.Ctx, `select pgrun.complete_jobs($1, $2)`, ids, attempts); err != nil {
					return err
				}
			}
		})
	}
	require.NoError(t, g.Wait())

	require.Len(t, claims, jobs, "every job claimed")
	for id, n := range claims {
		require.Equal(t, 1, n, "job %d claimed %d times", id, n)
	}
	var succeeded, maxAttempt int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) filter (where status = 'succeeded'), max(attempt) from pgrun.jobs`).Scan(&succeeded, &maxAttempt))
	require.Equal(t, jobs, succeeded)
	require.Equal(t, 1, maxAttempt)
}

// Two runners sharing a queue execute every job exactly once.
func TestTwoRunnersExecuteEachJobOnce(t *testing.T) {
	b := testkit.Setup(t)
	const jobs = 5000
	var mu sync.Mutex
	runs := map[int64]int{}
	count := func(_ context.Context, j *runner.Job[struct{}]) (any, error) {
		mu.Lock()
		runs[j.ID]++
		mu.Unlock()
		return nil, nil
	}
	for _, id := range []string{"left", "right"} {
		r := testkit.NewRunner(b.Pool, runner.Config{WorkerID: id, Queues: map[string]runner.QueueConfig{"default": {Workers: 20}}})
		testkit.Handle(t, r, "counted", count)
		testkit.StartRunner(t, r)
	}
	specs := make([]pgrun.JobSpec, jobs)
	for i := range specs {
		specs[i] = pgrun.JobSpec{Kind: "counted"}
	}
	_, err := pgrun.EnqueueMany(b.Ctx, b.Pool, specs)
	require.NoError(t, err)
	testkit.Eventually(t, 60*time.Second, "all jobs succeeded", func() bool {
		return testkit.CountStatus(t, b, pgrun.StatusSucceeded) == jobs
	})
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, runs, jobs)
	for id, n := range runs {
		require.Equal(t, 1, n, "job %d ran %d times", id, n)
	}
	var workers int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(distinct claimed_by) from pgrun.jobs`).Scan(&workers))
	require.Equal(t, 2, workers, "both runners took part")
}
