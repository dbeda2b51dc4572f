package testkit

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// Clock is the tests' one fake clock, for rules that depend on time (backoff, leases,
// timeouts, schedules) without sleeping. Go code that takes a now func gets Now; the
// database's pgrun.clock() follows it on the clock's own connection (Conn), where
// SET pgrun.now pins it: test databases honour that setting (internal/testdb enables
// the test clock), production ones never do.
type Clock struct {
	t  testing.TB
	db *DB

	// Conn is the connection whose pgrun.clock() reads the clock (nil for a clock
	// made by NewClock). Statements sent on it see the clock's time; statements on
	// the test's pool see the real one.
	Conn *pgxpool.Conn

	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock at at for Go code only (a now func): it has no connection.
func NewClock(at time.Time) *Clock { return &Clock{now: at} }

// PinClock returns a clock at at with a connection of db's pool of its own, whose
// pgrun.clock() reads the clock. The connection is reset and released when the test
// ends.
func PinClock(t testing.TB, db *DB, at time.Time) *Clock {
	t.Helper()
	conn, err := db.Pool.Acquire(db.Ctx)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = conn.Exec(context.Background(), `reset pgrun.now`)
		conn.Release()
	})
	c := &Clock{t: t, db: db, Conn: conn}
	c.Set(at)
	return c
}

// At parses an RFC 3339 instant, for clocks set to fixed times.
func At(s string) time.Time {
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return v
}

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to at (backwards too).
func (c *Clock) Set(at time.Time) {
	c.mu.Lock()
	c.now = at
	c.mu.Unlock()
	if c.Conn != nil {
		c.t.Helper()
		_, err := c.Conn.Exec(c.db.Ctx, `select set_config('pgrun.now', $1, false)`, at.Format(time.RFC3339Nano))
		require.NoError(c.t, err)
	}
}

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) {
	if c.Conn != nil {
		c.t.Helper()
	}
	c.Set(c.Now().Add(d))
}

// Exec runs sql on the clock's connection.
func (c *Clock) Exec(sql string, args ...any) {
	c.t.Helper()
	_, err := c.Conn.Exec(c.db.Ctx, sql, args...)
	require.NoError(c.t, err)
}

// QueryRow scans one row from the clock's connection.
func (c *Clock) QueryRow(sql string, args []any, dest ...any) {
	c.t.Helper()
	require.NoError(c.t, c.Conn.QueryRow(c.db.Ctx, sql, args...).Scan(dest...))
}

// PinTx has the rest of transaction tx read the clock's time (SET LOCAL), for
// concurrent callers that each need a connection of their own. It returns the error
// rather than failing the test, since it may run off the test's goroutine.
func (c *Clock) PinTx(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `select set_config('pgrun.now', $1, true)`, c.Now().Format(time.RFC3339Nano))
	return err
}

// Pool opens a pool on the clock's database whose sessions read the clock's time as
// it is now (each session's pgrun.now is set when it connects; later moves of the
// clock do not reach them). It is closed when the test ends.
func (c *Clock) Pool() *pgxpool.Pool {
	c.t.Helper()
	cfg, err := pgxpool.ParseConfig(c.db.URL)
	require.NoError(c.t, err)
	cfg.ConnConfig.RuntimeParams["pgrun.now"] = c.Now().Format(time.RFC3339Nano)
	pool, err := pgxpool.NewWithConfig(c.db.Ctx, cfg)
	require.NoError(c.t, err)
	c.t.Cleanup(pool.Close)
	return pool
}
