package tests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
)

// durableArgs drive the durable handlers of these tests.
type durableArgs struct {
	Event  string `json:"event,omitempty"`
	WaitMS int    `json:"wait_ms,omitempty"`
}

func waitFor(t *testing.T, b *testkit.DB, id int64, want pgrun.JobStatus) *pgrun.Job {
	t.Helper()
	testkit.Eventually(t, 30*time.Second, fmt.Sprintf("job %d %s", id, want), func() bool {
		return testkit.JobStatus(t, b, id) == want
	})
	j, err := pgrun.GetJob(b.Ctx, b.Pool, id)
	require.NoError(t, err)
	return j
}

func enqueueDurable(t *testing.T, b *testkit.DB, kind string, args durableArgs, opts ...pgrun.Option) int64 {
	t.Helper()
	j, err := pgrun.Enqueue(b.Ctx, b.Pool, kind, args, opts...)
	require.NoError(t, err)
	return j.ID
}

// A step that succeeded is not run again on a later attempt: its recorded result is
// returned instead. A step that failed is not recorded and runs again.
func TestDurableStepsRunOnceAcrossAttempts(t *testing.T) {
	b := testkit.Setup(t)
	var charged, flaky atomic.Int32
	r := testkit.NewBareRunner(b.Pool, runner.Config{})
	testkit.Handle(t, r, "order", func(ctx context.Context, j *runner.Job[durableArgs]) (any, error) {
		receipt, err := runner.Step(ctx, j, "charge", func(context.Context) (string, error) {
			return fmt.Sprintf("receipt-%d", charged.Add(1)), nil
		})
		if err != nil {
			return nil, err
		}
		n, err := runner.Step(ctx, j, "flaky", func(context.Context) (int32, error) {
			if flaky.Add(1) == 1 {
				return 0, errors.New("the mail server is down")
			}
			return flaky.Load(), nil
		})
		if err != nil {
			return nil, err
		}
		return map[string]any{"receipt": receipt, "mails": n}, nil
	})
	id := enqueueDurable(t, b, "order", durableArgs{})
	testkit.StartRunner(t, r)
	j := waitFor(t, b, id, pgrun.StatusSucceeded)
	require.JSONEq(t, `{"receipt": "receipt-1", "mails": 2}`, string(j.Result))
	require.Equal(t, int32(1), charged.Load(), "the recorded step ran once")
	require.Equal(t, int32(2), flaky.Load(), "the failed step ran again")
	require.Equal(t, 2, j.Attempt)
	var steps []string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select array_agg(name || '@' || position order by position) from pgrun.job_steps where job_id = $1`, id).Scan(&steps))
	require.Equal(t, []string{"charge@0", "flaky@1"}, steps)
}

// A durable sleep ends the claim and frees the slot: with one slot, a job enqueued
// after the sleeper runs while it sleeps; the sleeper comes back after its time,
// without spending an attempt, and the sleep is not repeated.
func TestDurableSleepFreesTheSlot(t *testing.T) {
	b := testkit.Setup(t)
	var sleeps atomic.Int32
	r := testkit.NewBareRunner(b.Pool, runner.Config{Queues: map[string]runner.QueueConfig{"default": {Workers: 1}}})
	testkit.Handle(t, r, "napper", func(ctx context.Context, j *runner.Job[durableArgs]) (any, error) {
		if err := runner.Sleep(ctx, j, "nap", 300*time.Millisecond); err != nil {
			sleeps.Add(1)
			return nil, err
		}
		return "rested", nil
	})
	testkit.Handle(t, r, "quick", func(context.Context, *runner.Job[durableArgs]) (any, error) { return "done", nil })
	sleeper := enqueueDurable(t, b, "napper", durableArgs{})
	testkit.StartRunner(t, r)
	testkit.Eventually(t, 10*time.Second, "the sleeper parked", func() bool { return sleeps.Load() == 1 })
	quick := enqueueDurable(t, b, "quick", durableArgs{})
	q := waitFor(t, b, quick, pgrun.StatusSucceeded)
	s := waitFor(t, b, sleeper, pgrun.StatusSucceeded)
	require.True(t, q.FinishedAt.Before(*s.FinishedAt), "the quick job ran in the sleeper's slot while it slept")
	require.Equal(t, int32(1), sleeps.Load(), "the sleep was not repeated")
	require.Equal(t, 2, s.Attempt, "claimed twice")
	require.Zero(t, s.Failures, "no attempt spent")
}

// An awaited event reaches the handler whether it was emitted before the await or
// after the job parked; the first emit of a name wins; a wait that times out resumes
// the handler with ErrEventTimeout.
func TestDurableAwaitEvent(t *testing.T) {
	b := testkit.Setup(t)
	r := testkit.NewBareRunner(b.Pool, runner.Config{MaintenanceInterval: 100 * time.Millisecond})
	testkit.Handle(t, r, "payer", func(ctx context.Context, j *runner.Job[durableArgs]) (any, error) {
		payload, err := runner.AwaitEvent(ctx, j, j.Args.Event, time.Duration(j.Args.WaitMS)*time.Millisecond)
		if errors.Is(err, runner.ErrEventTimeout) {
			return map[string]any{"timeout": true}, nil
		}
		if err != nil {
			return nil, err
		}
		return payload, nil
	})
	emit := func(name, payload string) bool {
		var first bool
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select pgrun.emit_event($1, $2::jsonb)`, name, payload).Scan(&first))
		return first
	}
	require.True(t, emit("payment:early", `{"amount": 1}`))
	early := enqueueDurable(t, b, "payer", durableArgs{Event: "payment:early"})
	late := enqueueDurable(t, b, "payer", durableArgs{Event: "payment:late"})
	never := enqueueDurable(t, b, "payer", durableArgs{Event: "payment:never", WaitMS: 300})
	testkit.StartRunner(t, r)
	require.JSONEq(t, `{"amount": 1}`, string(waitFor(t, b, early, pgrun.StatusSucceeded).Result))
	waitFor(t, b, late, pgrun.StatusWaiting)
	require.True(t, emit("payment:late", `{"amount": 2}`))
	require.False(t, emit("payment:late", `{"amount": 3}`), "the first emit wins")
	require.JSONEq(t, `{"amount": 2}`, string(waitFor(t, b, late, pgrun.StatusSucceeded).Result))
	require.JSONEq(t, `{"timeout": true}`, string(waitFor(t, b, never, pgrun.StatusSucceeded).Result))
}

