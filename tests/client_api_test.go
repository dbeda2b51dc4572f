package tests

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/pgruntest"
)

// newClient is a client on b's pool with cfg.
func newClient(t *testing.T, b *testkit.DB, cfg pgrun.Config) *pgrun.Client {
	t.Helper()
	c, err := pgrun.NewClient(b.Pool, cfg)
	require.NoError(t, err)
	return c
}

// requireInvalidInput checks that err is the engine's refusal (SQLSTATE 22023) with
// its message and hint kept, said after a single "pgrun:".
func requireInvalidInput(t *testing.T, err error, message, hint string) {
	t.Helper()
	require.ErrorIs(t, err, pgrun.ErrInvalidInput)
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "22023", pe.Code)
	require.Contains(t, err.Error(), message)
	require.Contains(t, err.Error(), hint)
	require.Equal(t, 1, strings.Count(err.Error(), "pgrun:"), "one prefix: %s", err)
}

// NewClient refuses a missing pool and a page size out of range, and sends nothing.
func TestNewClientChecksItsConfig(t *testing.T) {
	_, err := pgrun.NewClient(nil, pgrun.Config{})
	require.ErrorContains(t, err, "pool is nil")
	pool := &pgxpool.Pool{} // never used: NewClient sends nothing
	for _, size := range []int{-1, pgrun.MaxPageSize + 1} {
		_, err = pgrun.NewClient(pool, pgrun.Config{PageSize: size})
		require.ErrorIs(t, err, pgrun.ErrInvalidInput, "page size %d", size)
	}
	c, err := pgrun.NewClient(pool, pgrun.Config{Queue: "reports"})
	require.NoError(t, err)
	require.Same(t, pool, c.Pool())
}

// EnqueueTx and EnqueueManyTx make the jobs the caller's transaction's: gone on
// rollback, there on commit. Config.Queue is the queue of a job that names none.
func TestClientEnqueueTxAndDefaultQueue(t *testing.T) {
	b := testkit.Setup(t)
	c := newClient(t, b, pgrun.Config{Queue: "reports"})

	tx, err := b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	gone, err := c.EnqueueTx(b.Ctx, tx, "report", map[string]any{"day": 1})
	require.NoError(t, err)
	goneMany, err := c.EnqueueManyTx(b.Ctx, tx, []pgrun.JobSpec{{Kind: "report"}, {Kind: "report"}})
	require.NoError(t, err)
	require.Len(t, goneMany, 2)
	require.NoError(t, tx.Rollback(b.Ctx))
	for _, id := range []int64{gone.ID, goneMany[0].ID, goneMany[1].ID} {
		_, err = c.GetJob(b.Ctx, id)
		require.ErrorIs(t, err, pgrun.ErrNotFound)
	}

	tx, err = b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	kept, err := c.EnqueueTx(b.Ctx, tx, "report", nil)
	require.NoError(t, err)
	many, err := c.EnqueueManyTx(b.Ctx, tx, []pgrun.JobSpec{{Kind: "report", Queue: "urgent"}})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(b.Ctx))
	got, err := c.GetJob(b.Ctx, kept.ID)
	require.NoError(t, err)
	require.Equal(t, "reports", got.Queue, "the client's default queue")
	got, err = c.GetJob(b.Ctx, many[0].ID)
	require.NoError(t, err)
	require.Equal(t, "urgent", got.Queue, "a spec's own queue wins")

	onPool, err := c.Enqueue(b.Ctx, "report", nil, pgrun.UniqueKey("daily"))
	require.NoError(t, err)
	again, err := c.EnqueueMany(b.Ctx, []pgrun.JobSpec{{Kind: "report", UniqueKey: "daily"}})
	require.NoError(t, err)
	require.Equal(t, onPool.ID, again[0].ID)
	require.True(t, again[0].Deduplicated)
	require.Equal(t, 3, testkit.Counts(t, b.Pool)["jobs"])
}

// resizeArgs names its kind with a value receiver, thumbArgs with a pointer one.
type resizeArgs struct {
	W int `json:"w"`
}

func (resizeArgs) Kind() string { return "resize" }

type thumbArgs struct {
	Image string `json:"image"`
}

func (*thumbArgs) Kind() string { return "thumb" }

