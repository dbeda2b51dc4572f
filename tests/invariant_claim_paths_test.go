package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/pgrun/pgrun/internal/testkit"
)

// kitBurn is a burn-down of one queue by racing SQL claimers.
type kitBurn struct {
	queue    string
	claimers int
	// models, when set, is passed to claim_jobs by claimer i as models[i%len(models)],
	// which takes the model-affinity passes of the claim.
	models [][]string
	// rollbackEvery, when above 0, rolls back every rollbackEvery-th claim of each
	// claimer instead of completing it: those jobs must go back to the queue untouched.
	rollbackEvery int
	// more, when set, is waited for before claimers may stop (jobs still arriving).
	more *atomic.Bool
}

// run claims batches of 50 and completes each batch in the claim's transaction until
// nothing is queued. It returns how often each id was claimed in a committed
// transaction.
func (k kitBurn) run(t *testing.T, b *testkit.DB) map[int64]int {
	t.Helper()
	var mu sync.Mutex
	claims := map[int64]int{}
	var g errgroup.Group
	for w := range k.claimers {
		g.Go(func() error {
			worker := fmt.Sprintf("%s-w%d", k.queue, w)
			var models []string
			if len(k.models) > 0 {
				models = k.models[w%len(k.models)]
			}
			for round := 1; ; round++ {
				tx, err := b.Pool.Begin(b.Ctx)
				if err != nil {
					return err
				}
				rows, err := tx.Query(b.Ctx, `select id, attempt from pgrun.claim_jobs($1, $2, 50, null, $3)`, k.queue, worker, models)
				if err != nil {
					_ = tx.Rollback(b.Ctx)
					return err
				}
				var ids []int64
				var attempts []int32
				var id int64
				var attempt int32
				if _, err := pgx.ForEachRow(rows, []any{&id, &attempt}, func() error {
					ids, attempts = append(ids, id), append(attempts, attempt)
					return nil
				}); err != nil {
					_ = tx.Rollback(b.Ctx)
					return err
				}
				if len(ids) == 0 {
					_ = tx.Rollback(b.Ctx)
					// Read the flag before counting: once it is off, every enqueue
					// has committed and the count sees it.
					coming := k.more != nil && k.more.Load()
					var left int
					if err := b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs where queue = $1 and status = 'queued'`, k.queue).Scan(&left); err != nil {
						return err
					}
					if left == 0 && !coming {
						return nil
					}
					continue
				}
				if k.rollbackEvery > 0 && round%k.rollbackEvery == 0 {
					if err := tx.Rollback(b.Ctx); err != nil {
						return err
					}
					continue
				}
				var done int
				if err := tx.QueryRow(b.Ctx, `select count(*) from pgrun.complete_jobs($1, $2)`, ids, attempts).Scan(&done); err != nil {
					_ = tx.Rollback(b.Ctx)
					return err
				}
				if done != len(ids) {
					_ = tx.Rollback(b.Ctx)
					return fmt.Errorf("%s completed %d of the %d jobs it had just claimed", worker, done, len(ids))
				}
				if err := tx.Commit(b.Ctx); err != nil {
					return err
				}
				mu.Lock()
				for _, id := range ids {
					claims[id]++
				}
				mu.Unlock()
			}
		})
	}
	require.NoError(t, g.Wait())
	return claims
}

// requireEachOnce checks that every job of queue was claimed exactly once, succeeded,
// and did so on its first attempt.
func requireEachOnce(t *testing.T, b *testkit.DB, queue string, jobs int, claims map[int64]int) {
	t.Helper()
	for id, n := range claims {
		require.Equal(t, 1, n, "job %d was claimed %d times", id, n)
	}
	require.Len(t, claims, jobs, "every job was claimed")
	var total, succeeded, minAttempt, maxAttempt int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*), count(*) filter (where status = 'succeeded'),
		min(attempt), max(attempt) from pgrun.jobs where queue = $1`, queue).Scan(&total, &succeeded, &minAttempt, &maxAttempt))
	require.Equal(t, jobs, total)
	require.Equal(t, jobs, succeeded)
	require.Equal(t, 1, minAttempt)
	require.Equal(t, 1, maxAttempt, "no job needed a second claim")
}

func kitEnqueueSpecs(t *testing.T, b *testkit.DB, specs []map[string]any) {
	t.Helper()
	for start := 0; start < len(specs); start += 5000 {
		raw, err := json.Marshal(specs[start:min(start+5000, len(specs))])
		require.NoError(t, err)
		_, err = b.Pool.Exec(b.Ctx, `select count(*) from pgrun.enqueue_jobs($1::jsonb)`, raw)
		require.NoError(t, err)
	}
}

// claim_jobs picks jobs in more ways than the plain one: after taking the queue's row
// lock (queues with max_running or rate_limit), by looking ahead (queues with a
// concurrency_limit: ids picked without a lock, then locked with SKIP LOCKED), and in
// model-affinity passes. None of them may hand a job out twice.
func TestEveryClaimPathHandsEachJobOutOnce(t *testing.T) {
	jobs := 3000
	if testing.Short() {
		jobs = 800
	}
	paths := []struct {
		name   string
		policy string
		spec   func(i int) map[string]any
		models [][]string
	}{
		{"queue_limits", `select pgrun.set_queue('limits', max_running => 100000, rate_limit => 1000000, rate_period => '1 hour')`,
			func(int) map[string]any { return map[string]any{"kind": "noop", "queue": "limits"} }, nil},
		{"concurrency_keys", `select pgrun.set_queue('keyed', concurrency_limit => 100000)`,
			func(i int) map[string]any {
				s := map[string]any{"kind": "noop", "queue": "keyed"}
				if i%5 != 0 {
					s["concurrency_key"] = fmt.Sprintf("tenant-%d", i%17)
				}
				return s
			}, nil},
		{"model_affinity", `select 1`,
			func(i int) map[string]any {
				s := map[string]any{"kind": "noop", "queue": "models"}
				if i%3 != 0 {
					s["model"] = fmt.Sprintf("m%d", i%3)
				}
				return s
			}, [][]string{{"m1"}, {"m2"}, {"m1", "m2"}, {}}},
	}
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			b := testkit.Setup(t)
			_, err := b.Pool.Exec(b.Ctx, p.policy)
			require.NoError(t, err)
			specs := make([]map[string]any, jobs)
			for i := range specs {
				specs[i] = p.spec(i)
			}
			kitEnqueueSpecs(t, b, specs)
			queue := specs[0]["queue"].(string)
			claims := kitBurn{queue: queue, claimers: 8, models: p.models}.run(t, b)
			requireEachOnce(t, b, queue, jobs, claims)
		})
	}
}