// A spawned child is enqueued once across retries of its parent, and AwaitJob parks
// the parent until the child finishes, then returns the child's result.
func TestDurableSpawnOnceAndAwaitTheChild(t *testing.T) {
	b := testkit.Setup(t)
	r := testkit.NewBareRunner(b.Pool, runner.Config{})
	testkit.Handle(t, r, "parent", func(ctx context.Context, j *runner.Job[durableArgs]) (any, error) {
		child, err := runner.Spawn(ctx, j, "child", pgrun.JobSpec{Kind: "child", Args: map[string]int{"n": 21}})
		if err != nil {
			return nil, err
		}
		if j.Attempt == 1 {
			return nil, errors.New("crash after the spawn")
		}
		done, err := runner.AwaitJob(ctx, j, child, time.Minute)
		if err != nil {
			return nil, err
		}
		return done.Result, nil
	})
	testkit.Handle(t, r, "child", func(_ context.Context, j *runner.Job[map[string]int]) (any, error) {
		return map[string]int{"doubled": j.Args["n"] * 2}, nil
	})
	id := enqueueDurable(t, b, "parent", durableArgs{})
	testkit.StartRunner(t, r)
	p := waitFor(t, b, id, pgrun.StatusSucceeded)
	require.JSONEq(t, `{"doubled": 42}`, string(p.Result))
	require.Equal(t, 1, countRows(t, b, `select count(*) from pgrun.jobs where kind = 'child'`), "one child across retries")
	require.GreaterOrEqual(t, p.Attempt, 2, "the crash, then (a park and) the resume")
	require.Equal(t, 1, p.Failures, "only the crash spent an attempt")
}

