package pgruntest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testdb"
	"github.com/pgrun/pgrun/pgruntest"
)

// recorder is a testing.TB whose Fatalf records the message and ends only the
// goroutine it was called on, so that a test can check what a helper would have
// failed with.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// failure runs fn with a recorder in a goroutine of its own and returns the message
// fn failed with ("" if it did not fail).
func failure(t *testing.T, fn func(tb testing.TB)) string {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(r)
	}()
	<-done
	return r.msg
}

func setup(t *testing.T) (context.Context, *pgrun.Client) {
	t.Helper()
	t.Parallel()
	pool := testdb.Pool(t)
	c, err := pgrun.NewClient(pool, pgrun.Config{})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx, c
}

// RequireEnqueued finds the newest job that matches, and fails, listing what is
// there, when none does.
func TestRequireEnqueued(t *testing.T) {
	ctx, c := setup(t)
	_, err := c.Enqueue(ctx, "email", map[string]any{"to": "ada@example.com", "lang": "en"}, pgrun.Queue("mail"))
	require.NoError(t, err)
	newest, err := c.Enqueue(ctx, "email", map[string]any{"to": "bob@example.com"}, pgrun.Priority(3))
	require.NoError(t, err)

	require.Equal(t, newest.ID, pgruntest.RequireEnqueued(t, c.Pool(), "email", nil).ID, "the newest of two")
	j := pgruntest.RequireEnqueued(t, c.Pool(), "email", &pgruntest.EnqueuedOpts{
		Args: map[string]any{"to": "ada@example.com"}, Queue: "mail", Status: []pgrun.JobStatus{pgrun.StatusQueued},
	})
	require.Equal(t, "mail", j.Queue, "args are matched by containment: lang need not be given")
	require.Equal(t, newest.ID, pgruntest.RequireEnqueued(t, c.Pool(), "email", &pgruntest.EnqueuedOpts{Priority: new(3)}).ID)

	msg := failure(t, func(tb testing.TB) {
		pgruntest.RequireEnqueued(tb, c.Pool(), "email", &pgruntest.EnqueuedOpts{Args: map[string]any{"to": "eve@example.com"}})
	})
	require.Contains(t, msg, `no job of kind "email" with args containing {"to":"eve@example.com"} was enqueued`)
	require.Contains(t, msg, fmt.Sprintf(`job %d: kind "email", queue default, queued, priority 3`, newest.ID), "lists what is there")
	require.Contains(t, msg, `"ada@example.com"`)

	msg = failure(t, func(tb testing.TB) { pgruntest.RequireEnqueued(tb, c.Pool(), "sms", nil) })
	require.Contains(t, msg, `no job of kind "sms" was enqueued; the jobs are:`)
}

// RequireNotEnqueued passes when nothing matches and names what does otherwise. A
// job enqueued in a transaction is seen by that transaction only.
func TestRequireNotEnqueued(t *testing.T) {
	ctx, c := setup(t)
	pgruntest.RequireNotEnqueued(t, c.Pool(), "email", nil)
	tx, err := c.Pool().Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	j, err := c.EnqueueTx(ctx, tx, "email", map[string]any{"to": "ada@example.com"})
	require.NoError(t, err)
	pgruntest.RequireNotEnqueued(t, c.Pool(), "email", nil)
	pgruntest.RequireEnqueued(t, tx, "email", nil)
	pgruntest.RequireNotEnqueued(t, tx, "email", &pgruntest.EnqueuedOpts{Queue: "other"})

	msg := failure(t, func(tb testing.TB) { pgruntest.RequireNotEnqueued(tb, tx, "email", nil) })
	require.Contains(t, msg, `1 job(s) of kind "email" were enqueued, expected none`)
	require.Contains(t, msg, fmt.Sprintf("job %d:", j.ID))
}

