package tests

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// clockConn is one connection whose pgrun.clock() is pinned with SET pgrun.now, for
// rules that depend on time (backoff, leases, timeouts) without sleeping.
type clockConn struct {
	t    *testing.T
	ctx  context.Context
	conn *pgxpool.Conn
}

func pinnedClock(t *testing.T, b *bundle, at time.Time) *clockConn {
	t.Helper()
	conn, err := b.pool.Acquire(b.ctx)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = conn.Exec(context.Background(), `reset pgrun.now`)
		conn.Release()
	})
	c := &clockConn{t: t, ctx: b.ctx, conn: conn}
	c.set(at)
	return c
}

// set moves the pinned clock to at.
func (c *clockConn) set(at time.Time) {
	c.t.Helper()
	_, err := c.conn.Exec(c.ctx, `select set_config('pgrun.now', $1, false)`, at.Format(time.RFC3339Nano))
	require.NoError(c.t, err)
}

// exec runs sql on the pinned connection.
func (c *clockConn) exec(sql string, args ...any) {
	c.t.Helper()
	_, err := c.conn.Exec(c.ctx, sql, args...)
	require.NoError(c.t, err)
}

// queryRow scans one row from the pinned connection.
func (c *clockConn) queryRow(sql string, args []any, dest ...any) {
	c.t.Helper()
	require.NoError(c.t, c.conn.QueryRow(c.ctx, sql, args...).Scan(dest...))
}

// rowJSON is a job row as JSON text: comparing it before and after a call proves the
// call changed nothing.
func rowJSON(t *testing.T, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, id int64) string {
	t.Helper()
	var s string
	require.NoError(t, db.QueryRow(context.Background(), `select row_to_json(j)::text from pgrun.jobs j where id = $1`, id).Scan(&s))
	return s
}

// tableCounts counts the rows of jobs and job_events.
func tableCounts(t *testing.T, b *bundle) [2]int {
	t.Helper()
	var c [2]int
	require.NoError(t, b.pool.QueryRow(b.ctx, `select (select count(*) from pgrun.jobs), (select count(*) from pgrun.job_events)`).Scan(&c[0], &c[1]))
	return c
}

// claimOne claims one job of queue default for worker and returns (id, attempt).
func claimOne(t *testing.T, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, worker string, lease string) (int64, int) {
	t.Helper()
	var id int64
	var attempt int
	require.NoError(t, db.QueryRow(context.Background(),
		`select id, attempt from pgrun.claim_jobs('default', $1, 1, $2::interval)`, worker, lease).Scan(&id, &attempt))
	return id, attempt
}
