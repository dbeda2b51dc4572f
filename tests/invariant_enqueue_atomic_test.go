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
	"github.com/pgrun/pgrun/internal/testkit"
)

// listener LISTENs on pgrun_jobs on a connection of its own.
func listener(t *testing.T, b *testkit.DB) *pgx.Conn {
	t.Helper()
	return testkit.Listen(t, b, "pgrun_jobs")
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
	b := testkit.Setup(t)
	l := listener(t, b)

	tx, err := b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	job, err := pgrun.Enqueue(b.Ctx, tx, "noop", nil, pgrun.Queue("mail"))
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(b.Ctx))
	_, err = pgrun.GetJob(b.Ctx, b.Pool, job.ID)
	require.ErrorIs(t, err, pgrun.ErrNotFound)
	require.True(t, quietFor(t, l, 300*time.Millisecond), "a rolled-back enqueue woke a listener")

	tx, err = b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	_, err = pgrun.Enqueue(b.Ctx, tx, "noop", nil, pgrun.Queue("mail"))
	require.NoError(t, err)
	require.True(t, quietFor(t, l, 300*time.Millisecond), "woken before commit")
	require.NoError(t, tx.Commit(b.Ctx))
	ctx, cancel := context.WithTimeout(b.Ctx, 5*time.Second)
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
	b := testkit.Setup(t)
	l := listener(t, b)
	_, err := b.Pool.Exec(b.Ctx, `insert into pgrun.jobs (kind, args, queue) values ('resize', '{"w": 64}', 'Bad Queue')`)
	require.Equal(t, "22023", testkit.SQLState(err))
	require.Equal(t, [2]int{0, 0}, testkit.TableCounts(t, b))

	var id int64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `insert into pgrun.jobs (kind, args, queue, attempt, claimed_by)
		values ('resize', '{"w": 64}', 'images', 7, 'sneaky') returning id`).Scan(&id))
	j, err := pgrun.GetJob(b.Ctx, b.Pool, id)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusQueued, j.Status)
	require.Zero(t, j.Attempt, "engine-owned fields are reset")
	require.Nil(t, j.ClaimedBy)
	require.Equal(t, 25, j.MaxAttempts)
	ctx, cancel := context.WithTimeout(b.Ctx, 5*time.Second)
	defer cancel()
	n, err := l.WaitForNotification(ctx)
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("images 0 %d %d", j.RunAt.UnixMicro(), j.ID), n.Payload,
		"the queue, then the job's key: priority, run_at in microseconds, id")
}

// While an active job holds a unique key, enqueueing with the key returns it; once
// it finishes, the key is free again.
func TestUniqueKeyDeduplicatesActiveJobs(t *testing.T) {
	b := testkit.Setup(t)
	first, err := pgrun.Enqueue(b.Ctx, b.Pool, "report", nil, pgrun.UniqueKey("daily-2030-01-01"))
	require.NoError(t, err)
	again, err := pgrun.Enqueue(b.Ctx, b.Pool, "report", map[string]any{"other": true}, pgrun.UniqueKey("daily-2030-01-01"))
	require.NoError(t, err)
	require.Equal(t, first.ID, again.ID)
	many, err := pgrun.EnqueueMany(b.Ctx, b.Pool, []pgrun.JobSpec{
		{Kind: "report", UniqueKey: "daily-2030-01-01"},
		{Kind: "report", UniqueKey: "daily-2030-01-02"},
	})
	require.NoError(t, err)
	require.Len(t, many, 2)
	ids := []int64{many[0].ID, many[1].ID}
	require.Contains(t, ids, first.ID, "the holder is returned in place of the duplicate")
	require.Equal(t, 2, testkit.CountStatus(t, b, pgrun.StatusQueued))

	_, err = pgrun.Cancel(b.Ctx, b.Pool, first.ID, "")
	require.NoError(t, err)
	fresh, err := pgrun.Enqueue(b.Ctx, b.Pool, "report", nil, pgrun.UniqueKey("daily-2030-01-01"))
	require.NoError(t, err)
	require.NotEqual(t, first.ID, fresh.ID)
}
