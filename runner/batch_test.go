package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
)

// batchArgs are the args of the batch tests' jobs: a number the handler doubles, and
// what the handler does with the job (see batchBundle.outcome).
type batchArgs struct {
	N    int    `json:"n"`
	Mode string `json:"mode,omitempty"`
}

// batchBundle is a test's database, client and runner, and the sizes of the batch
// calls its handler saw.
type batchBundle struct {
	*testkit.DB
	c *pgrun.Client
	r *runner.Runner

	mu    sync.Mutex
	calls [][]int64 // the job ids of each call, in call order
}

// setupBatch makes a runner of one queue, default, with workers slots.
func setupBatch(t *testing.T, workers int, cfg runner.Config) *batchBundle {
	t.Helper()
	db := testkit.Setup(t)
	c, err := pgrun.NewClient(db.Pool, pgrun.Config{})
	require.NoError(t, err)
	cfg.Queues = map[string]runner.QueueConfig{"default": {Workers: workers}}
	return &batchBundle{DB: db, c: c, r: testkit.NewBareRunner(db.Pool, cfg)}
}

// record notes a call's jobs.
func (b *batchBundle) record(jobs []*runner.Job[batchArgs]) {
	ids := make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	b.mu.Lock()
	b.calls = append(b.calls, ids)
	b.mu.Unlock()
}

// sizes lists the sizes of the calls so far.
func (b *batchBundle) sizes() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]int, len(b.calls))
	for i, c := range b.calls {
		out[i] = len(c)
	}
	return out
}

// enqueue adds n jobs of kind in one statement (one commit: a claim sees all or none).
func (b *batchBundle) enqueue(t *testing.T, kind string, args ...batchArgs) []int64 {
	t.Helper()
	specs := make([]pgrun.JobSpec, len(args))
	for i, a := range args {
		specs[i] = pgrun.JobSpec{Kind: kind, Args: a, MaxAttempts: 2}
	}
	jobs, err := b.c.EnqueueMany(b.Ctx, specs)
	require.NoError(t, err)
	ids := make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	return ids
}

// numbered is n args numbered from 0.
func numbered(n int) []batchArgs {
	out := make([]batchArgs, n)
	for i := range out {
		out[i] = batchArgs{N: i}
	}
	return out
}

// waitFinished waits until every job of ids has finished and returns them.
func (b *batchBundle) waitFinished(t *testing.T, ids []int64) map[int64]*pgrun.Job {
	t.Helper()
	out := map[int64]*pgrun.Job{}
	testkit.Eventually(t, 30*time.Second, fmt.Sprintf("%d jobs to finish", len(ids)), func() bool {
		for _, id := range ids {
			j, err := b.c.GetJob(b.Ctx, id)
			require.NoError(t, err)
			if !j.Status.Finished() {
				return false
			}
			out[id] = j
		}
		return true
	})
	return out
}

// double is the plain batch handler: each job's result is twice its n.
func (b *batchBundle) double(_ context.Context, jobs []*runner.Job[batchArgs]) ([]runner.BatchResult, error) {
	b.record(jobs)
	out := make([]runner.BatchResult, len(jobs))
	for i, j := range jobs {
		out[i].Result = map[string]int{"n": 2 * j.Args.N}
	}
	return out, nil
}