// Claims racing new enqueues, with some claiming transactions rolled back: a rolled-back
// claim leaves its jobs queued with their attempt untouched, and every job is still
// claimed exactly once by a transaction that committed.
func TestRolledBackClaimsLeaveNoTraceWhileJobsArrive(t *testing.T) {
	b := testkit.Setup(t)
	batches, perBatch := 10, 400
	if testing.Short() {
		batches = 4
	}
	var more atomic.Bool
	more.Store(true)
	enqueued := make(chan error, 1)
	go func() {
		defer more.Store(false)
		for range batches {
			specs := make([]map[string]any, perBatch)
			for i := range specs {
				specs[i] = map[string]any{"kind": "noop", "queue": "arrivals", "priority": i % 3}
			}
			raw, err := json.Marshal(specs)
			if err == nil {
				_, err = b.Pool.Exec(context.Background(), `select count(*) from pgrun.enqueue_jobs($1::jsonb)`, raw)
			}
			if err != nil {
				enqueued <- err
				return
			}
		}
		enqueued <- nil
	}()
	claims := kitBurn{queue: "arrivals", claimers: 8, rollbackEvery: 3, more: &more}.run(t, b)
	require.NoError(t, <-enqueued)
	requireEachOnce(t, b, "arrivals", batches*perBatch, claims)
}
