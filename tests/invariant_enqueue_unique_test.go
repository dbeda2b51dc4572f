package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// An enqueue whose unique_key is being taken by another, uncommitted transaction waits
// for it; once that commits, the enqueue must return the holder (not nothing, and not
// a second job), whichever way it is made.
//
// Was a BUG (fixed): enqueue_jobs (and so pgrun.Enqueue and pgrun.EnqueueMany, which call it) loses
// the spec in this race. Its INSERT ... ON CONFLICT DO NOTHING waits for the other
// transaction and then skips the row, but the UNION ALL branch that should return the
// holder reads with the statement's snapshot, taken before the holder committed, so
// it does not see it: enqueue_jobs returns no row for that spec, and pgrun.Enqueue
// indexes jobs[0] of an empty slice and panics (index out of range). enqueue_job does
// not have the bug: it looks the holder up in a statement of its own.
func TestEnqueueRacingTheKeysHolderReturnsTheHolder(t *testing.T) {
	ways := []struct {
		name    string
		enqueue func(ctx context.Context, db testkit.Querier) ([]int64, error)
	}{
		{"enqueue_job", func(ctx context.Context, db testkit.Querier) ([]int64, error) {
			return kitIDs(ctx, db, `select id from pgrun.enqueue_job('report', unique_key => 'daily')`)
		}},
		{"enqueue_jobs", func(ctx context.Context, db testkit.Querier) ([]int64, error) {
			return kitIDs(ctx, db, `select id from pgrun.enqueue_jobs('[{"kind": "report", "unique_key": "daily"}]')`)
		}},
		{"pgrun.Enqueue", func(ctx context.Context, db testkit.Querier) ([]int64, error) {
			j, err := pgrun.Enqueue(ctx, db, "report", nil, pgrun.UniqueKey("daily"))
			if err != nil {
				return nil, err
			}
			return []int64{j.ID}, nil
		}},
	}
	for _, way := range ways {
		t.Run(way.name, func(t *testing.T) {
			b := testkit.Setup(t)
			holder, err := b.Pool.Begin(b.Ctx)
			require.NoError(t, err)
			defer holder.Rollback(b.Ctx)
			var holderID int64
			require.NoError(t, holder.QueryRow(b.Ctx, `select id from pgrun.enqueue_job('report', unique_key => 'daily')`).Scan(&holderID))

			conn, err := b.Pool.Acquire(b.Ctx)
			require.NoError(t, err)
			defer conn.Release()
			type outcome struct {
				ids []int64
				err error
			}
			done := make(chan outcome, 1)
			go func() {
				defer func() {
					if p := recover(); p != nil {
						done <- outcome{err: fmt.Errorf("panic: %v", p)}
					}
				}()
				ids, err := way.enqueue(b.Ctx, conn)
				done <- outcome{ids, err}
			}()
			testkit.WaitUntilBlocked(t, b, conn.Conn().PgConn().PID())
			require.NoError(t, holder.Commit(b.Ctx))

			var got outcome
			select {
			case got = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("the second enqueue did not return")
			}
			require.NoError(t, got.err)
			require.Equal(t, []int64{holderID}, got.ids, "the holder is returned in place of the duplicate")
			var n int
			require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs where unique_key = 'daily'`).Scan(&n))
			require.Equal(t, 1, n)
		})
	}
}

func kitIDs(ctx context.Context, db testkit.Querier, sql string, args ...any) ([]int64, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// A finished job frees its key: after the holder succeeds, enqueue_job and
// enqueue_jobs with the key each create a new job, and the new one then holds it.
func TestSucceededHolderFreesItsKey(t *testing.T) {
	b := testkit.Setup(t)
	first, err := kitIDs(b.Ctx, b.Pool, `select id from pgrun.enqueue_job('sync', unique_key => 'acct-1')`)
	require.NoError(t, err)
	again, err := kitIDs(b.Ctx, b.Pool, `select id from pgrun.enqueue_job('sync', unique_key => 'acct-1')`)
	require.NoError(t, err)
	require.Equal(t, first, again, "an active holder is returned")

	c := testkit.ClaimN(t, b.Pool, "default", "w", 1, "30 seconds")
	require.Equal(t, first[0], c[0].ID)
	again, err = kitIDs(b.Ctx, b.Pool, `select id from pgrun.enqueue_jobs('[{"kind": "sync", "unique_key": "acct-1"}]')`)
	require.NoError(t, err)
	require.Equal(t, first, again, "a running holder still holds the key")
	require.NotNil(t, testkit.NullID(t, b.Pool, `select (select max(x) from pgrun.complete_jobs(array[$1::bigint], array[$2::int]) x)`, c[0].ID, c[0].Attempt))

	viaOne, err := kitIDs(b.Ctx, b.Pool, `select id from pgrun.enqueue_job('sync', unique_key => 'acct-1')`)
	require.NoError(t, err)
	require.NotEqual(t, first, viaOne, "the key was freed when the holder succeeded")
	viaMany, err := kitIDs(b.Ctx, b.Pool, `select id from pgrun.enqueue_jobs('[{"kind": "sync", "unique_key": "acct-1"}]')`)
	require.NoError(t, err)
	require.Equal(t, viaOne, viaMany, "the new job holds the key now")
	var active int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs where unique_key = 'acct-1' and status = 'queued'`).Scan(&active))
	require.Equal(t, 1, active)
}

// Two specs with the same new key in one enqueue_jobs call make one job; a batch
// mixing a held key, a repeated new key and a key-less spec returns the holder, the
// new job and the key-less job.
func TestOneBatchNeverMakesTwoHoldersOfAKey(t *testing.T) {
	b := testkit.Setup(t)
	held, err := kitIDs(b.Ctx, b.Pool, `select id from pgrun.enqueue_job('sync', unique_key => 'held')`)
	require.NoError(t, err)
	got, err := kitIDs(b.Ctx, b.Pool, `select id from pgrun.enqueue_jobs('[
		{"kind": "sync", "unique_key": "held"},
		{"kind": "sync", "unique_key": "fresh", "args": {"n": 1}},
		{"kind": "sync", "unique_key": "fresh", "args": {"n": 2}},
		{"kind": "sync"}]')`)
	require.NoError(t, err)
	var fresh, plain int64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select
		(select id from pgrun.jobs where unique_key = 'fresh'), (select id from pgrun.jobs where unique_key is null)`).Scan(&fresh, &plain))
	require.Equal(t, []int64{held[0], fresh, fresh, plain}, got, "one row per spec, in order: the holder for a duplicate")
	var args string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select args::text from pgrun.jobs where id = $1`, fresh).Scan(&args))
	require.JSONEq(t, `{"n": 1}`, args, "the first spec of the batch takes the key")
}

