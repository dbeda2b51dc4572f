package testkit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/runner"
)

// QuietLogger discards runner logs unless -v is given.
func QuietLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.Default()
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// NewRunner builds a runner with test-friendly settings and the example handlers
// (runner.RegisterExamples). A configuration the runner refuses panics: it is the
// test's mistake.
func NewRunner(pool *pgxpool.Pool, cfg runner.Config) *runner.Runner {
	r := NewBareRunner(pool, cfg)
	if err := runner.RegisterExamples(r); err != nil {
		panic(err)
	}
	return r
}

// NewBareRunner is NewRunner without the example handlers, for tests that handle one
// of the example kinds their own way. Unset, the logger is QuietLogger, the queues
// are default with 8 workers, and the shutdown grace is 2 s (a failed test should not
// wait 25 s to stop).
func NewBareRunner(pool *pgxpool.Pool, cfg runner.Config) *runner.Runner {
	if cfg.Logger == nil {
		cfg.Logger = QuietLogger()
	}
	if cfg.Queues == nil {
		cfg.Queues = map[string]runner.QueueConfig{"default": {Workers: 8}}
	}
	if cfg.ShutdownGrace == 0 {
		cfg.ShutdownGrace = 2 * time.Second
	}
	r, err := runner.New(pool, cfg)
	if err != nil {
		panic(err)
	}
	return r
}

// StartRunner runs r in the background; the returned stop cancels it, waits for Run
// to return and checks its error. Stop is called at test end too (once in all).
func StartRunner(t testing.TB, r *runner.Runner) (stop func()) {
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

// Handle registers fn for kind on r, failing the test if the runner refuses it.
func Handle[T any](t testing.TB, r *runner.Runner, kind string, fn func(context.Context, *runner.Job[T]) (any, error)) {
	t.Helper()
	require.NoError(t, runner.Handle(r, kind, fn))
}

// Buffer is a bytes.Buffer safe for concurrent writes (a logger's, a process's
// output) and reads.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// JSONLines decodes every line of text as a JSON object (failing the test on one that
// is not) and returns those whose msg is msg: the records of a JSON slog handler.
func JSONLines(t testing.TB, text, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		var rec map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &rec), "not a JSON line: %s", sc.Text())
		if rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// CancelProbe registers kind cancel-probe on r and returns hearsCancels, which waits,
// once r runs, until r hears cancel notifications. Run connects its listener
// alongside its first claims, so a job can start before the runner can hear that it
// was cancelled (lease renewal would stop it, much later): a test that times how soon
// a cancel reaches a handler waits for this first. hearsCancels runs a probe job in
// queue default (r must serve it), cancels it, and repeats the notification until
// the probe's handler is stopped. Lease renewal, every third of r's lease, could stop
// it too: with a lease longer than the test, only the notification can.
func CancelProbe(t testing.TB, b *DB, r *runner.Runner) (hearsCancels func()) {
	t.Helper()
	started := make(chan struct{}, 1)
	stopped := make(chan struct{}, 1)
	Handle(t, r, "cancel-probe", func(ctx context.Context, _ *runner.Job[struct{}]) (any, error) {
		started <- struct{}{}
		<-ctx.Done()
		stopped <- struct{}{}
		return nil, ctx.Err()
	})
	return func() {
		t.Helper()
		probe, err := pgrun.Enqueue(b.Ctx, b.Pool, "cancel-probe", nil)
		require.NoError(t, err)
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("the cancel probe did not start")
		}
		_, err = pgrun.Cancel(b.Ctx, b.Pool, probe.ID, "probe")
		require.NoError(t, err)
		Eventually(t, 30*time.Second, "the runner to hear cancel notifications", func() bool {
			select {
			case <-stopped:
				return true
			default:
			}
			_, err := b.Pool.Exec(b.Ctx, `select pg_notify('pgrun_cancel', $1::bigint::text)`, probe.ID)
			require.NoError(t, err)
			return false
		})
	}
}
