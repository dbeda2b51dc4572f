package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
)

// Enqueue options land in the row.
func TestEnqueueOptionsLandInTheRow(t *testing.T) {
	b := testkit.Setup(t)
	at := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	j, err := pgrun.Enqueue(b.Ctx, b.Pool, "resize", map[string]any{"w": 64},
		pgrun.Queue("images"), pgrun.Priority(7), pgrun.RunAt(at), pgrun.MaxAttempts(3),
		pgrun.UniqueKey("img-1"), pgrun.Timeout(90*time.Second), pgrun.Model("clip"),
		pgrun.Meta(map[string]any{"tenant": "acme"}))
	require.NoError(t, err)
	got, err := pgrun.GetJob(b.Ctx, b.Pool, j.ID)
	require.NoError(t, err)
	require.Equal(t, "images", got.Queue)
	require.EqualValues(t, 7, got.Priority)
	require.True(t, at.Equal(got.RunAt))
	require.Equal(t, 3, got.MaxAttempts)
	require.Equal(t, "img-1", *got.UniqueKey)
	require.Equal(t, 90*time.Second, *got.Timeout)
	require.Equal(t, "clip", *got.Model)
	require.JSONEq(t, `{"tenant": "acme"}`, string(got.Meta))
	require.JSONEq(t, `{"w": 64}`, string(got.Args))

	_, err = pgrun.GetJob(b.Ctx, b.Pool, 999)
	require.ErrorIs(t, err, pgrun.ErrNotFound)
}

// A job enqueued with plain SQL (as psql or any other language would) is run by the
// Go runner, and what happened is visible with SQL.
func TestSQLEnqueuedJobRunsAndIsObservableWithSQL(t *testing.T) {
	b := testkit.Setup(t)
	var id int64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id from pgrun.enqueue_job('echo', '{"x": 1}', queue => 'default')`).Scan(&id))
	testkit.StartRunner(t, testkit.NewRunner(b.Pool, runner.Config{}))
	testkit.Eventually(t, 10*time.Second, "the job succeeded", func() bool { return testkit.JobStatus(t, b, id) == pgrun.StatusSucceeded })

	var result string
	var succeeded int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select result::text from pgrun.jobs where id = $1`, id).Scan(&result))
	require.JSONEq(t, `{"x": 1}`, result)
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select succeeded_1m from pgrun.queue_stats where queue = 'default'`).Scan(&succeeded))
	require.Equal(t, 1, succeeded)
	var workers int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.worker_status where state = 'running'`).Scan(&workers))
	require.Equal(t, 1, workers)
	// Registered before it claimed: the runner heartbeats before its first claim (an
	// operator's worker control reaches a claim through the worker's row).
	var registeredFirst bool
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select w.started_at <= j.started_at
		from pgrun.jobs j join pgrun.workers w on w.id = j.claimed_by where j.id = $1`, id).Scan(&registeredFirst))
	require.True(t, registeredFirst, "the worker claimed before its first heartbeat")
}