// The kind is written once, on the args type: EnqueueArgs, specs without a kind and
// schedules take it from there; a kind given as a string still wins.
func TestClientKindFromArgs(t *testing.T) {
	b := testkit.Setup(t)
	c := newClient(t, b, pgrun.Config{})

	j, err := c.EnqueueArgs(b.Ctx, resizeArgs{W: 64}, pgrun.Queue("images"))
	require.NoError(t, err)
	require.Equal(t, "resize", j.Kind)
	require.Equal(t, "images", j.Queue)
	require.JSONEq(t, `{"w": 64}`, string(j.Args))

	tx, err := b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.Ctx)
	j, err = c.EnqueueArgsTx(b.Ctx, tx, &thumbArgs{Image: "a.png"})
	require.NoError(t, err)
	require.Equal(t, "thumb", j.Kind)
	require.NoError(t, tx.Commit(b.Ctx))

	jobs, err := c.EnqueueMany(b.Ctx, []pgrun.JobSpec{
		pgrun.SpecFor(resizeArgs{W: 1}, pgrun.Priority(3)),
		{Args: &thumbArgs{}},
		{Kind: "custom", Args: resizeArgs{}},
	})
	require.NoError(t, err)
	require.Equal(t, "resize", jobs[0].Kind)
	require.EqualValues(t, 3, jobs[0].Priority)
	require.Equal(t, "thumb", jobs[1].Kind)
	require.Equal(t, "custom", jobs[2].Kind)

	j, err = c.Enqueue(b.Ctx, "", resizeArgs{W: 2})
	require.NoError(t, err)
	require.Equal(t, "resize", j.Kind)

	_, err = c.Enqueue(b.Ctx, "", map[string]any{"w": 1})
	requireInvalidInput(t, err, "kind", "")

	s, err := c.SetSchedule(b.Ctx, pgrun.ScheduleSpec{Name: "nightly", Cron: "0 2 * * *", Args: resizeArgs{W: 9}})
	require.NoError(t, err)
	require.Equal(t, "resize", s.Kind)
}

// KindOf answers for value and pointer receivers, values and nil pointers, and says
// no for types without a Kind method.
func TestKindOf(t *testing.T) {
	for _, tc := range []struct {
		args any
		kind string
		ok   bool
	}{
		{resizeArgs{}, "resize", true},
		{&resizeArgs{}, "resize", true},
		{(*resizeArgs)(nil), "resize", true},
		{thumbArgs{}, "thumb", true},
		{&thumbArgs{}, "thumb", true},
		{(*thumbArgs)(nil), "thumb", true},
		{map[string]any{}, "", false},
		{nil, "", false},
		{42, "", false},
	} {
		kind, ok := pgrun.KindOf(tc.args)
		require.Equal(t, tc.kind, kind, "%T", tc.args)
		require.Equal(t, tc.ok, ok, "%T", tc.args)
	}
}