// HandleBatch refuses bounds it cannot honour, naming the value, and a kind twice.
func TestHandleBatchRefusesBadBounds(t *testing.T) {
	t.Parallel()
	r, err := runner.New(lazyPool(t), runner.Config{Queues: map[string]runner.QueueConfig{"default": {Workers: 1}}})
	require.NoError(t, err)
	fn := func(context.Context, []*runner.Job[batchArgs]) ([]runner.BatchResult, error) { return nil, nil }
	for want, call := range map[string]func() error{
		`batch size 0 for kind "k" is not valid (1 to 1000)`:        func() error { return runner.HandleBatch(r, "k", fn, 0, 0) },
		`batch size 1001 for kind "k" is not valid (1 to 1000)`:     func() error { return runner.HandleBatch(r, "k", fn, 1001, 0) },
		`batch linger -1ms for kind "k" is not valid (0 to 10s)`:    func() error { return runner.HandleBatch(r, "k", fn, 10, -time.Millisecond) },
		`batch linger 10.001s for kind "k" is not valid (0 to 10s)`: func() error { return runner.HandleBatch(r, "k", fn, 10, 10*time.Second+time.Millisecond) },
		`nil batch handler for kind "k"`: func() error {
			return runner.HandleBatch[batchArgs](r, "k", nil, 10, 0)
		},
		"kind is empty": func() error { return runner.HandleBatch(r, "", fn, 10, 0) },
	} {
		require.ErrorContains(t, call(), want)
	}
	require.NoError(t, runner.HandleBatch(r, "k", fn, runner.MaxBatch, runner.MaxBatchLinger))
	require.ErrorIs(t, runner.HandleBatch(r, "k", fn, 1, 0), runner.ErrKindRegistered)
	require.ErrorIs(t, runner.Handle(r, "k", func(context.Context, *runner.Job[batchArgs]) (any, error) { return nil, nil }),
		runner.ErrKindRegistered)
}

// A batch is sent as soon as it holds max jobs: with a linger far longer than the
// test, the handler sees all ten jobs in one call, and each job gets its own result.
func TestBatchFillsToMax(t *testing.T) {
	b := setupBatch(t, 20, runner.Config{})
	require.NoError(t, runner.HandleBatch(b.r, "double", b.double, 10, runner.MaxBatchLinger))
	testkit.StartRunner(t, b.r)
	ids := b.enqueue(t, "double", numbered(10)...)
	got := b.waitFinished(t, ids)
	require.Equal(t, []int{10}, b.sizes())
	require.ElementsMatch(t, ids, b.calls[0])
	for i, id := range ids {
		require.Equal(t, pgrun.StatusSucceeded, got[id].Status)
		require.JSONEq(t, fmt.Sprintf(`{"n": %d}`, 2*i), string(got[id].Result), "job %d has another job's result", id)
	}
}

// A batch holds at most as many jobs as its queue has slots (each job waits for its
// batch on its slot): with four slots and max 10, eight jobs go in two calls of four,
// each sent because it was full (the linger is longer than the test).
func TestBatchIsCappedAtTheQueueSlots(t *testing.T) {
	b := setupBatch(t, 4, runner.Config{})
	require.NoError(t, runner.HandleBatch(b.r, "double", b.double, 10, runner.MaxBatchLinger))
	testkit.StartRunner(t, b.r)
	ids := b.enqueue(t, "double", numbered(8)...)
	b.waitFinished(t, ids)
	require.Equal(t, []int{4, 4}, b.sizes())
}

// A batch that does not fill is sent when its linger has passed since its first job
// arrived: three jobs and a max of 100 make one call of three.
func TestBatchLingerSendsAPartialBatch(t *testing.T) {
	b := setupBatch(t, 200, runner.Config{})
	require.NoError(t, runner.HandleBatch(b.r, "double", b.double, 100, 300*time.Millisecond))
	testkit.StartRunner(t, b.r)
	ids := b.enqueue(t, "double", numbered(3)...)
	got := b.waitFinished(t, ids)
	require.Equal(t, []int{3}, b.sizes())
	for _, id := range ids {
		require.Equal(t, pgrun.StatusSucceeded, got[id].Status)
	}
}

