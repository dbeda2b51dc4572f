package runner_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
)

// lazyPool is a pool that has not connected (pgxpool connects on first use): New
// must judge a configuration without the database.
func lazyPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// New refuses a configuration Run could not use, with an error naming the field and
// the value, before anything connects.
func TestNewRefusesABadConfig(t *testing.T) {
	t.Parallel()
	pool := lazyPool(t)
	one := map[string]runner.QueueConfig{"default": {Workers: 1}}
	for want, cfg := range map[string]runner.Config{
		"no queues configured":                   {},
		`queue name "Bad Name" is not valid`:     {Queues: map[string]runner.QueueConfig{"Bad Name": {Workers: 1}}},
		"queue default: workers 0 is not valid":  {Queues: map[string]runner.QueueConfig{"default": {}}},
		"lease 10ms is too short":                {Queues: one, Lease: 10 * time.Millisecond},
		"poll interval 1ms is too short":         {Queues: one, PollInterval: time.Millisecond},
		"telemetry interval 1ms is too short":    {Queues: one, TelemetryInterval: time.Millisecond},
		"max claim 20000 is not valid":           {Queues: one, MaxClaim: 20000},
		"complete linger 2s is over 1s":          {Queues: one, CompleteLinger: 2 * time.Second},
		"watchdog abandon-after -1s is negative": {Queues: one, Watchdog: runner.WatchdogConfig{AbandonAfter: -time.Second}},
	} {
		r, err := runner.New(pool, cfg)
		require.ErrorContains(t, err, want)
		require.Nil(t, r)
	}
	_, err := runner.New(nil, runner.Config{Queues: one})
	require.ErrorContains(t, err, "nil pool")
	r, err := runner.New(pool, runner.Config{Queues: one})
	require.NoError(t, err)
	require.NotEmpty(t, r.WorkerID())
}

// resizeArgs names its kind, so that the kind string is written once.
type resizeArgs struct {
	W int `json:"w"`
}

func (resizeArgs) Kind() string { return "resize" }

// A kind has one handler: registering it again, by name or through its args type, is
// an error, and so is an empty kind.
func TestHandleRefusesAKindTwice(t *testing.T) {
	t.Parallel()
	r, err := runner.New(lazyPool(t), runner.Config{Queues: map[string]runner.QueueConfig{"default": {Workers: 1}}})
	require.NoError(t, err)
	noop := func(context.Context, *runner.Job[resizeArgs]) (any, error) { return nil, nil }
	require.NoError(t, runner.HandleArgs(r, noop))
	err = runner.Handle(r, "resize", noop)
	require.True(t, errors.Is(err, runner.ErrKindRegistered), "Handle returned %v", err)
	require.ErrorContains(t, err, `"resize"`)
	require.True(t, errors.Is(runner.HandleArgs(r, noop), runner.ErrKindRegistered))
	require.ErrorContains(t, runner.Handle(r, "", noop), "kind is empty")

	require.NoError(t, runner.RegisterExamples(r))
	require.True(t, errors.Is(runner.RegisterExamples(r), runner.ErrKindRegistered), "the examples twice")
	require.True(t, errors.Is(runner.Handle(r, runner.KindNoop, noop), runner.ErrKindRegistered))
}

// A handler registered with HandleArgs runs the jobs of its args type's kind, with
// the args decoded.
func TestHandleArgsRunsTheKindTheArgsName(t *testing.T) {
	b := setupTx(t)
	require.NoError(t, runner.HandleArgs(b.r, func(_ context.Context, j *runner.Job[resizeArgs]) (any, error) {
		return map[string]int{"w": j.Args.W * 2}, nil
	}))
	args := resizeArgs{W: 21}
	job, err := pgrun.Enqueue(b.Ctx, b.Pool, args.Kind(), args)
	require.NoError(t, err)
	testkit.StartRunner(t, b.r)
	testkit.Eventually(t, 20*time.Second, "the job to succeed", func() bool {
		j, err := pgrun.GetJob(b.Ctx, b.Pool, job.ID)
		require.NoError(t, err)
		return j.Status == pgrun.StatusSucceeded
	})
	j, err := pgrun.GetJob(b.Ctx, b.Pool, job.ID)
	require.NoError(t, err)
	require.JSONEq(t, `{"w": 42}`, string(j.Result))
}

// A runner never fails a job whose kind it has no handler for: claim_jobs hands out
// only the kinds a worker handles, so the job stays queued (for a runner that does),
// and queue_stats counts it as unhandled.
func TestUnknownKindsStayQueued(t *testing.T) {
	b := testkit.Setup(t)
	r := testkit.NewRunner(b.Pool, runner.Config{})
	testkit.StartRunner(t, r)
	var resize int64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id from pgrun.enqueue_job('resize', '{"w": 64}')`).Scan(&resize))
	echo, err := pgrun.Enqueue(b.Ctx, b.Pool, runner.KindEcho, map[string]any{"after": "resize"})
	require.NoError(t, err)
	testkit.Eventually(t, 10*time.Second, "the echo job ran", func() bool { return testkit.JobStatus(t, b, echo.ID) == pgrun.StatusSucceeded })
	testkit.Eventually(t, 10*time.Second, "the runner advertised its kinds", func() bool {
		var unhandled int64
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select unhandled from pgrun.queue_stats where queue = 'default'`).Scan(&unhandled))
		return unhandled == 1
	})
	j, err := pgrun.GetJob(b.Ctx, b.Pool, resize)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusQueued, j.Status)
	require.Zero(t, j.Attempt, "never claimed")
	require.Zero(t, j.Failures)

	// From SQL: a worker in any language passes its kinds.
	var none int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.claim_jobs('default', 'py-worker', 10, kinds => array['echo'])`).Scan(&none))
	require.Zero(t, none, "nothing of other kinds")
	var got int64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id from pgrun.claim_jobs('default', 'py-worker', 10, kinds => array['resize'])`).Scan(&got))
	require.Equal(t, resize, got)
}

// runner.Config is validated by runner.New, with one readable error naming the field.
func TestRunnerConfigIsValidated(t *testing.T) {
	b := testkit.Setup(t)
	for _, tc := range []struct {
		cfg  runner.Config
		says string
	}{
		{runner.Config{Lease: time.Nanosecond}, "lease 1ns is too short"},
		{runner.Config{Lease: -time.Second}, "lease -1s is too short"},
		{runner.Config{ShutdownGrace: -5 * time.Second}, "shutdown grace -5s is negative"},
		{runner.Config{WorkerID: strings.Repeat("w", 3000)}, "worker id is 3000 characters"},
		{runner.Config{Queues: map[string]runner.QueueConfig{"default": {Workers: 1 << 40}}}, "workers 1099511627776 is not valid"},
		{runner.Config{PollInterval: time.Microsecond}, "poll interval 1µs is too short"},
	} {
		if tc.cfg.Queues == nil {
			tc.cfg.Queues = map[string]runner.QueueConfig{"default": {Workers: 8}}
		}
		_, err := runner.New(b.Pool, tc.cfg)
		require.ErrorContains(t, err, tc.says)
		require.NotContains(t, err.Error(), "\n")
	}
}