// EnqueueMany in a transaction that rolls back leaves no rows and wakes nobody;
// committed, it wakes each of its queues once, and only at commit.
func TestEnqueueManyWakesEachQueueOnceAtCommit(t *testing.T) {
	b := testkit.Setup(t)
	l := testkit.Listen(t, b, pgrun.ChannelJobs)
	specs := []pgrun.JobSpec{
		{Kind: "a", Queue: "mail"}, {Kind: "b", Queue: "mail"}, {Kind: "c", Queue: "sms"}, {Kind: "d", Queue: "sms"},
	}
	tx, err := b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	_, err = pgrun.EnqueueMany(b.Ctx, tx, specs)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(b.Ctx))
	require.Zero(t, testkit.Counts(t, b.Pool)["jobs"])
	require.Nil(t, testkit.NextNotification(t, l, 300*time.Millisecond), "a rolled-back enqueue woke a listener")

	tx, err = b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.Ctx)
	_, err = pgrun.EnqueueMany(b.Ctx, tx, specs)
	require.NoError(t, err)
	require.Nil(t, testkit.NextNotification(t, l, 300*time.Millisecond), "woken before commit")
	require.NoError(t, tx.Commit(b.Ctx))
	woken := map[string]int{}
	for range 2 {
		n := testkit.NextNotification(t, l, 5*time.Second)
		require.NotNil(t, n, "a queue was not woken")
		woken[wakeQueue(n.Payload)]++
	}
	require.Equal(t, map[string]int{"mail": 1, "sms": 1}, woken)
	require.Nil(t, testkit.NextNotification(t, l, 300*time.Millisecond), "more than one wake-up per queue")
	require.Equal(t, 4, testkit.Counts(t, b.Pool)["jobs"])
}