// Each job of one batch ends on its own: one succeeds with its result, one fails and
// is retried (and then succeeds), one fails for good (Permanent), one asks to run
// later without spending an attempt (RetryLater). Each job's events and log lines are
// its own, as a per-job handler's are.
func TestBatchPerJobOutcomes(t *testing.T) {
	var outcomes []runner.OutcomeEvent
	var mu sync.Mutex
	b := setupBatch(t, 8, runner.Config{
		Hooks: []runner.Hooks{{OnOutcome: func(ev runner.OutcomeEvent) {
			mu.Lock()
			outcomes = append(outcomes, ev)
			mu.Unlock()
		}}},
	})
	require.NoError(t, runner.HandleBatch(b.r, "mixed", func(_ context.Context, jobs []*runner.Job[batchArgs]) ([]runner.BatchResult, error) {
		b.record(jobs)
		out := make([]runner.BatchResult, len(jobs))
		for i, j := range jobs {
			switch {
			case j.Attempt > 1 || j.Args.Mode == "ok":
				out[i].Result = map[string]any{"n": j.Args.N, "attempt": j.Attempt}
			case j.Args.Mode == "retry":
				out[i].Err = errors.New("flaky: try again")
			case j.Args.Mode == "permanent":
				out[i].Err = runner.Permanent(errors.New("bad input: no retry fixes it"))
			case j.Args.Mode == "later":
				out[i].Err = runner.RetryLater(10*time.Millisecond, "busy")
			}
		}
		return out, nil
	}, 4, 2*time.Second))
	testkit.StartRunner(t, b.r)
	ids := b.enqueue(t, "mixed", batchArgs{N: 0, Mode: "ok"}, batchArgs{N: 1, Mode: "retry"},
		batchArgs{N: 2, Mode: "permanent"}, batchArgs{N: 3, Mode: "later"})
	ok, retry, permanent, later := ids[0], ids[1], ids[2], ids[3]
	got := b.waitFinished(t, ids)
	require.Equal(t, 4, b.sizes()[0], "the four jobs were not one batch")

	require.Equal(t, pgrun.StatusSucceeded, got[ok].Status)
	require.JSONEq(t, `{"n": 0, "attempt": 1}`, string(got[ok].Result))

	require.Equal(t, pgrun.StatusSucceeded, got[retry].Status)
	require.Equal(t, 2, got[retry].Attempt)
	require.Equal(t, 1, got[retry].Failures)
	require.JSONEq(t, `{"n": 1, "attempt": 2}`, string(got[retry].Result))
	var message string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select message from pgrun.job_events where job_id = $1 and event = 'job.failed'`,
		retry).Scan(&message))
	require.Equal(t, "flaky: try again", message)

	require.Equal(t, pgrun.StatusFailed, got[permanent].Status)
	require.Equal(t, 1, got[permanent].Attempt, "a permanent error was retried")
	var e struct{ Class, Message string }
	require.NoError(t, json.Unmarshal(got[permanent].Error, &e))
	require.Equal(t, "bad input: no retry fixes it", e.Message)
	require.Nil(t, got[permanent].Result)

	require.Equal(t, pgrun.StatusSucceeded, got[later].Status)
	require.Equal(t, 2, got[later].Attempt)
	require.Equal(t, 0, got[later].Failures, "retry later spent an attempt")

	// One outcome per job and attempt, each the job's own.
	testkit.Eventually(t, 10*time.Second, "the outcome hooks of six attempts", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(outcomes) == 6
	})
	mu.Lock()
	defer mu.Unlock()
	byJob := map[int64][]runner.Outcome{}
	for _, ev := range outcomes {
		byJob[ev.Job.ID] = append(byJob[ev.Job.ID], ev.Outcome)
	}
	require.Equal(t, map[int64][]runner.Outcome{
		ok:        {runner.OutcomeSucceeded},
		retry:     {runner.OutcomeRetried, runner.OutcomeSucceeded},
		permanent: {runner.OutcomeFailed},
		later:     {runner.OutcomeRetryLater, runner.OutcomeSucceeded},
	}, byJob)
}

// A handler that returns results of the wrong length, or panics, fails every job of
// its batch with an error that says so (no result can be told to be whose), retried
// as any failure is; the runner carries on and the next attempts succeed.
func TestBatchWrongLengthOrPanicFailsEveryJob(t *testing.T) {
	b := setupBatch(t, 8, runner.Config{})
	misbehave := func(mode string) func(context.Context, []*runner.Job[batchArgs]) ([]runner.BatchResult, error) {
		return func(ctx context.Context, jobs []*runner.Job[batchArgs]) ([]runner.BatchResult, error) {
			if jobs[0].Attempt == 1 {
				if mode == "panic" {
					panic("the model fell over")
				}
				return make([]runner.BatchResult, len(jobs)-1), nil
			}
			return b.double(ctx, jobs)
		}
	}
	require.NoError(t, runner.HandleBatch(b.r, "short", misbehave("short"), 3, time.Second))
	require.NoError(t, runner.HandleBatch(b.r, "boom", misbehave("panic"), 3, time.Second))
	testkit.StartRunner(t, b.r)
	short := b.enqueue(t, "short", numbered(3)...)
	boom := b.enqueue(t, "boom", numbered(3)...)
	got := b.waitFinished(t, append(slices.Clone(short), boom...))
	for kind, ids := range map[string][]int64{"short": short, "boom": boom} {
		for _, id := range ids {
			require.Equal(t, pgrun.StatusSucceeded, got[id].Status, "%s job %d", kind, id)
			require.Equal(t, 2, got[id].Attempt, "%s job %d", kind, id)
			var class, message string
			require.NoError(t, b.Pool.QueryRow(b.Ctx, `select fields->>'class', message from pgrun.job_events
				where job_id = $1 and event = 'job.failed'`, id).Scan(&class, &message))
			if kind == "short" {
				require.Equal(t, "batch_result", class)
				require.Equal(t, `batch handler of "short" returned 2 results for 3 jobs`, message)
			} else {
				require.Equal(t, "panic", class)
				require.Equal(t, `batch handler of "boom" (3 jobs): handler panicked: the model fell over`, message)
			}
		}
	}
}

// Cancelling one job of a running batch cancels that job's context alone: the other
// jobs' contexts and the batch's stay live, the batch carries on, the others succeed,
// and the cancelled job stays cancelled whatever the handler returned for it. The
// watchdog does not count one job's cancel against a batch that is still at work;
// once every job of the batch is stopped the batch's ctx is cancelled too, and a
// batch that ignores it is abandoned as one handler.
func TestBatchCancelStopsOnlyThatJob(t *testing.T) {
	b := setupBatch(t, 8, runner.Config{
		Watchdog: runner.WatchdogConfig{AbandonAfter: 100 * time.Millisecond, Interval: 10 * time.Millisecond,
			OnTooManyAbandoned: func(int) {}},
	})
	hearsCancels := testkit.CancelProbe(t, b.DB, b.r)
	type call struct {
		ctx  context.Context
		jobs []*runner.Job[batchArgs]
	}
	calls := make(chan call, 2)
	release := make(chan struct{})
	require.NoError(t, runner.HandleBatch(b.r, "hold", func(ctx context.Context, jobs []*runner.Job[batchArgs]) ([]runner.BatchResult, error) {
		calls <- call{ctx, jobs}
		<-release // ignores every cancellation until the test lets go
		out := make([]runner.BatchResult, len(jobs))
		for i := range out {
			out[i].Result = "done"
		}
		return out, nil
	}, 3, runner.MaxBatchLinger))
	testkit.StartRunner(t, b.r)
	hearsCancels()

	// One job cancelled: its context alone.
	b.enqueue(t, "hold", numbered(3)...)
	var c call
	select {
	case c = <-calls:
	case <-time.After(20 * time.Second):
		t.Fatal("the batch did not start")
	}
	require.Len(t, c.jobs, 3)
	victim := c.jobs[1]
	_, err := b.c.Cancel(b.Ctx, victim.ID, "not needed")
	require.NoError(t, err)
	select {
	case <-victim.Context().Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the cancelled job's context was not cancelled")
	}
	require.ErrorIs(t, context.Cause(victim.Context()), runner.ErrJobCancelled)
	require.NoError(t, c.jobs[0].Context().Err())
	require.NoError(t, c.jobs[2].Context().Err())
	require.NoError(t, c.ctx.Err(), "one job's cancel cancelled the batch")
	require.False(t, testkit.Poll(time.Second, func() bool { return b.r.Abandoned() > 0 }),
		"the watchdog abandoned a batch that is still at work for its other jobs")
	release <- struct{}{}
	got := b.waitFinished(t, []int64{c.jobs[0].ID, c.jobs[1].ID, c.jobs[2].ID})
	require.Equal(t, pgrun.StatusSucceeded, got[c.jobs[0].ID].Status)
	require.Equal(t, pgrun.StatusCancelled, got[victim.ID].Status)
	require.Nil(t, got[victim.ID].Result, "the cancelled job took the handler's result")
	require.Equal(t, pgrun.StatusSucceeded, got[c.jobs[2].ID].Status)

	// Every job cancelled: the batch's ctx too, and a batch that ignores it is one
	// abandoned handler.
	ids := b.enqueue(t, "hold", numbered(3)...)
	select {
	case c = <-calls:
	case <-time.After(20 * time.Second):
		t.Fatal("the second batch did not start")
	}
	for _, id := range ids {
		_, err := b.c.Cancel(b.Ctx, id, "not needed")
		require.NoError(t, err)
	}
	select {
	case <-c.ctx.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the batch's ctx was not cancelled when all its jobs were")
	}
	require.ErrorIs(t, context.Cause(c.ctx), runner.ErrJobCancelled)
	testkit.Eventually(t, 10*time.Second, "the ignored batch to be abandoned", func() bool { return b.r.Abandoned() > 0 })
	require.Equal(t, int64(1), b.r.Abandoned(), "a batch counts as one abandoned handler")
	close(release)
}

// A shutdown sends a batch that is still gathering at once, inside the grace period:
// with a linger longer than the grace, its jobs succeed rather than go back to the
// queue. Without middleware the jobs a claim brought have joined their batch before
// the shutdown flushes it, so the two jobs of one claim go in one call.
func TestShutdownFlushesAGatheringBatch(t *testing.T) {
	b := setupBatch(t, 8, runner.Config{ShutdownGrace: 5 * time.Second})
	require.NoError(t, runner.HandleBatch(b.r, "double", b.double, 100, runner.MaxBatchLinger))
	stop := testkit.StartRunner(t, b.r)
	ids := b.enqueue(t, "double", numbered(2)...)
	testkit.Eventually(t, 20*time.Second, "both jobs to be claimed", func() bool {
		var n int
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs where id = any($1) and status = 'running'`,
			ids).Scan(&n))
		return n == 2
	})
	require.Empty(t, b.sizes(), "the batch went before its linger")
	began := time.Now()
	stop()
	require.Less(t, time.Since(began), runner.MaxBatchLinger, "the shutdown waited for the linger")
	got := b.waitFinished(t, ids)
	require.Equal(t, []int{2}, b.sizes())
	for _, id := range ids {
		require.Equal(t, pgrun.StatusSucceeded, got[id].Status, "job %d", id)
		require.Equal(t, 1, got[id].Attempt, "job %d went back to the queue", id)
	}
}

