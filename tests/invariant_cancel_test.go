package tests

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
)

// A queued job is cancelled at once and never claimed; a finished one is left alone;
// an unknown id is an error.
func TestCancelQueuedFinishedAndUnknown(t *testing.T) {
	b := testkit.Setup(t)
	job, err := pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil)
	require.NoError(t, err)
	j, err := pgrun.Cancel(b.Ctx, b.Pool, job.ID, "not needed")
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusCancelled, j.Status)
	require.NotNil(t, j.FinishedAt)
	var claimed int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.claim_jobs('default', 'w', 10)`).Scan(&claimed))
	require.Zero(t, claimed)
	evs, err := pgrun.Events(b.Ctx, b.Pool, job.ID)
	require.NoError(t, err)
	require.Len(t, evs, 1)
	require.Equal(t, "job.cancelled", evs[0].Event)
	require.JSONEq(t, `{"attempt": 0, "previous_status": "queued"}`, string(evs[0].Fields))

	before := testkit.RowJSON(t, b.Pool, job.ID)
	_, err = pgrun.Cancel(b.Ctx, b.Pool, job.ID, "again")
	require.ErrorIs(t, err, pgrun.ErrFinished)
	require.Equal(t, before, testkit.RowJSON(t, b.Pool, job.ID))

	done, err := pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil)
	require.NoError(t, err)
	id, attempt := testkit.ClaimOne(t, b.Pool, "w", "30 seconds")
	require.Equal(t, done.ID, id)
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.complete_jobs(array[$1::bigint], array[$2::int])`, id, attempt)
	require.NoError(t, err)
	var isNull bool
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select pgrun.cancel_job($1) is null`, id).Scan(&isNull))
	require.True(t, isNull)
	require.Equal(t, pgrun.StatusSucceeded, testkit.JobStatus(t, b, id))

	_, err = pgrun.Cancel(b.Ctx, b.Pool, 424242, "")
	require.ErrorIs(t, err, pgrun.ErrNotFound)
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.cancel_job(424242)`)
	require.Equal(t, "P0002", testkit.SQLState(err))
}

// A cancelled job can be redriven and then runs to success; retry_job of a job that
// is not failed or cancelled changes nothing.
func TestRetryRedrivesCancelledJob(t *testing.T) {
	b := testkit.Setup(t)
	job, err := pgrun.Enqueue(b.Ctx, b.Pool, runner.KindEcho, map[string]any{"n": 1})
	require.NoError(t, err)
	_, err = pgrun.Cancel(b.Ctx, b.Pool, job.ID, "")
	require.NoError(t, err)
	j, err := pgrun.Retry(b.Ctx, b.Pool, job.ID)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusQueued, j.Status)
	_, err = pgrun.Retry(b.Ctx, b.Pool, job.ID)
	require.ErrorIs(t, err, pgrun.ErrNotRetryable)

	testkit.StartRunner(t, testkit.NewRunner(b.Pool, runner.Config{}))
	testkit.Eventually(t, 10*time.Second, "redriven job succeeded", func() bool { return testkit.JobStatus(t, b, job.ID) == pgrun.StatusSucceeded })
}

