package runner_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
)

// txBundle is a database with a table of the handler's own writes, and a runner on
// it whose logs are kept.
type txBundle struct {
	*testkit.DB
	r    *runner.Runner
	logs *testkit.Buffer
}

func setupTx(t *testing.T) *txBundle {
	t.Helper()
	db := testkit.Setup(t)
	_, err := db.Pool.Exec(db.Ctx, `create table thumbnails (job_id bigint primary key)`)
	require.NoError(t, err)
	logs := &testkit.Buffer{}
	r, err := runner.New(db.Pool, runner.Config{
		Queues:        map[string]runner.QueueConfig{"default": {Workers: 2}},
		Logger:        slog.New(slog.NewTextHandler(logs, nil)),
		ShutdownGrace: time.Second,
		Lease:         time.Second, // renewed every third of a second
	})
	require.NoError(t, err)
	return &txBundle{DB: db, r: r, logs: logs}
}

// thumbnail is the handler of the tests below: in one transaction it records a row
// for the job and completes the job with result "from the transaction", then commits
// or rolls back as told, and returns "from the handler". After a commit it stays
// until the runner has renewed its leases since, and records in stopped whether its
// context had been cancelled by then.
func thumbnail(pool *pgxpool.Pool, commit bool, stopped *atomic.Value) func(context.Context, *runner.Job[struct{}]) (any, error) {
	return func(ctx context.Context, j *runner.Job[struct{}]) (any, error) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return nil, err
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		if _, err := tx.Exec(ctx, `insert into thumbnails (job_id) values ($1)`, j.ID); err != nil {
			return nil, err
		}
		if err := runner.CompleteTx(ctx, tx, j.Job, "from the transaction"); err != nil {
			return nil, err
		}
		if !commit {
			return "from the handler", tx.Rollback(ctx)
		}
		if err := tx.Commit(ctx); err != nil {
			return nil, err
		}
		// Two heartbeats after the commit: the renewal sent with the first has been
		// acted on by the time the second is sent.
		// (Not cancelled with ctx: the handler must see whether ctx was cancelled.)
		wctx := context.WithoutCancel(ctx)
		var since time.Time
		if err := pool.QueryRow(wctx, `select clock_timestamp()`).Scan(&since); err != nil {
			return nil, err
		}
		for range 2 {
			if since, err = nextHeartbeat(wctx, pool, since); err != nil {
				return nil, err
			}
		}
		stopped.Store(context.Cause(ctx) != nil)
		return "from the handler", nil
	}
}

// nextHeartbeat waits for the runner's heartbeat (sent with each lease renewal) to be
// newer than since, and returns its time.
func nextHeartbeat(ctx context.Context, pool *pgxpool.Pool, since time.Time) (time.Time, error) {
	var last *time.Time
	var err error
	if !testkit.Poll(10*time.Second, func() bool {
		err = pool.QueryRow(ctx, `select max(last_seen) from pgrun.workers`).Scan(&last)
		return err != nil || (last != nil && last.After(since))
	}) {
		return since, errors.New("no heartbeat within 10 s")
	}
	if err != nil {
		return since, err
	}
	return *last, nil
}

// thumbnails counts the handler's rows for job id.
func (b *txBundle) thumbnails(t *testing.T, id int64) int {
	t.Helper()
	var n int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from thumbnails where job_id = $1`, id).Scan(&n))
	return n
}

// A handler that writes and calls CompleteTx in one transaction commits both at
// once: the row and the job's success (with the result given to CompleteTx) are
// visible together. A lease renewal after the commit does not take the finished job
// for a lost lease (the handler is not cancelled), and the runner's own completion
// that follows changes nothing (the result stays the transaction's) and logs
// nothing amiss.
func TestCompleteTxCommitsTheHandlersWritesWithTheCompletion(t *testing.T) {
	b := setupTx(t)
	var stopped atomic.Value
	require.NoError(t, runner.Handle(b.r, "thumbnail", thumbnail(b.Pool, true, &stopped)))
	job, err := pgrun.Enqueue(b.Ctx, b.Pool, "thumbnail", nil)
	require.NoError(t, err)
	testkit.StartRunner(t, b.r)

	testkit.Eventually(t, 20*time.Second, "the handler to return", func() bool { return stopped.Load() != nil })
	require.Equal(t, false, stopped.Load(), "the handler's context was cancelled after its commit")
	testkit.Eventually(t, 20*time.Second, "the runner to report the job", func() bool { return b.r.Stats().Completed == 1 })
	j, err := pgrun.GetJob(b.Ctx, b.Pool, job.ID)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusSucceeded, j.Status)
	require.JSONEq(t, `"from the transaction"`, string(j.Result), "the runner's report after the commit finished nothing")
	require.Equal(t, 1, j.Attempt)
	require.Equal(t, 1, b.thumbnails(t, job.ID))

	require.NotContains(t, b.logs.String(), "level=ERROR")
	require.NotContains(t, b.logs.String(), "level=WARN")
}

// A transaction that rolls back takes the completion with it: neither the row nor
// the success is visible, and when the handler then returns success the runner
// completes the job itself, with the handler's result.
func TestCompleteTxRolledBackLeavesTheJobToTheRunner(t *testing.T) {
	b := setupTx(t)
	require.NoError(t, runner.Handle(b.r, "thumbnail", thumbnail(b.Pool, false, nil)))
	job, err := pgrun.Enqueue(b.Ctx, b.Pool, "thumbnail", nil)
	require.NoError(t, err)
	testkit.StartRunner(t, b.r)

	testkit.Eventually(t, 20*time.Second, "the job to succeed", func() bool {
		j, err := pgrun.GetJob(b.Ctx, b.Pool, job.ID)
		require.NoError(t, err)
		return j.Status == pgrun.StatusSucceeded
	})
	j, err := pgrun.GetJob(b.Ctx, b.Pool, job.ID)
	require.NoError(t, err)
	require.JSONEq(t, `"from the handler"`, string(j.Result), "the rolled-back completion left no trace")
	require.Equal(t, 1, j.Attempt)
	require.Zero(t, b.thumbnails(t, job.ID))
	require.NotContains(t, b.logs.String(), "level=ERROR")
}

// CompleteTx refuses a job that is not running under the claim it names (here: it
// was never claimed), with ErrLeaseLost, so that the handler rolls its writes back.
func TestCompleteTxRefusesAJobNotRunningUnderItsClaim(t *testing.T) {
	b := setupTx(t)
	job, err := pgrun.Enqueue(b.Ctx, b.Pool, "thumbnail", nil)
	require.NoError(t, err)
	tx, err := b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.Ctx) }()
	err = runner.CompleteTx(b.Ctx, tx, job, nil)
	require.True(t, errors.Is(err, runner.ErrLeaseLost), "CompleteTx returned %v", err)
	require.True(t, strings.HasPrefix(err.Error(), "complete job "), err.Error())
	require.NoError(t, tx.Rollback(b.Ctx))
	j, err := pgrun.GetJob(b.Ctx, b.Pool, job.ID)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusQueued, j.Status)
}