// With middleware each job waits for its batch inside it, on its own goroutine:
// what the middleware puts in the job's context reaches the handler through
// Job.Context, and a shutdown sends the gathering batch at once as above. (A job that
// entered the middleware may join after the flush, and then goes in a call of its
// own: the calls together hold both.)
func TestShutdownFlushesAGatheringBatchThroughMiddleware(t *testing.T) {
	type key struct{}
	arrived := make(chan int64, 8)
	b := setupBatch(t, 8, runner.Config{
		ShutdownGrace: 5 * time.Second,
		Middleware: []runner.Middleware{func(next runner.HandlerFunc) runner.HandlerFunc {
			return func(ctx context.Context, job *pgrun.Job) (any, error) {
				arrived <- job.ID
				return next(context.WithValue(ctx, key{}, job.ID), job)
			}
		}},
	})
	var mu sync.Mutex
	var tagged []int64
	require.NoError(t, runner.HandleBatch(b.r, "double", func(ctx context.Context, jobs []*runner.Job[batchArgs]) ([]runner.BatchResult, error) {
		mu.Lock()
		for _, j := range jobs {
			tagged = append(tagged, j.Context().Value(key{}).(int64))
		}
		mu.Unlock()
		return b.double(ctx, jobs)
	}, 100, runner.MaxBatchLinger))
	stop := testkit.StartRunner(t, b.r)
	ids := b.enqueue(t, "double", numbered(2)...)
	for range ids {
		select {
		case <-arrived:
		case <-time.After(20 * time.Second):
			t.Fatal("the jobs did not start")
		}
	}
	require.Empty(t, b.sizes(), "the batch went before its linger")
	began := time.Now()
	stop()
	require.Less(t, time.Since(began), runner.MaxBatchLinger, "the shutdown waited for the linger")
	got := b.waitFinished(t, ids)
	var called []int64
	b.mu.Lock()
	for _, c := range b.calls {
		called = append(called, c...)
	}
	b.mu.Unlock()
	require.ElementsMatch(t, ids, called)
	mu.Lock()
	require.ElementsMatch(t, ids, tagged)
	mu.Unlock()
	for _, id := range ids {
		require.Equal(t, pgrun.StatusSucceeded, got[id].Status, "job %d", id)
		require.Equal(t, 1, got[id].Attempt, "job %d went back to the queue", id)
	}
}

