package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
)

// The direct path of batch handlers (batch_direct.go): a claim's jobs of a batch kind
// go straight into their batches, and a call's successes reach the completer in one
// piece. The tests in batch_test.go cover what a batch does for each job; these cover
// what the direct path changes.

// A full batch costs one claim_jobs call and one complete_jobs call: the hundred
// jobs, enqueued before the runner starts, come back in the runner's first claim
// (their claim tokens share the 64 bits a claim draws once), go in one handler call,
// and their successes are recorded together.
func TestBatchIsOneClaimAndOneCompletion(t *testing.T) {
	b := setupBatch(t, 100, runner.Config{PollInterval: time.Hour})
	require.NoError(t, runner.HandleBatch(b.r, "double", b.double, 100, runner.MaxBatchLinger))
	ids := b.enqueue(t, "double", numbered(100)...)
	testkit.StartRunner(t, b.r)
	got := b.waitFinished(t, ids)
	require.Equal(t, []int{100}, b.sizes())
	for _, id := range ids {
		require.Equal(t, pgrun.StatusSucceeded, got[id].Status)
	}
	var claims int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(distinct left(claim_id::text, 18)) from pgrun.jobs where id = any($1)`,
		ids).Scan(&claims))
	require.Equal(t, 1, claims, "the batch's jobs came from more than one claim")
	testkit.Eventually(t, 10*time.Second, "the runner to count the completions", func() bool {
		return b.r.Stats().Completed == 100
	})
	st := b.r.Stats()
	require.Equal(t, int64(100), st.Claimed)
	require.Equal(t, int64(1), st.CompleteCalls, "the batch's successes were recorded in more than one call")
	// The first claim, and the one that found the queue empty once the batch was done
	// (and one more if the listener's first connection woke the fetcher meanwhile).
	require.LessOrEqual(t, st.ClaimCalls, int64(3))
}

// A job that fails in a batch is retried alone: the other jobs of its batch succeed
// on their first attempt, and its second attempt is a call of its own.
func TestBatchFailureRetriesAlone(t *testing.T) {
	b := setupBatch(t, 8, runner.Config{})
	require.NoError(t, runner.HandleBatch(b.r, "flaky", func(ctx context.Context, jobs []*runner.Job[batchArgs]) ([]runner.BatchResult, error) {
		b.record(jobs)
		out := make([]runner.BatchResult, len(jobs))
		for i, j := range jobs {
			if j.Args.Mode == "retry" && j.Attempt == 1 {
				out[i].Err = errors.New("flaky: try again")
				continue
			}
			out[i].Result = map[string]int{"attempt": j.Attempt}
		}
		return out, nil
	}, 5, 200*time.Millisecond))
	testkit.StartRunner(t, b.r)
	ids := b.enqueue(t, "flaky", batchArgs{N: 0}, batchArgs{N: 1}, batchArgs{N: 2, Mode: "retry"}, batchArgs{N: 3}, batchArgs{N: 4})
	got := b.waitFinished(t, ids)
	b.mu.Lock()
	calls := b.calls
	b.mu.Unlock()
	require.Len(t, calls, 2)
	require.ElementsMatch(t, ids, calls[0])
	require.Equal(t, []int64{ids[2]}, calls[1], "the retry was not a call of its own")
	for i, id := range ids {
		j := got[id]
		require.Equal(t, pgrun.StatusSucceeded, j.Status, "job %d", i)
		if i == 2 {
			require.Equal(t, []int{2, 1}, []int{j.Attempt, j.Failures})
			require.JSONEq(t, `{"attempt": 2}`, string(j.Result))
			continue
		}
		require.Equal(t, []int{1, 0}, []int{j.Attempt, j.Failures}, "job %d was retried with the failed one", i)
	}
}

// A job whose args do not decode never joins a batch: it fails permanently alone,
// and the others of its claim go in the call.
func TestBatchBadArgsFailAlone(t *testing.T) {
	b := setupBatch(t, 8, runner.Config{})
	require.NoError(t, runner.HandleBatch(b.r, "double", b.double, 3, 200*time.Millisecond))
	testkit.StartRunner(t, b.r)
	jobs, err := b.c.EnqueueMany(b.Ctx, []pgrun.JobSpec{
		{Kind: "double", Args: batchArgs{N: 1}},
		{Kind: "double", Args: map[string]any{"n": "not a number"}},
		{Kind: "double", Args: batchArgs{N: 2}},
	})
	require.NoError(t, err)
	ids := []int64{jobs[0].ID, jobs[1].ID, jobs[2].ID}
	got := b.waitFinished(t, ids)
	require.Equal(t, []int{2}, b.sizes())
	require.ElementsMatch(t, []int64{ids[0], ids[2]}, b.calls[0])
	bad := got[ids[1]]
	require.Equal(t, pgrun.StatusFailed, bad.Status)
	require.Equal(t, 1, bad.Attempt, "bad args were retried")
	var e struct{ Message string }
	require.NoError(t, json.Unmarshal(bad.Error, &e))
	require.Contains(t, e.Message, "decode args of double job")
	require.Equal(t, pgrun.StatusSucceeded, got[ids[0]].Status)
	require.Equal(t, pgrun.StatusSucceeded, got[ids[2]].Status)
}

// A job cancelled while its batch gathers leaves it at once: its outcome is heard
// well before the linger, and the batch, sent by the shutdown, holds the others only.
func TestBatchCancelWhileGatheringLeavesAtOnce(t *testing.T) {
	outcomes := make(chan runner.OutcomeEvent, 16)
	b := setupBatch(t, 8, runner.Config{
		ShutdownGrace: 5 * time.Second,
		Hooks:         []runner.Hooks{{OnOutcome: func(ev runner.OutcomeEvent) { outcomes <- ev }}},
	})
	hearsCancels := testkit.CancelProbe(t, b.DB, b.r)
	require.NoError(t, runner.HandleBatch(b.r, "double", b.double, 10, runner.MaxBatchLinger))
	stop := testkit.StartRunner(t, b.r)
	hearsCancels()
	<-outcomes // the probe's
	ids := b.enqueue(t, "double", numbered(3)...)
	testkit.Eventually(t, 20*time.Second, "the jobs to be claimed", func() bool {
		var n int
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs where id = any($1) and status = 'running'`,
			ids).Scan(&n))
		return n == 3
	})
	_, err := b.c.Cancel(b.Ctx, ids[1], "not needed")
	require.NoError(t, err)
	select {
	case ev := <-outcomes:
		require.Equal(t, ids[1], ev.Job.ID)
		require.Equal(t, runner.OutcomeCancelled, ev.Outcome)
	case <-time.After(runner.MaxBatchLinger / 2):
		t.Fatal("the cancelled job did not leave its gathering batch")
	}
	require.Empty(t, b.sizes(), "the batch went before its linger")
	stop()
	got := b.waitFinished(t, ids)
	require.Equal(t, []int{2}, b.sizes())
	require.ElementsMatch(t, []int64{ids[0], ids[2]}, b.calls[0])
	require.Equal(t, pgrun.StatusCancelled, got[ids[1]].Status)
}

