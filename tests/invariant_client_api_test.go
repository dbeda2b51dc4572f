package tests

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// A job enqueued in a transaction is the transaction's: visible inside it at once,
// invisible to everyone else until commit, and gone if it rolls back.
func TestEnqueueBelongsToTheCallersTransaction(t *testing.T) {
	b := testkit.Setup(t)
	tx, err := b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.Ctx)
	j, err := pgrun.Enqueue(b.Ctx, tx, "invoice", map[string]any{"order": 42})
	require.NoError(t, err)
	inside, err := pgrun.GetJob(b.Ctx, tx, j.ID)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusQueued, inside.Status)
	_, err = pgrun.GetJob(b.Ctx, b.Pool, j.ID)
	require.ErrorIs(t, err, pgrun.ErrNotFound, "visible outside before commit")
	require.Empty(t, testkit.ClaimN(t, b.Pool, "default", "w", 10, "30 seconds"), "claimable before commit")
	require.NoError(t, tx.Commit(b.Ctx))
	outside, err := pgrun.GetJob(b.Ctx, b.Pool, j.ID)
	require.NoError(t, err)
	require.JSONEq(t, `{"order": 42}`, string(outside.Args))

	tx, err = b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	gone, err := pgrun.Enqueue(b.Ctx, tx, "invoice", map[string]any{"order": 43})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(b.Ctx))
	_, err = pgrun.GetJob(b.Ctx, b.Pool, gone.ID)
	require.ErrorIs(t, err, pgrun.ErrNotFound)
	require.Equal(t, 1, testkit.Counts(t, b.Pool)["jobs"])
}

// Every JobSpec field of EnqueueMany lands in its row, and zero fields take the
// engine's defaults.
func TestEnqueueManySpecsLandInTheirRows(t *testing.T) {
	b := testkit.Setup(t)
	parent, err := pgrun.Enqueue(b.Ctx, b.Pool, "parent", nil)
	require.NoError(t, err)
	at := time.Date(2031, 6, 1, 12, 0, 0, 123000, time.UTC)
	jobs, err := pgrun.EnqueueMany(b.Ctx, b.Pool, []pgrun.JobSpec{
		{Kind: "full", Args: map[string]any{"w": 64}, Queue: "images", Priority: 9, RunAt: &at, MaxAttempts: 4,
			UniqueKey: "img-9", ParentID: parent.ID, Model: "clip", Timeout: 1500 * time.Millisecond,
			Meta: map[string]any{"tenant": "acme"}, ConcurrencyKey: "acme"},
		{Kind: "bare"},
	})
	require.NoError(t, err)
	require.Len(t, jobs, 2)
	byKind := map[string]*pgrun.Job{}
	for _, j := range jobs {
		got, err := pgrun.GetJob(b.Ctx, b.Pool, j.ID)
		require.NoError(t, err)
		byKind[got.Kind] = got
	}

	full := byKind["full"]
	require.JSONEq(t, `{"w": 64}`, string(full.Args))
	require.Equal(t, "images", full.Queue)
	require.EqualValues(t, 9, full.Priority)
	require.True(t, at.Equal(full.RunAt), "run_at %s", full.RunAt)
	require.Equal(t, 4, full.MaxAttempts)
	require.Equal(t, "img-9", *full.UniqueKey)
	require.Equal(t, parent.ID, *full.ParentID)
	require.Equal(t, "clip", *full.Model)
	require.Equal(t, 1500*time.Millisecond, *full.Timeout)
	require.JSONEq(t, `{"tenant": "acme"}`, string(full.Meta))
	var key string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select concurrency_key from pgrun.jobs where id = $1`, full.ID).Scan(&key))
	require.Equal(t, "acme", key)

	bare := byKind["bare"]
	require.Equal(t, "default", bare.Queue)
	require.Zero(t, bare.Priority)
	require.Equal(t, 25, bare.MaxAttempts)
	require.NotNil(t, bare.Timeout, "the engine's wall-clock backstop")
	require.Equal(t, time.Hour, *bare.Timeout)
	require.Nil(t, bare.UniqueKey)
	require.Nil(t, bare.ParentID)
	require.JSONEq(t, `{}`, string(bare.Args))
	require.JSONEq(t, `{}`, string(bare.Meta))
	require.WithinDuration(t, time.Now(), bare.RunAt, time.Minute)
	require.Equal(t, pgrun.StatusQueued, bare.Status)
	require.Zero(t, bare.Attempt)
}

// Bad input through the client keeps its SQLSTATE (callers can branch on it), and a
// batch with one bad spec inserts none.
func TestClientErrorsKeepTheirSQLState(t *testing.T) {
	b := testkit.Setup(t)
	_, err := pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil, pgrun.Queue("Bad Q"))
	require.Equal(t, "22023", testkit.SQLState(err), "%v", err)
	_, err = pgrun.EnqueueMany(b.Ctx, b.Pool, []pgrun.JobSpec{{Kind: "ok"}, {Kind: "ok"}, {Kind: "ok", Priority: -1}})
	require.Equal(t, "22023", testkit.SQLState(err), "%v", err)
	_, err = pgrun.EnqueueMany(b.Ctx, b.Pool, []pgrun.JobSpec{{Kind: "ok"}, {Kind: "ok", UniqueKey: "k", UniqueWindow: time.Hour}, {Kind: "ok", UniqueKey: strings.Repeat("k", 600)}})
	require.Equal(t, "22023", testkit.SQLState(err), "%v", err)
	require.Zero(t, testkit.Counts(t, b.Pool)["jobs"])
}

// A non-positive timeout is bad input whichever way it is given.
//
// Was a BUG (fixed): JobSpec.MarshalJSON (client.go) sends the timeout only when Timeout > 0, so
// pgrun.Timeout(-time.Second) (or JobSpec{Timeout: -1}) silently enqueues a job with
// no timeout at all, while the SQL API rejects timeout => '-1 s' with 22023 and a
// positive timeout under a microsecond is sent as '0 microseconds' and rejected.
// Expected: the client passes a non-zero timeout through (or rejects it itself), so
// that a negative one is an error, not "no timeout".
func TestNegativeTimeoutIsRejectedByTheClient(t *testing.T) {
	b := testkit.Setup(t)
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.enqueue_job('noop', timeout => '-1 s')`)
	require.Equal(t, "22023", testkit.SQLState(err), "the SQL API rejects it")

	j, err := pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil, pgrun.Timeout(-time.Second))
	if err == nil {
		t.Errorf("BUG: Timeout(-1s) was accepted: job %d has timeout %v", j.ID, j.Timeout)
	}
	_, err = pgrun.EnqueueMany(b.Ctx, b.Pool, []pgrun.JobSpec{{Kind: "noop", Timeout: -time.Minute}})
	if err == nil {
		t.Errorf("BUG: JobSpec{Timeout: -1m} was accepted")
	}
	require.Zero(t, testkit.Counts(t, b.Pool)["jobs"], "no job without the timeout it was given")
}