// Durable steps are refused to the jobs of a batch (ErrDurableInBatch), while the
// per-job helpers (Emit) work on each job.
func TestBatchRefusesDurableSteps(t *testing.T) {
	b := setupBatch(t, 8, runner.Config{})
	errs := make(chan error, 2)
	require.NoError(t, runner.HandleBatch(b.r, "steps", func(ctx context.Context, jobs []*runner.Job[batchArgs]) ([]runner.BatchResult, error) {
		j := jobs[0]
		_, err := runner.Step(j.Context(), j, "one", func(context.Context) (int, error) { return 1, nil })
		errs <- err
		errs <- j.Emit(j.Context(), "batch.saw", map[string]any{"jobs": len(jobs)})
		return make([]runner.BatchResult, len(jobs)), nil
	}, 1, 0))
	testkit.StartRunner(t, b.r)
	ids := b.enqueue(t, "steps", batchArgs{})
	b.waitFinished(t, ids)
	require.ErrorIs(t, <-errs, runner.ErrDurableInBatch)
	require.NoError(t, <-errs)
	var n int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.job_events where job_id = $1 and event = 'batch.saw'`,
		ids[0]).Scan(&n))
	require.Equal(t, 1, n)
}

// EmbedArgs are the args of an embed job: one text to embed.
type EmbedArgs struct {
	Text string `json:"text"`
}

// Embed texts in batches of up to 100: one model call for all of them, each job
// succeeding with its own vector or failing on its own.
func ExampleHandleBatch() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/app")
	if err != nil {
		panic(err)
	}
	r, err := runner.New(pool, runner.Config{Queues: map[string]runner.QueueConfig{"embed": {Workers: 200}}})
	if err != nil {
		panic(err)
	}
	embed := func(ctx context.Context, texts []string) ([][]float32, error) {
		return make([][]float32, len(texts)), nil
	}
	err = runner.HandleBatch(r, "embed", func(ctx context.Context, jobs []*runner.Job[EmbedArgs]) ([]runner.BatchResult, error) {
		texts := make([]string, len(jobs))
		for i, j := range jobs {
			texts[i] = j.Args.Text
		}
		vectors, err := embed(ctx, texts)
		if err != nil {
			return nil, err // every job of the batch fails with it, and is retried
		}
		out := make([]runner.BatchResult, len(jobs))
		for i, j := range jobs {
			if j.Args.Text == "" {
				out[i].Err = runner.Permanent(errors.New("nothing to embed")) // this job alone
				continue
			}
			out[i].Result = map[string]any{"vector": vectors[i]}
		}
		return out, nil
	}, 100, 50*time.Millisecond)
	if err != nil {
		panic(err)
	}
	_ = r.Run(ctx)
}
