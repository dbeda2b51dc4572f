package tests

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// Pausing or resuming a queue that does not exist fails with P0002 and creates
// nothing: a mistyped name must not look like a paused queue.
func TestPauseOfUnknownQueueFailsAndCreatesNothing(t *testing.T) {
	b := testkit.Setup(t)
	_, err := pgrun.Enqueue(b.Ctx, b.Pool, "resize", nil, pgrun.Queue("images"))
	require.NoError(t, err)
	for _, fn := range []string{"pause_queue", "resume_queue"} {
		_, err := b.Pool.Exec(b.Ctx, `select pgrun.`+fn+`('imagse')`)
		require.Equal(t, "P0002", testkit.SQLState(err), fn)
		require.ErrorContains(t, err, "queue 'imagse' does not exist", fn)
		require.Contains(t, pgHint(err), "SELECT name, paused FROM pgrun.queues", fn)

		_, err = b.Pool.Exec(b.Ctx, `select pgrun.`+fn+`('Images!')`)
		require.Equal(t, "22023", testkit.SQLState(err), fn)
		_, err = b.Pool.Exec(b.Ctx, `select pgrun.`+fn+`(null)`)
		require.Equal(t, "22023", testkit.SQLState(err), fn)
	}
	var names []string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select array_agg(name order by name) from pgrun.queues`).Scan(&names))
	require.Equal(t, []string{"images"}, names)
	var paused bool
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select paused from pgrun.queues where name = 'images'`).Scan(&paused))
	require.False(t, paused, "a typo must not pause the queue it resembles")
}

// set_queue still creates a queue before its first job, and that queue can then be
// paused and resumed: the pause holds for jobs enqueued later.
func TestQueueConfiguredBeforeItsFirstJobCanBePaused(t *testing.T) {
	b := testkit.Setup(t)
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.set_queue('fresh')`)
	require.NoError(t, err)
	var paused bool
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select paused from pgrun.pause_queue('fresh')`).Scan(&paused))
	require.True(t, paused)
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select paused from pgrun.pause_queue('fresh')`).Scan(&paused))
	require.True(t, paused, "pausing twice is harmless")

	_, err = pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil, pgrun.Queue("fresh"))
	require.NoError(t, err)
	require.Zero(t, claimCount(t, b.Pool, "fresh", "w", 10))
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select paused from pgrun.resume_queue('fresh')`).Scan(&paused))
	require.False(t, paused)
	require.Equal(t, 1, claimCount(t, b.Pool, "fresh", "w", 10))
}

// Dead letters are listed per queue and kind and redriven in bulk.
func TestDeadLettersRedriveInBulk(t *testing.T) {
	b := testkit.Setup(t)
	for _, spec := range []struct{ kind, queue string }{{"resize", "images"}, {"resize", "images"}, {"resize", "other"}, {"mail", "images"}} {
		_, err := pgrun.Enqueue(b.Ctx, b.Pool, spec.kind, nil, pgrun.Queue(spec.queue), pgrun.MaxAttempts(1))
		require.NoError(t, err)
	}
	for _, q := range []string{"images", "other"} {
		_, err := b.Pool.Exec(b.Ctx, `select pgrun.fail_job(id, attempt, '{"message": "broken"}') from pgrun.claim_jobs($1, 'w', 10)`, q)
		require.NoError(t, err)
	}
	require.Equal(t, 4, testkit.CountStatus(t, b, pgrun.StatusFailed))
	var n int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select pgrun.retry_jobs(queue => 'images', kind => 'resize')`).Scan(&n))
	require.Equal(t, 2, n)
	require.Equal(t, 2, testkit.CountStatus(t, b, pgrun.StatusQueued))
	require.Equal(t, 2, testkit.CountStatus(t, b, pgrun.StatusFailed))
}
