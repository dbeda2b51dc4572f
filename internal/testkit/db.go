// Package testkit is the one kit of helpers for pgrun's own tests (tests/ and the
// runner's): a database per test, polling with a deadline, the fake clock, runners
// started and stopped with the test, and the SQL that tests use to set up and inspect
// jobs. Every test runs against a real PostgreSQL (internal/testdb); nothing here is
// a mock.
//
// The helpers take the test first and fail it on any error, so that a test's body
// reads as the behaviour under test. Package runner's own internal tests cannot use
// it (this package imports runner); they use internal/testdb directly.
package testkit

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testdb"
)

// DB is what most tests need: a context bounded for the test, and a pool on the
// test's own database, whose URL other connections (a role's pool, a listener, a
// `runner` process) use.
type DB struct {
	Ctx  context.Context
	Pool *pgxpool.Pool
	URL  string
}

// Setup marks t parallel (the database is its own) and returns a fresh migrated
// database for it, dropped when the test ends.
func Setup(t *testing.T) *DB {
	t.Helper()
	t.Parallel()
	return NewDB(t)
}

// NewDB is Setup for a caller that decides on parallelism itself (a test that makes
// two databases, a benchmark).
func NewDB(t testing.TB) *DB {
	t.Helper()
	url := testdb.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return &DB{Ctx: ctx, Pool: testdb.PoolFor(t, url), URL: url}
}

// ExecAll runs each statement on db's pool in turn, failing the test at the first
// that fails (a test's set-up: queues, settings).
func ExecAll(t testing.TB, db *DB, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		_, err := db.Pool.Exec(db.Ctx, s)
		require.NoError(t, err, s)
	}
}

// Querier is what a pool, a connection and a transaction share.
type Querier interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	Query(context.Context, string, ...any) (pgx.Rows, error)
	QueryRow(context.Context, string, ...any) pgx.Row
}

// Eventually polls cond every 10 ms until it returns true, failing the test with
// what it waited for if within passes first.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Poll(within, cond) {
		t.Fatalf("timed out after %s waiting for %s", within, what)
	}
}

// Poll polls cond every 10 ms, as Eventually does, and reports whether it became
// true within d; the caller then asserts with a message that says what went wrong.
func Poll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// SQLState returns the SQLSTATE of err, or "".
func SQLState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// PgError returns err as a *pgconn.PgError, failing the test if it is not one.
func PgError(t testing.TB, err error, what string) *pgconn.PgError {
	t.Helper()
	var pe *pgconn.PgError
	require.Truef(t, errors.As(err, &pe), "%s: want a PostgreSQL error, got %v", what, err)
	return pe
}

// Listen opens a connection of its own that LISTENs on channel, closed when the test
// ends.
func Listen(t testing.TB, db *DB, channel string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(db.Ctx, db.URL)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	_, err = conn.Exec(db.Ctx, `listen `+pgx.Identifier{channel}.Sanitize())
	require.NoError(t, err)
	return conn
}

// NextNotification waits up to d for a notification on conn; nil if none came (a
// bounded wait for an absence, which no poll can replace).
func NextNotification(t testing.TB, conn *pgx.Conn, d time.Duration) *pgconn.Notification {
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

// WaitUntilBlocked polls until backend pid waits on a lock held by another
// transaction.
func WaitUntilBlocked(t testing.TB, db *DB, pid uint32) {
	t.Helper()
	Eventually(t, 10*time.Second, "the backend to wait on a lock", func() bool {
		var waiting bool
		require.NoError(t, db.Pool.QueryRow(db.Ctx,
			`select coalesce(bool_or(wait_event_type = 'Lock'), false) from pg_stat_activity where pid = $1`, int32(pid)).Scan(&waiting))
		return waiting
	})
}
