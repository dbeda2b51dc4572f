package tests

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// kitDB is what a pool, a connection and a transaction share.
type kitDB interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	Query(context.Context, string, ...any) (pgx.Rows, error)
	QueryRow(context.Context, string, ...any) pgx.Row
}

// kitClaim is one claimed job: its id and the attempt that is its claim token.
type kitClaim struct {
	id      int64
	attempt int32
}

// kitClaimN claims up to n jobs of queue for worker and returns them in id order.
func kitClaimN(t *testing.T, db kitDB, queue, worker string, n int, lease string) []kitClaim {
	t.Helper()
	rows, err := db.Query(context.Background(),
		`select id, attempt from pgrun.claim_jobs($1, $2, $3, $4::interval) order by id`, queue, worker, n, lease)
	require.NoError(t, err)
	var out []kitClaim
	var c kitClaim
	_, err = pgx.ForEachRow(rows, []any{&c.id, &c.attempt}, func() error {
		out = append(out, c)
		return nil
	})
	require.NoError(t, err)
	return out
}

// kitSnapshot is everything a call could change about one job: the whole row as JSON
// and the number of its audit events.
type kitSnapshot struct {
	row    string
	events int
}

func kitSnap(t *testing.T, db kitDB, id int64) kitSnapshot {
	t.Helper()
	var s kitSnapshot
	require.NoError(t, db.QueryRow(context.Background(),
		`select row_to_json(j)::text, (select count(*) from pgrun.job_events e where e.job_id = j.id)
		 from pgrun.jobs j where j.id = $1`, id).Scan(&s.row, &s.events))
	return s
}

// kitCounts counts the rows of every table bad input must leave alone.
func kitCounts(t *testing.T, db kitDB) map[string]int {
	t.Helper()
	var jobs, events, workers, queues, archive int
	require.NoError(t, db.QueryRow(context.Background(), `select
		(select count(*) from pgrun.jobs), (select count(*) from pgrun.job_events),
		(select count(*) from pgrun.workers), (select count(*) from pgrun.queues),
		(select count(*) from pgrun.jobs_archive)`).Scan(&jobs, &events, &workers, &queues, &archive))
	return map[string]int{"jobs": jobs, "job_events": events, "workers": workers, "queues": queues, "jobs_archive": archive}
}

// kitNullID runs sql, which selects one nullable bigint, and returns it (nil: NULL).
func kitNullID(t *testing.T, db kitDB, sql string, args ...any) *int64 {
	t.Helper()
	var id *int64
	require.NoError(t, db.QueryRow(context.Background(), sql, args...).Scan(&id))
	return id
}

// kitPgError returns err as a *pgconn.PgError, failing the test if it is not one.
func kitPgError(t *testing.T, err error, what string) *pgconn.PgError {
	t.Helper()
	var pe *pgconn.PgError
	require.Truef(t, errors.As(err, &pe), "%s: want a PostgreSQL error, got %v", what, err)
	return pe
}

// kitListen opens a connection of its own that LISTENs on channel.
func kitListen(t *testing.T, b *bundle, channel string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(b.ctx, b.url)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	_, err = conn.Exec(b.ctx, `listen `+pgx.Identifier{channel}.Sanitize())
	require.NoError(t, err)
	return conn
}

// kitNextNotification waits up to d for a notification on conn; nil if none came (a
// bounded wait for an absence, which no poll can replace).
func kitNextNotification(t *testing.T, conn *pgx.Conn, d time.Duration) *pgconn.Notification {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	n, err := conn.WaitForNotification(ctx)
	if ctx.Err() != nil {
		return nil
	}
	require.NoError(t, err)
	return n
}

// kitWaitUntilBlocked polls until backend pid waits on a lock held by another
// transaction.
func kitWaitUntilBlocked(t *testing.T, b *bundle, pid uint32) {
	t.Helper()
	eventually(t, 10*time.Second, "the backend to wait on a lock", func() bool {
		var waiting bool
		require.NoError(t, b.pool.QueryRow(b.ctx,
			`select coalesce(bool_or(wait_event_type = 'Lock'), false) from pg_stat_activity where pid = $1`, int32(pid)).Scan(&waiting))
		return waiting
	})
}

// kitPoll polls cond every 10 ms, as eventually does, and reports whether it became
// true within d; the caller then asserts with a message that says what went wrong.
func kitPoll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}