// ListJobs pages through the jobs by keyset: 25 jobs in pages of 10 come back as
// 10, 10, 5, in order, each once, also while jobs are enqueued between pages; Newest
// pages the other way; the filters select.
func TestClientListJobsPagesByKeyset(t *testing.T) {
	b := testkit.Setup(t)
	c := newClient(t, b, pgrun.Config{PageSize: 10})
	specs := make([]pgrun.JobSpec, 25)
	for i := range specs {
		specs[i] = pgrun.JobSpec{Kind: "page", Queue: "paging"}
	}
	made, err := c.EnqueueMany(b.Ctx, specs)
	require.NoError(t, err)
	_, err = c.Enqueue(b.Ctx, "other", nil, pgrun.Queue("paging"))
	require.NoError(t, err)

	var sizes []int
	var ids []int64
	after := int64(0)
	for {
		page, err := c.ListJobs(b.Ctx, pgrun.JobFilter{Kind: "page", After: after})
		require.NoError(t, err)
		sizes = append(sizes, len(page))
		for _, j := range page {
			ids = append(ids, j.ID)
		}
		if len(page) < 10 {
			break
		}
		after = page[len(page)-1].ID
		if len(sizes) == 1 {
			// A job enqueued meanwhile lands after the cursor: seen once, at the end.
			late, err := c.Enqueue(b.Ctx, "page", nil, pgrun.Queue("paging"))
			require.NoError(t, err)
			made = append(made, late)
		}
	}
	require.Equal(t, []int{10, 10, 6}, sizes)
	want := make([]int64, len(made))
	for i, j := range made {
		want[i] = j.ID
	}
	require.Equal(t, want, ids, "every job once, oldest first")

	var newest []int64
	after = 0
	for {
		page, err := c.ListJobs(b.Ctx, pgrun.JobFilter{Kind: "page", Newest: true, Limit: 7, After: after})
		require.NoError(t, err)
		for _, j := range page {
			newest = append(newest, j.ID)
		}
		if len(page) < 7 {
			break
		}
		after = page[len(page)-1].ID
	}
	require.Len(t, newest, len(want))
	for i := range newest {
		require.Equal(t, want[len(want)-1-i], newest[i], "newest first")
	}

	_, err = c.Cancel(b.Ctx, made[3].ID, "")
	require.NoError(t, err)
	cancelled, err := c.ListJobs(b.Ctx, pgrun.JobFilter{Queue: "paging", Status: []pgrun.JobStatus{pgrun.StatusCancelled}})
	require.NoError(t, err)
	require.Len(t, cancelled, 1)
	require.Equal(t, made[3].ID, cancelled[0].ID)
	all, err := c.ListJobs(b.Ctx, pgrun.JobFilter{Queue: "paging", Limit: pgrun.MaxPageSize})
	require.NoError(t, err)
	require.Len(t, all, 27)
	none, err := c.ListJobs(b.Ctx, pgrun.JobFilter{Queue: "elsewhere"})
	require.NoError(t, err)
	require.Empty(t, none)
	_, err = c.ListJobs(b.Ctx, pgrun.JobFilter{Limit: pgrun.MaxPageSize + 1})
	require.ErrorIs(t, err, pgrun.ErrInvalidInput)
}