// A multi-row plain INSERT with one bad row inserts none of them and wakes nobody; a
// plain INSERT of a held key is a unique_violation.
func TestPlainInsertIsAllOrNothing(t *testing.T) {
	b := testkit.Setup(t)
	l := testkit.Listen(t, b, pgrun.ChannelJobs)
	_, err := b.Pool.Exec(b.Ctx, `insert into pgrun.jobs (kind, args, queue) values
		('ok', '{}', 'default'), ('ok', '{}', 'other'), ('ok', '[1]', 'default')`)
	require.Equal(t, "22023", testkit.SQLState(err))
	require.Zero(t, testkit.Counts(t, b.Pool)["jobs"])
	require.Nil(t, testkit.NextNotification(t, l, 300*time.Millisecond))

	_, err = b.Pool.Exec(b.Ctx, `insert into pgrun.jobs (kind, unique_key) values ('ok', 'k')`)
	require.NoError(t, err)
	require.NotNil(t, testkit.NextNotification(t, l, 5*time.Second))
	_, err = b.Pool.Exec(b.Ctx, `insert into pgrun.jobs (kind, unique_key) values ('ok', 'k')`)
	require.Equal(t, "23505", testkit.SQLState(err))
	require.Equal(t, 1, testkit.Counts(t, b.Pool)["jobs"])
}

// unique_window also dedupes against a job that finished within the window; replace
// mode updates a still-queued holder's args.
func TestUniqueWindowAndReplace(t *testing.T) {
	b := testkit.Setup(t)
	first, err := pgrun.Enqueue(b.Ctx, b.Pool, "report", map[string]any{"v": 1}, pgrun.UniqueKey("daily"))
	require.NoError(t, err)
	replaced, err := pgrun.Enqueue(b.Ctx, b.Pool, "report", map[string]any{"v": 2}, pgrun.UniqueKey("daily"), pgrun.ReplaceDuplicate())
	require.NoError(t, err)
	require.Equal(t, first.ID, replaced.ID)
	require.JSONEq(t, `{"v": 2}`, string(replaced.Args))
	evs, err := pgrun.Events(b.Ctx, b.Pool, first.ID)
	require.NoError(t, err)
	require.Equal(t, "job.replaced", evs[0].Event)

	id, attempt := testkit.ClaimOne(t, b.Pool, "w", "30 seconds")
	require.Equal(t, first.ID, id)
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.complete_jobs(array[$1::bigint], array[$2::int])`, id, attempt)
	require.NoError(t, err)

	again, err := pgrun.Enqueue(b.Ctx, b.Pool, "report", nil, pgrun.UniqueKey("daily"), pgrun.UniqueWindow(time.Hour))
	require.NoError(t, err)
	require.Equal(t, first.ID, again.ID, "finished within the window")
	require.Equal(t, pgrun.StatusSucceeded, again.Status)
	fresh, err := pgrun.Enqueue(b.Ctx, b.Pool, "report", nil, pgrun.UniqueKey("daily"))
	require.NoError(t, err)
	require.NotEqual(t, first.ID, fresh.ID, "without a window only active jobs dedupe")
}