// A batch still running when a shutdown's grace ends: every job is cancelled with
// ErrShutdown, which cancels the batch's ctx, and goes back to the queue without a
// failure, whatever the handler returns for it.
func TestBatchShutdownRequeuesARunningBatch(t *testing.T) {
	b := setupBatch(t, 8, runner.Config{ShutdownGrace: 200 * time.Millisecond})
	started := make(chan []*runner.Job[batchArgs], 1)
	causes := make(chan error, 4)
	require.NoError(t, runner.HandleBatch(b.r, "hold", func(ctx context.Context, jobs []*runner.Job[batchArgs]) ([]runner.BatchResult, error) {
		started <- jobs
		<-ctx.Done()
		for _, j := range jobs {
			causes <- context.Cause(j.Context())
		}
		return make([]runner.BatchResult, len(jobs)), nil
	}, 3, runner.MaxBatchLinger))
	stop := testkit.StartRunner(t, b.r)
	ids := b.enqueue(t, "hold", numbered(3)...)
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the batch did not start")
	}
	stop()
	for range ids {
		require.ErrorIs(t, <-causes, runner.ErrShutdown)
	}
	for _, id := range ids {
		j, err := b.c.GetJob(b.Ctx, id)
		require.NoError(t, err)
		require.Equal(t, pgrun.StatusQueued, j.Status, "job %d", id)
		require.Equal(t, 0, j.Failures, "job %d spent an attempt", id)
	}
}

// The direct path starts no goroutine per job: while a batch of 200 jobs runs, no
// goroutine waits in a batch for its job (batcher.submit), where with middleware (the
// per-job wait, which the middleware wraps) every job of the batch has one. Not
// parallel: the count is of the whole process, and parallel tests wait for the
// sequential ones to end.
func TestBatchDirectPathStartsNoGoroutinePerJob(t *testing.T) {
	for _, tc := range []struct {
		name       string
		middleware []runner.Middleware
		want       int
	}{
		{"direct", nil, 0},
		{"middleware", []runner.Middleware{func(next runner.HandlerFunc) runner.HandlerFunc { return next }}, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := testkit.NewDB(t)
			c, err := pgrun.NewClient(db.Pool, pgrun.Config{})
			require.NoError(t, err)
			r := testkit.NewBareRunner(db.Pool, runner.Config{
				Queues:     map[string]runner.QueueConfig{"default": {Workers: 200}},
				Middleware: tc.middleware,
			})
			inCall := make(chan int, 1)
			release := make(chan struct{})
			var once sync.Once
			require.NoError(t, runner.HandleBatch(r, "hold", func(_ context.Context, jobs []*runner.Job[batchArgs]) ([]runner.BatchResult, error) {
				inCall <- len(jobs)
				<-release
				return make([]runner.BatchResult, len(jobs)), nil
			}, 200, runner.MaxBatchLinger))
			testkit.StartRunner(t, r)
			t.Cleanup(func() { once.Do(func() { close(release) }) })
			specs := make([]pgrun.JobSpec, 200)
			for i := range specs {
				specs[i] = pgrun.JobSpec{Kind: "hold", Args: batchArgs{N: i}}
			}
			_, err = c.EnqueueMany(db.Ctx, specs)
			require.NoError(t, err)
			select {
			case n := <-inCall:
				require.Equal(t, 200, n)
			case <-time.After(20 * time.Second):
				t.Fatal("the batch did not start")
			}
			var dump strings.Builder
			require.NoError(t, pprof.Lookup("goroutine").WriteTo(&dump, 2))
			require.Equal(t, tc.want, strings.Count(dump.String(), "runner.(*batcher).submit("))
			once.Do(func() { close(release) })
		})
	}
}
