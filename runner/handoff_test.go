package runner_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
)

// A runner that completes jobs of sequences takes their next jobs by handoff (the
// completion hands them over; runner/handoff.go): every job runs once, one at a time
// per sequence and in enqueue order, most of them handed over rather than claimed,
// also for a runner that logs in as a pgrun_worker member (which reads the jobs handed
// over through pgrun.handed_jobs: it may not read claim tokens from pgrun.jobs). In a
// queue under max_running, where a claim weighs the queue's other jobs, none is handed
// over.
func TestRunnerTakesTheNextJobsOfSequencesByHandoff(t *testing.T) {
	for _, tc := range []struct {
		name           string
		limited, login bool
	}{{"plain", false, false}, {"max_running", true, false}, {"pgrun_worker login", false, true}} {
		limited := tc.limited
		t.Run(tc.name, func(t *testing.T) {
			b := testkit.Setup(t)
			pool := b.Pool
			if tc.login { // as in production: a login that may not read other workers' claim tokens
				pool = testkit.AsRole(t, b, "pgrun_worker")
			}
			const keys, per = 20, 5
			if limited {
				testkit.ExecAll(t, b, `select pgrun.set_queue('seq', max_running => 8)`)
			}
			testkit.ExecAll(t, b, fmt.Sprintf(`select pgrun.enqueue_jobs(jsonb_agg(jsonb_build_object('kind', 'step',
				'queue', 'seq', 'sequence_key', 'k' || (i %% %d)) order by i)) from generate_series(1, %d) i`, keys, keys*per))

			var mu sync.Mutex
			running := map[string]int64{} // the job of each sequence in its handler now
			ran := map[string][]int64{}   // the jobs of each sequence, in the order they ran
			var faults []string
			r := testkit.NewRunner(pool, runner.Config{
				Queues:       map[string]runner.QueueConfig{"seq": {Workers: 8}},
				PollInterval: time.Hour, MaintenanceInterval: -1,
			})
			testkit.Handle(t, r, "step", func(_ context.Context, j *runner.Job[struct{}]) (any, error) {
				key := *j.SequenceKey
				mu.Lock()
				if other, busy := running[key]; busy {
					faults = append(faults, fmt.Sprintf("job %d of %s started while job %d ran", j.ID, key, other))
				}
				running[key] = j.ID
				ran[key] = append(ran[key], j.ID)
				mu.Unlock()
				mu.Lock()
				delete(running, key)
				mu.Unlock()
				return nil, nil
			})
			testkit.StartRunner(t, r)
			waitSucceeded(t, b, "seq", 30*time.Second)

			mu.Lock()
			defer mu.Unlock()
			require.Empty(t, faults)
			require.Len(t, ran, keys)
			for key, ids := range ran {
				require.Len(t, ids, per, "sequence %s: each job once", key)
				require.IsIncreasing(t, ids, "sequence %s: in enqueue order", key)
			}
			st := r.Stats()
			require.EqualValues(t, keys*per, st.Claimed+st.Handed, "every job claimed or handed over, once")
			if limited {
				require.Zero(t, st.Handed)
			} else {
				require.GreaterOrEqual(t, st.Handed, int64(keys*(per-1)/2), "most next jobs handed over")
			}
		})
	}
}