// A resumed handler that asks for its steps in an order that contradicts what was
// recorded fails with class step_mismatch, naming both, instead of feeding one
// step's result to another.
func TestDurableStepMismatchFailsTheAttempt(t *testing.T) {
	b := testkit.Setup(t)
	r := testkit.NewBareRunner(b.Pool, runner.Config{})
	var mismatch atomic.Bool
	testkit.Handle(t, r, "changed", func(ctx context.Context, j *runner.Job[durableArgs]) (any, error) {
		first := "reserve"
		if j.Attempt > 1 {
			first = "charge" // the code changed under the job
		}
		if _, err := runner.Step(ctx, j, first, func(context.Context) (int, error) { return 1, nil }); err != nil {
			mismatch.Store(errors.Is(err, runner.ErrStepMismatch))
			return nil, err
		}
		return nil, errors.New("crash")
	})
	id := enqueueDurable(t, b, "changed", durableArgs{}, pgrun.MaxAttempts(2))
	testkit.StartRunner(t, r)
	j := waitFor(t, b, id, pgrun.StatusFailed)
	var e struct{ Class, Message string }
	require.NoError(t, json.Unmarshal(j.Error, &e))
	require.Equal(t, "step_mismatch", e.Class)
	require.Contains(t, e.Message, "'charge'")
	require.Contains(t, e.Message, "'reserve'")
	require.True(t, mismatch.Load(), "the handler saw ErrStepMismatch")
}

// StepTx records the step in the handler's own transaction: when the transaction
// rolls back, neither the write nor the record remains, and the step runs again.
func TestDurableStepTxCommitsWithItsWrites(t *testing.T) {
	b := testkit.Setup(t)
	testkit.ExecAll(t, b, `create table ledger (job bigint, n int)`)
	var runs atomic.Int32
	r := testkit.NewBareRunner(b.Pool, runner.Config{})
	testkit.Handle(t, r, "ledger", func(ctx context.Context, j *runner.Job[durableArgs]) (any, error) {
		tx, err := b.Pool.Begin(ctx)
		if err != nil {
			return nil, err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		n, err := runner.StepTx(ctx, j, tx, "write", func(ctx context.Context, tx pgx.Tx) (int32, error) {
			n := runs.Add(1)
			_, err := tx.Exec(ctx, `insert into ledger values ($1, $2)`, j.ID, n)
			return n, err
		})
		if err != nil {
			return nil, err
		}
		if j.Attempt == 1 {
			return nil, errors.New("crash before the commit") // rolls the write and its record back
		}
		return n, tx.Commit(ctx)
	})
	id := enqueueDurable(t, b, "ledger", durableArgs{})
	testkit.StartRunner(t, r)
	waitFor(t, b, id, pgrun.StatusSucceeded)
	require.Equal(t, int32(2), runs.Load(), "the rolled-back step ran again")
	require.Equal(t, 1, countRows(t, b, `select count(*) from ledger`), "one write committed, with its record")
	require.Equal(t, 1, countRows(t, b, `select count(*) from pgrun.job_steps where name = 'write'`))
}

// Client.Wait returns a job's final state as soon as it finishes (LISTEN, no
// polling), and at once for a job that already has; an unknown job is ErrNotFound.
func TestClientWaitReturnsTheFinishedJob(t *testing.T) {
	b := testkit.Setup(t)
	c, err := pgrun.NewClient(b.Pool, pgrun.Config{})
	require.NoError(t, err)
	job, err := c.Enqueue(b.Ctx, "echo", map[string]int{"n": 7})
	require.NoError(t, err)
	got := make(chan *pgrun.Job, 1)
	go func() {
		j, err := c.Wait(b.Ctx, job.ID)
		if err == nil {
			got <- j
		}
		close(got)
	}()
	// The watch is registered before the job runs.
	testkit.Eventually(t, 10*time.Second, "the watch", func() bool {
		return countRows(t, b, `select count(*) from pgrun.job_waits where awaited_job is not null`) == 1
	})
	testkit.StartRunner(t, testkit.NewRunner(b.Pool, runner.Config{}))
	select {
	case j := <-got:
		require.NotNil(t, j)
		require.Equal(t, pgrun.StatusSucceeded, j.Status)
		require.JSONEq(t, `{"n": 7}`, string(j.Result))
	case <-time.After(30 * time.Second):
		t.Fatal("Wait did not return")
	}
	again, err := c.Wait(b.Ctx, job.ID)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusSucceeded, again.Status)
	_, err = c.Wait(b.Ctx, 1<<40)
	require.ErrorIs(t, err, pgrun.ErrNotFound)
}
