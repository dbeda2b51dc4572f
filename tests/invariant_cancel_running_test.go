package tests

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
)

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

// A running handler's context is cancelled within a second of pgrun.Cancel, with
// cause runner.ErrJobCancelled, and whatever the handler returns afterwards (a result
// or an error) is ignored: the job stays cancelled with no result, no failure and no
// requeue, even after the runner has stopped and flushed everything.
func TestCancelStopsRunningHandlersAndIgnoresWhatTheyReturn(t *testing.T) {
	b := testkit.Setup(t)
	type stopped struct {
		cause error
		at    time.Time
	}
	started := make(chan int64, 2)
	causes := make(chan stopped, 2)
	r := testkit.NewRunner(b.Pool, runner.Config{})
	block := func(ret func(ctx context.Context) (any, error)) func(context.Context, *runner.Job[struct{}]) (any, error) {
		return func(ctx context.Context, j *runner.Job[struct{}]) (any, error) {
			started <- j.ID
			<-ctx.Done()
			causes <- stopped{context.Cause(ctx), time.Now()}
			return ret(ctx)
		}
	}
	testkit.Handle(t, r, "returns-result", block(func(context.Context) (any, error) { return "late result", nil }))
	testkit.Handle(t, r, "returns-error", block(func(ctx context.Context) (any, error) { return nil, ctx.Err() }))
	stop := testkit.StartRunner(t, r)

	for _, kind := range []string{"returns-result", "returns-error"} {
		job, err := pgrun.Enqueue(b.Ctx, b.Pool, kind, nil)
		require.NoError(t, err)
		select {
		case id := <-started:
			require.Equal(t, job.ID, id)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: handler did not start", kind)
		}
		asked := time.Now()
		_, err = pgrun.Cancel(b.Ctx, b.Pool, job.ID, "operator")
		require.NoError(t, err)
		var got stopped
		testkit.Eventually(t, time.Second, kind+": handler context cancelled", func() bool {
			select {
			case got = <-causes:
				return true
			default:
				return false
			}
		})
		t.Logf("%s: cancel reached the handler after %s", kind, got.at.Sub(asked))
		require.Less(t, got.at.Sub(asked), time.Second)
		require.Truef(t, errors.Is(got.cause, runner.ErrJobCancelled), "%s: cause %v", kind, got.cause)
	}
	stop() // waits for Run to return: every outcome has been reported by now

	var cancelled, results, failures, others int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) filter (where status = 'cancelled'),
		count(result), sum(failures),
		(select count(*) from pgrun.job_events e where e.event <> 'job.cancelled')
		from pgrun.jobs`).Scan(&cancelled, &results, &failures, &others))
	require.Equal(t, 2, cancelled, "both jobs stay cancelled")
	require.Zero(t, results, "a late result was recorded")
	require.Zero(t, failures, "a late error was counted as a failure")
	require.Zero(t, others, "a late outcome wrote an event (failed, requeued...)")
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