// Cancelling a running job ends it at once in the database, tells its worker on
// pgrun_cancel, and leaves the worker nothing to do: its reports under the claim's
// attempt change nothing, its renewal no longer returns the job, and no claim hands
// it out again.
func TestCancelledRunningJobRefusesItsWorkersReports(t *testing.T) {
	b := testkit.Setup(t)
	cancels := testkit.Listen(t, b, "pgrun_cancel")
	var id int64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id from pgrun.enqueue_job('noop')`).Scan(&id))
	require.Equal(t, []testkit.Claim{{ID: id, Attempt: 1}}, testkit.ClaimN(t, b.Pool, "default", "w", 1, "30 seconds"))

	var status string
	var finished *time.Time
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select status::text, finished_at from pgrun.cancel_job($1, 'operator said so')`, id).Scan(&status, &finished))
	require.Equal(t, "cancelled", status)
	require.NotNil(t, finished)
	ev := kitLastEvent(t, b.Pool, id)
	require.Equal(t, "job.cancelled", ev.Event)
	require.Equal(t, "running", ev.Fields["previous_status"])
	require.EqualValues(t, 1, ev.Fields["attempt"])
	require.Equal(t, "operator said so", *ev.Message)
	n := testkit.NextNotification(t, cancels, 5*time.Second)
	require.NotNil(t, n, "the worker was not told")
	require.Regexp(t, "^"+strconv.FormatInt(id, 10)+":[0-9]+$", n.Payload, "payload is id:attempt")

	after := testkit.Snap(t, b.Pool, id)
	for _, tr := range kitTransitions {
		require.Nil(t, testkit.NullID(t, b.Pool, tr.sql, id, 1), tr.name)
	}
	var renewed int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.renew_leases('w', array[$1::bigint])`, id).Scan(&renewed))
	require.Zero(t, renewed)
	require.Empty(t, testkit.ClaimN(t, b.Pool, "default", "w2", 10, "30 seconds"))
	require.Equal(t, after, testkit.Snap(t, b.Pool, id))
}

// Jobs that have not started (pending, waiting) are cancelled at once too, with their
// previous status in the event.
func TestCancelParkedJobs(t *testing.T) {
	b := testkit.Setup(t)
	for _, from := range []string{"pending", "waiting"} {
		var id int64
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `insert into pgrun.jobs (kind, status) values ('parked', $1::pgrun.job_status) returning id`, from).Scan(&id))
		j, err := pgrun.Cancel(b.Ctx, b.Pool, id, "")
		require.NoError(t, err)
		require.Equal(t, pgrun.StatusCancelled, j.Status)
		ev := kitLastEvent(t, b.Pool, id)
		require.Equal(t, "job.cancelled", ev.Event)
		require.Equal(t, from, ev.Fields["previous_status"])
	}
}

// The client's view of cancel and redrive: Cancel of a finished job returns it with
// ErrFinished, Retry of a job that is neither failed nor cancelled returns
// ErrNotRetryable (retry_job returns NULL and changes nothing), unknown ids give
// ErrNotFound, and a redriven cancelled job runs to success.
func TestCancelAndRetryThroughTheClient(t *testing.T) {
	b := testkit.Setup(t)
	_, err := pgrun.Cancel(b.Ctx, b.Pool, 987654, "")
	require.ErrorIs(t, err, pgrun.ErrNotFound)
	_, err = pgrun.Retry(b.Ctx, b.Pool, 987654)
	require.ErrorIs(t, err, pgrun.ErrNotFound)

	queued, err := pgrun.Enqueue(b.Ctx, b.Pool, runner.KindEcho, map[string]any{"n": 7}, pgrun.Queue("later"))
	require.NoError(t, err)
	before := testkit.Snap(t, b.Pool, queued.ID)
	require.Nil(t, testkit.NullID(t, b.Pool, `select (pgrun.retry_job($1)).id`, queued.ID), "retry_job of a queued job")
	j, err := pgrun.Retry(b.Ctx, b.Pool, queued.ID)
	require.ErrorIs(t, err, pgrun.ErrNotRetryable)
	require.Equal(t, pgrun.StatusQueued, j.Status)
	require.Equal(t, before, testkit.Snap(t, b.Pool, queued.ID))

	_, err = pgrun.Cancel(b.Ctx, b.Pool, queued.ID, "changed my mind")
	require.NoError(t, err)
	j, err = pgrun.Retry(b.Ctx, b.Pool, queued.ID)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusQueued, j.Status)
	require.Nil(t, j.FinishedAt)
	require.Equal(t, "job.retried", kitLastEvent(t, b.Pool, queued.ID).Event)

	r := testkit.NewRunner(b.Pool, runner.Config{Queues: map[string]runner.QueueConfig{"later": {Workers: 2}}})
	testkit.StartRunner(t, r)
	testkit.Eventually(t, 10*time.Second, "the redriven job succeeded", func() bool {
		return testkit.JobStatus(t, b, queued.ID) == pgrun.StatusSucceeded
	})
	j, err = pgrun.GetJob(b.Ctx, b.Pool, queued.ID)
	require.NoError(t, err)
	require.JSONEq(t, `{"n": 7}`, string(j.Result))

	finished := testkit.Snap(t, b.Pool, queued.ID)
	j, err = pgrun.Cancel(b.Ctx, b.Pool, queued.ID, "too late")
	require.ErrorIs(t, err, pgrun.ErrFinished)
	require.Equal(t, pgrun.StatusSucceeded, j.Status, "the finished job is returned as it is")
	_, err = pgrun.Retry(b.Ctx, b.Pool, queued.ID)
	require.ErrorIs(t, err, pgrun.ErrNotRetryable, "a succeeded job is not redriven")
	require.Equal(t, finished, testkit.Snap(t, b.Pool, queued.ID))
}
