// Package tests holds integration and invariant tests of pgrun against a real
// PostgreSQL server. Each test gets its own database, cloned from a migrated template
// (internal/testdb).
package tests

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testdb"
	"github.com/pgrun/pgrun/runner"
)

// bundle is what most tests need: a context and a pool on their own database.
type bundle struct {
	ctx  context.Context
	pool *pgxpool.Pool
	url  string
}

func setup(t *testing.T) *bundle {
	t.Helper()
	t.Parallel()
	url := testdb.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return &bundle{ctx: ctx, pool: testdb.PoolFor(t, url), url: url}
}

// quietLogger discards runner logs unless -v is given.
func quietLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.Default()
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// startRunner runs r in the background; the returned stop cancels it and waits for
// Run to return (also at test end).
func startRunner(t *testing.T, r *runner.Runner) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(time.Minute):
			t.Fatal("runner did not stop within a minute")
		}
	}
	t.Cleanup(stop)
	return stop
}

// newRunner builds a runner with test-friendly settings and the example handlers
// (runner.RegisterExamples). A configuration the runner refuses panics: it is the
// test's mistake.
func newRunner(pool *pgxpool.Pool, cfg runner.Config) *runner.Runner {
	r := newBareRunner(pool, cfg)
	if err := runner.RegisterExamples(r); err != nil {
		panic(err)
	}
	return r
}

// newBareRunner is newRunner without the example handlers, for tests that handle
// one of the example kinds their own way.
func newBareRunner(pool *pgxpool.Pool, cfg runner.Config) *runner.Runner {
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	if cfg.Queues == nil {
		cfg.Queues = map[string]runner.QueueConfig{"default": {Workers: 8}}
	}
	if cfg.ShutdownGrace == 0 {
		cfg.ShutdownGrace = 2 * time.Second // a failed test should not wait 25 s to stop
	}
	r, err := runner.New(pool, cfg)
	if err != nil {
		panic(err)
	}
	return r
}

// handle registers fn for kind on r, failing the test if the runner refuses it.
func handle[T any](t *testing.T, r *runner.Runner, kind string, fn func(context.Context, *runner.Job[T]) (any, error)) {
	t.Helper()
	require.NoError(t, runner.Handle(r, kind, fn))
}

// eventually polls cond every 10 ms until it returns true or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// jobStatus reads one job's status.
func jobStatus(t *testing.T, b *bundle, id int64) pgrun.JobStatus {
	t.Helper()
	j, err := pgrun.GetJob(b.ctx, b.pool, id)
	require.NoError(t, err)
	return j.Status
}

// countStatus counts jobs in status s.
func countStatus(t *testing.T, b *bundle, s pgrun.JobStatus) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, `select count(*) from pgrun.jobs where status = $1::pgrun.job_status`, string(s)).Scan(&n))
	return n
}

// sqlState returns the SQLSTATE of err, or "".
func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}