// Events returns a job's whole audit log, oldest first: handler events with their
// levels, messages and fields, then the engine's own (a failure, a cancel).
func TestEventsReturnTheAuditLogInOrder(t *testing.T) {
	b := testkit.Setup(t)
	j, err := pgrun.Enqueue(b.Ctx, b.Pool, "etl", nil)
	require.NoError(t, err)
	c := testkit.ClaimN(t, b.Pool, "default", "w", 1, "30 seconds")
	require.Equal(t, j.ID, c[0].ID)
	for i, e := range []struct{ name, level string }{{"etl.extract", "debug"}, {"etl.transform", "info"}, {"etl.slow", "warn"}} {
		_, err := b.Pool.Exec(b.Ctx, `select pgrun.emit($1, $2, jsonb_build_object('step', $3::int), $4, $2 || ' done')`, j.ID, e.name, i, e.level)
		require.NoError(t, err)
	}
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.fail_job($1, $2, '{"message": "load failed", "class": "db"}')`, j.ID, c[0].Attempt)
	require.NoError(t, err)
	_, err = pgrun.Cancel(b.Ctx, b.Pool, j.ID, "giving up")
	require.NoError(t, err)

	evs, err := pgrun.Events(b.Ctx, b.Pool, j.ID)
	require.NoError(t, err)
	var names, levels []string
	for i, e := range evs {
		require.Equal(t, j.ID, e.JobID)
		if i > 0 {
			require.Greater(t, e.ID, evs[i-1].ID)
			require.False(t, e.At.Before(evs[i-1].At))
		}
		names, levels = append(names, e.Event), append(levels, e.Level)
	}
	require.Equal(t, []string{"etl.extract", "etl.transform", "etl.slow", "job.failed", "job.cancelled"}, names)
	require.Equal(t, []string{"debug", "info", "warn", "warn", "warn"}, levels)
	require.Equal(t, "etl.transform done", *evs[1].Message)
	require.JSONEq(t, `{"step": 1}`, string(evs[1].Fields))
	require.Equal(t, "load failed", *evs[3].Message)
	require.Equal(t, "giving up", *evs[4].Message)
	require.JSONEq(t, `{"attempt": 1, "previous_status": "queued"}`, string(evs[4].Fields), "failed with attempts left: queued again")

	none, err := pgrun.Events(b.Ctx, b.Pool, 424242)
	require.NoError(t, err)
	require.Empty(t, none)
}