// ListJobs selects a parent's children and a run's nodes.
func TestClientListJobsByParentAndRun(t *testing.T) {
	b := testkit.Setup(t)
	c := newClient(t, b, pgrun.Config{})
	parent, err := c.Enqueue(b.Ctx, "parent", nil)
	require.NoError(t, err)
	claimed := testkit.ClaimN(t, b.Pool, "default", "w", 1, "30 seconds")
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.defer_job($1, $2, '[{"kind": "child"}, {"kind": "child"}]')`,
		claimed[0].ID, claimed[0].Attempt)
	require.NoError(t, err)
	children, err := c.ListJobs(b.Ctx, pgrun.JobFilter{ParentID: parent.ID})
	require.NoError(t, err)
	require.Len(t, children, 2)
	for _, ch := range children {
		require.Equal(t, parent.ID, *ch.ParentID)
	}
	got, err := c.GetJob(b.Ctx, parent.ID)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusWaiting, got.Status)
	require.NotNil(t, got.FailureRatio, "a deferred parent records its failure ratio")
	require.Equal(t, 0, got.ChildrenFailed)

	_, err = c.DefineWorkflow(b.Ctx, "pair", json.RawMessage(`{"nodes": [{"name": "a", "kind": "x"}, {"name": "b", "kind": "x", "deps": ["a"]}]}`))
	require.NoError(t, err)
	run, err := c.StartRun(b.Ctx, "pair", nil, "")
	require.NoError(t, err)
	nodes, err := c.ListJobs(b.Ctx, pgrun.JobFilter{RunID: run.ID})
	require.NoError(t, err)
	require.Len(t, nodes, 2)
	require.Equal(t, "a", *nodes[0].Node)
}

// Cancel and Retry move a job and say, once, why they did not.
func TestClientCancelAndRetry(t *testing.T) {
	b := testkit.Setup(t)
	c := newClient(t, b, pgrun.Config{})
	j, err := c.Enqueue(b.Ctx, "task", nil)
	require.NoError(t, err)

	_, err = c.Retry(b.Ctx, j.ID)
	require.ErrorIs(t, err, pgrun.ErrNotRetryable)
	require.EqualError(t, err, "pgrun: job "+itoa(j.ID)+" is queued: only failed and cancelled jobs can be retried")

	cancelled, err := c.Cancel(b.Ctx, j.ID, "not needed")
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusCancelled, cancelled.Status)
	same, err := c.Cancel(b.Ctx, j.ID, "")
	require.ErrorIs(t, err, pgrun.ErrFinished)
	require.EqualError(t, err, "pgrun: job "+itoa(j.ID)+" already finished (cancelled)")
	require.Equal(t, pgrun.StatusCancelled, same.Status, "the job is returned unchanged")

	retried, err := c.Retry(b.Ctx, j.ID)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusQueued, retried.Status)

	for _, call := range []func() error{
		func() error { _, err := c.GetJob(b.Ctx, 999999); return err },
		func() error { _, err := c.Cancel(b.Ctx, 999999, ""); return err },
		func() error { _, err := c.Retry(b.Ctx, 999999); return err },
		func() error { _, err := c.Timeline(b.Ctx, 999999); return err },
	} {
		err := call()
		require.ErrorIs(t, err, pgrun.ErrNotFound)
		require.EqualError(t, err, "pgrun: job 999999 not found")
	}
}

// RetryJobs redrives the failed jobs a filter selects, up to Max, and no others.
func TestClientRetryJobsRedrivesInBulk(t *testing.T) {
	b := testkit.Setup(t)
	c := newClient(t, b, pgrun.Config{})
	fail := func(queue string, n int) []int64 {
		var ids []int64
		for range n {
			_, err := c.Enqueue(b.Ctx, "flaky", nil, pgrun.Queue(queue), pgrun.MaxAttempts(1))
			require.NoError(t, err)
			j := pgruntest.WorkOne(b.Ctx, t, b.Pool, "flaky", func(ctx context.Context, j *pgrun.Job) (any, error) {
				return nil, errors.New("down")
			})
			require.Equal(t, pgrun.StatusFailed, j.Status)
			ids = append(ids, j.ID)
		}
		return ids
	}
	a := fail("a", 3)
	other := fail("b", 1)

	n, err := c.CountRetryable(b.Ctx, pgrun.RetryFilter{Queue: "a"})
	require.NoError(t, err)
	require.Equal(t, 3, n, "what RetryJobs would redrive in queue a")
	n, err = c.CountRetryable(b.Ctx, pgrun.RetryFilter{Queue: "a", Max: 2})
	require.NoError(t, err)
	require.Equal(t, 2, n, "at most Max")
	n, err = c.RetryJobs(b.Ctx, pgrun.RetryFilter{Queue: "a", Max: 2})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, pgrun.StatusQueued, testkit.JobStatus(t, b, a[0]), "oldest first")
	require.Equal(t, pgrun.StatusQueued, testkit.JobStatus(t, b, a[1]))
	require.Equal(t, pgrun.StatusFailed, testkit.JobStatus(t, b, a[2]))
	n, err = c.RetryJobs(b.Ctx, pgrun.RetryFilter{Queue: "a", Since: time.Now().Add(-time.Hour)})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, pgrun.StatusFailed, testkit.JobStatus(t, b, other[0]), "another queue")
	n, err = c.RetryJobs(b.Ctx, pgrun.RetryFilter{Kind: "flaky"})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	_, err = c.RetryJobs(b.Ctx, pgrun.RetryFilter{Max: -1})
	requireInvalidInput(t, err, "max_jobs -1 is not valid", "Redrive 1 or more jobs per call.")
	_, err = c.CountRetryable(b.Ctx, pgrun.RetryFilter{Max: -1})
	requireInvalidInput(t, err, "max_jobs -1 is not valid", "Redrive 1 or more jobs per call.")
}

// Timeline tells a job's story from enqueue to its ending; Events holds what was
// stored.
func TestClientTimeline(t *testing.T) {
	b := testkit.Setup(t)
	c := newClient(t, b, pgrun.Config{})
	j, err := c.Enqueue(b.Ctx, "task", nil)
	require.NoError(t, err)
	_, err = c.Cancel(b.Ctx, j.ID, "changed my mind")
	require.NoError(t, err)
	tl, err := c.Timeline(b.Ctx, j.ID)
	require.NoError(t, err)
	var events []string
	for _, e := range tl {
		events = append(events, e.Event)
	}
	require.Equal(t, []string{"job.enqueued", "job.cancelled"}, events)
	require.Equal(t, 0, *tl[0].Attempt)
	evs, err := c.Events(b.Ctx, j.ID)
	require.NoError(t, err)
	require.Len(t, evs, 1)
	require.Equal(t, "job.cancelled", evs[0].Event)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
