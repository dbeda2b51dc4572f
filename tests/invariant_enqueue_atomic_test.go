package tests

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
)

// listener LISTENs on pgrun_jobs on a connection of its own.
func listener(t *testing.T, b *bundle) *pgx.Conn {
	t.Helper()
	return listenOn(t, b, "pgrun_jobs")
}

// listenOn LISTENs on channel on a connection of its own.
func listenOn(t *testing.T, b *bundle, channel string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(b.ctx, b.url)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	_, err = conn.Exec(b.ctx, `listen `+pgx.Identifier{channel}.Sanitize())
	require.NoError(t, err)
	return conn
}

// quietFor reports whether no notification arrives within d: a bounded wait for an
// absence, which no poll can replace.
func quietFor(t *testing.T, conn *pgx.Conn, d time.Duration) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	n, err := conn.WaitForNotification(ctx)
	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		return true
	}
	require.NoError(t, err)
	t.Logf("unexpected notification %s %q", n.Channel, n.Payload)
	return false
}

// A rolled-back enqueue leaves no row and wakes nobody; a committed one wakes
// listeners only once it commits, with the queue name as payload.
func TestEnqueueAndWakeupAreTransactional(t *testing.T) {
	b := setup(t)
	l := listener(t, b)

	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	job, err := pgrun.Enqueue(b.ctx, tx, "noop", nil, pgrun.Queue("mail"))
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(b.ctx))
	_, err = pgrun.GetJob(b.ctx, b.pool, job.ID)
	require.ErrorIs(t, err, pgrun.ErrNotFound)
	require.True(t, quietFor(t, l, 300*time.Millisecond), "a rolled-back enqueue woke a listener")

	tx, err = b.pool.Begin(b.ctx)
	require.NoError(t, err)
	_, err = pgrun.Enqueue(b.ctx, tx, "noop", nil, pgrun.Queue("mail"))
	require.NoError(t, err)
	require.True(t, quietFor(t, l, 300*time.Millisecond), "woken before commit")
	require.NoError(t, tx.Commit(b.ctx))
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	n, err := l.WaitForNotification(ctx)
	require.NoError(t, err)
	require.Equal(t, "pgrun_jobs", n.Channel)
	require.Equal(t, "mail", wakeQueue(n.Payload))
}

// wakeQueue is the queue a pgrun_jobs payload names: up to its first space (an
// insert's wake-up adds the least key of what it inserted).
func wakeQueue(payload string) string {
	q, _, _ := strings.Cut(payload, " ")
	return q
}

// A plain INSERT is an enqueue: validated by the trigger, defaults filled, and the
// listeners woken.
func TestPlainInsertIsValidatedAndNotifies(t *testing.T) {
	b := setup(t)
	l := listener(t, b)
	_, err := b.pool.Exec(b.ctx, `insert into pgrun.jobs (kind, args, queue) values ('resize', '{"w": 64}', 'Bad Queue')`)
	require.Equal(t, "22023", sqlState(err))
	require.Equal(t, [2]int{0, 0}, tableCounts(t, b))

	var id int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `insert into pgrun.jobs (kind, args, queue, attempt, claimed_by)
		values ('resize', '{"w": 64}', 'images', 7, 'sneaky') returning id`).Scan(&id))
	j, err := pgrun.GetJob(b.ctx, b.pool, id)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusQueued, j.Status)
	require.Zero(t, j.Attempt, "engine-owned fields are reset")
	require.Nil(t, j.ClaimedBy)
	require.Equal(t, 25, j.MaxAttempts)
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	n, err := l.WaitForNotification(ctx)
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("images 0 %d %d", j.RunAt.UnixMicro(), j.ID), n.Payload,
		"the queue, then the job's key: priority, run_at in microseconds, id")
}

// While an active job holds a unique key, enqueueing with the key returns it; once
// it finishes, the key is free again.
func TestUniqueKeyDeduplicatesActiveJobs(t *testing.T) {
	b := setup(t)
	first, err := pgrun.Enqueue(b.ctx, b.pool, "report", nil, pgrun.UniqueKey("daily-2030-01-01"))
	require.NoError(t, err)
	again, err := pgrun.Enqueue(b.ctx, b.pool, "report", map[string]any{"other": true}, pgrun.UniqueKey("daily-2030-01-01"))
	require.NoError(t, err)
	require.Equal(t, first.ID, again.ID)
	many, err := pgrun.EnqueueMany(b.ctx, b.pool, []pgrun.JobSpec{
		{Kind: "report", UniqueKey: "daily-2030-01-01"},
		{Kind: "report", UniqueKey: "daily-2030-01-02"},
	})
	require.NoError(t, err)
	require.Len(t, many, 2)
	ids := []int64{many[0].ID, many[1].ID}
	require.Contains(t, ids, first.ID, "the holder is returned in place of the duplicate")
	require.Equal(t, 2, countStatus(t, b, pgrun.StatusQueued))

	_, err = pgrun.Cancel(b.ctx, b.pool, first.ID, "")
	require.NoError(t, err)
	fresh, err := pgrun.Enqueue(b.ctx, b.pool, "report", nil, pgrun.UniqueKey("daily-2030-01-01"))
	require.NoError(t, err)
	require.NotEqual(t, first.ID, fresh.ID)
}