// WorkOne runs the due job through the handler and reports its outcome with the SQL
// API: a result completes it, an error fails the attempt and the engine retries it,
// a permanent class fails it for good.
func TestWorkOne(t *testing.T) {
	ctx, c := setup(t)
	later, err := c.Enqueue(ctx, "resize", map[string]any{"w": 1}, pgrun.RunAt(time.Now().Add(time.Hour)))
	require.NoError(t, err)
	first, err := c.Enqueue(ctx, "resize", map[string]any{"w": 64}, pgrun.Queue("images"), pgrun.MaxAttempts(2))
	require.NoError(t, err)

	var seen *pgrun.Job
	done := pgruntest.WorkOne(ctx, t, c.Pool(), "resize", func(ctx context.Context, j *pgrun.Job) (any, error) {
		seen = j
		return map[string]any{"thumb": "a.png"}, nil
	})
	require.Equal(t, first.ID, seen.ID, "the due job, not the one scheduled for later")
	require.Equal(t, pgrun.StatusRunning, seen.Status)
	require.Equal(t, 1, seen.Attempt)
	require.Equal(t, pgrun.StatusSucceeded, done.Status)
	require.JSONEq(t, `{"thumb": "a.png"}`, string(done.Result))
	require.Equal(t, pgruntest.Worker, *done.ClaimedBy)

	again, err := c.Enqueue(ctx, "resize", map[string]any{"w": 0}, pgrun.MaxAttempts(3))
	require.NoError(t, err)
	failed := pgruntest.WorkOne(ctx, t, c.Pool(), "resize", func(context.Context, *pgrun.Job) (any, error) {
		return nil, errors.New("disk full")
	})
	require.Equal(t, again.ID, failed.ID)
	require.Equal(t, pgrun.StatusQueued, failed.Status, "retried with backoff: attempts remain")
	require.Equal(t, 1, failed.Failures)
	require.JSONEq(t, `"disk full"`, jsonField(t, failed.Error, "message"))

	bad, err := c.Enqueue(ctx, "parse", nil)
	require.NoError(t, err)
	final := pgruntest.WorkOne(ctx, t, c.Pool(), "parse", func(context.Context, *pgrun.Job) (any, error) {
		return nil, classError{"invalid_args"}
	})
	require.Equal(t, bad.ID, final.ID)
	require.Equal(t, pgrun.StatusFailed, final.Status, "a permanent class fails it for good")
	require.JSONEq(t, `"invalid_args"`, jsonField(t, final.Error, "class"))

	got, err := c.GetJob(ctx, later.ID)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusQueued, got.Status, "the job not yet due was left alone")

	msg := failure(t, func(tb testing.TB) {
		pgruntest.WorkOne(ctx, tb, c.Pool(), "missing", func(context.Context, *pgrun.Job) (any, error) { return nil, nil })
	})
	require.Contains(t, msg, `no job of kind "missing" is due to work`)
}

// A handler that panics fails the job (class panic) before the panic goes on.
func TestWorkOneRecordsAPanic(t *testing.T) {
	ctx, c := setup(t)
	j, err := c.Enqueue(ctx, "crash", nil, pgrun.MaxAttempts(1))
	require.NoError(t, err)
	require.PanicsWithValue(t, "boom", func() {
		pgruntest.WorkOne(ctx, t, c.Pool(), "crash", func(context.Context, *pgrun.Job) (any, error) { panic("boom") })
	})
	got, err := c.GetJob(ctx, j.ID)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusFailed, got.Status)
	require.JSONEq(t, `"panic"`, jsonField(t, got.Error, "class"))
	require.JSONEq(t, `"boom"`, jsonField(t, got.Error, "message"))
}

// classError is an error with a failure class, as runner's errors have.
type classError struct{ class string }

func (e classError) Error() string      { return e.class }
func (e classError) ErrorClass() string { return e.class }

// jsonField is the JSON text of key in the object raw.
func jsonField(t *testing.T, raw []byte, key string) string {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &m))
	return string(m[key])
}
