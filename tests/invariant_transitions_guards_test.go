package tests

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testkit"
)

// kitTransitions are the worker-side reports, each called with $1 id and $2 attempt
// and selecting one value that is NULL when nothing changed.
var kitTransitions = []struct{ name, sql string }{
	{"complete_jobs", `select (select max(x) from pgrun.complete_jobs(array[$1::bigint], array[$2::int], array['{"ok": true}'::jsonb]) x)`},
	{"fail_job", `select (pgrun.fail_job($1, $2, '{"message": "boom", "class": "io"}')).id`},
	{"retry_later", `select (pgrun.retry_later($1, $2, '1 minute', 'busy')).id`},
	{"requeue_job", `select (pgrun.requeue_job($1, $2, 'shutdown')).id`},
}

// kitEvent is one row of the audit log.
type kitEvent struct {
	Event   string
	Level   string
	Message *string
	Fields  map[string]any
}

// kitLastEvent returns job id's newest audit event.
func kitLastEvent(t *testing.T, db testkit.Querier, id int64) kitEvent {
	t.Helper()
	var e kitEvent
	var fields string
	require.NoError(t, db.QueryRow(t.Context(), `select event, level, message, fields::text from pgrun.job_events
		where job_id = $1 order by id desc limit 1`, id).Scan(&e.Event, &e.Level, &e.Message, &fields))
	require.NoError(t, json.Unmarshal([]byte(fields), &e.Fields))
	return e
}

// A report applies once, and only under the attempt that is running now: on a queued
// job, with a stale attempt after a re-claim, with an attempt not yet claimed, twice
// in a row, or after the job was cancelled, it returns NULL and changes neither the
// row nor the audit log.
func TestReportsApplyOnceAndOnlyUnderTheCurrentAttempt(t *testing.T) {
	for _, tr := range kitTransitions {
		t.Run(tr.name, func(t *testing.T) {
			b := testkit.Setup(t)
			var id int64
			require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id from pgrun.enqueue_job('noop')`).Scan(&id))

			unclaimed := testkit.Snap(t, b.Pool, id)
			for _, attempt := range []int{0, 1} {
				require.Nil(t, testkit.NullID(t, b.Pool, tr.sql, id, attempt), "queued job, attempt %d", attempt)
			}
			require.Equal(t, unclaimed, testkit.Snap(t, b.Pool, id), "a report on a queued job changed it")

			first := testkit.ClaimN(t, b.Pool, "default", "w1", 1, "30 seconds")
			require.Equal(t, []testkit.Claim{{ID: id, Attempt: 1}}, first)
			require.NotNil(t, testkit.NullID(t, b.Pool, `select (pgrun.requeue_job($1, 1, 'test')).id`, id))
			second := testkit.ClaimN(t, b.Pool, "default", "w2", 1, "30 seconds")
			require.Equal(t, []testkit.Claim{{ID: id, Attempt: 2}}, second)

			reclaimed := testkit.Snap(t, b.Pool, id)
			for _, attempt := range []int{1, 3} {
				require.Nil(t, testkit.NullID(t, b.Pool, tr.sql, id, attempt), "attempt %d is not the running one", attempt)
			}
			require.Equal(t, reclaimed, testkit.Snap(t, b.Pool, id), "a stale report changed the job")

			require.NotNil(t, testkit.NullID(t, b.Pool, tr.sql, id, 2), "the current attempt's report applies")
			applied := testkit.Snap(t, b.Pool, id)
			require.NotEqual(t, reclaimed.Row, applied.Row)
			require.Nil(t, testkit.NullID(t, b.Pool, tr.sql, id, 2), "the duplicate")
			require.Equal(t, applied, testkit.Snap(t, b.Pool, id), "a duplicate report changed the job")

			var other int64
			require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id from pgrun.enqueue_job('noop', queue => 'doomed')`).Scan(&other))
			got := testkit.ClaimN(t, b.Pool, "doomed", "w1", 1, "30 seconds")
			require.Equal(t, []testkit.Claim{{ID: other, Attempt: 1}}, got)
			_, err := b.Pool.Exec(b.Ctx, `select pgrun.cancel_job($1, 'operator')`, other)
			require.NoError(t, err)
			cancelled := testkit.Snap(t, b.Pool, other)
			require.Nil(t, testkit.NullID(t, b.Pool, tr.sql, other, 1), "report after cancel")
			require.Equal(t, cancelled, testkit.Snap(t, b.Pool, other), "a report after cancel changed the job")
		})
	}
}

// A retryable failure goes back to the queue after base*2^(n-1) with equal jitter:
// the delay for failure n lies in [0.5, 1] * 1 s * 2^(n-1). Each failure is counted
// and logged (job.failed with class, retryable, final, next_run_at); the failure that
// spends max_attempts ends the job failed with finished_at.
func TestFailureBackoffStaysWithinBoundsUntilAttemptsAreSpent(t *testing.T) {
	b := testkit.Setup(t)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := testkit.PinClock(t, b, now)
	var id int64
	c.QueryRow(`select id from pgrun.enqueue_job('flaky', max_attempts => 6)`, nil, &id)
	for n := 1; n <= 6; n++ {
		c.Set(now)
		got := testkit.ClaimN(t, c.Conn, "default", "w", 1, "30 seconds")
		require.Equal(t, []testkit.Claim{{ID: id, Attempt: int32(n)}}, got, "claim %d", n)
		var status, errText string
		var runAt time.Time
		var failures int
		var finished *time.Time
		c.QueryRow(`select status::text, run_at, failures, finished_at, error::text
			from pgrun.fail_job($1, $2, '{"message": "upstream 503", "class": "upstream"}')`,
			[]any{id, n}, &status, &runAt, &failures, &finished, &errText)
		require.Equal(t, n, failures, "failure %d is counted", n)
		var body map[string]any
		require.NoError(t, json.Unmarshal([]byte(errText), &body))
		require.Equal(t, "upstream 503", body["message"])
		require.Equal(t, "upstream", body["class"])
		require.EqualValues(t, n, body["attempt"])
		ev := kitLastEvent(t, c.Conn, id)
		require.Equal(t, "job.failed", ev.Event)
		require.Equal(t, "upstream 503", *ev.Message)
		require.Equal(t, "upstream", ev.Fields["class"])
		require.Equal(t, true, ev.Fields["retryable"])
		require.EqualValues(t, n, ev.Fields["attempt"])
		if n < 6 {
			require.Equal(t, "queued", status, "failure %d of 6 is retried", n)
			d := time.Second << (n - 1)
			delay := runAt.Sub(now)
			require.GreaterOrEqualf(t, delay, d/2, "failure %d: delay %s below half of %s", n, delay, d)
			require.LessOrEqualf(t, delay, d, "failure %d: delay %s above %s", n, delay, d)
			require.Nil(t, finished)
			require.Equal(t, "warn", ev.Level)
			require.Equal(t, false, ev.Fields["final"])
			next, err := time.Parse(time.RFC3339Nano, ev.Fields["next_run_at"].(string))
			require.NoError(t, err)
			require.True(t, next.Equal(runAt), "next_run_at %s is the new run_at %s", next, runAt)
			now = runAt
		} else {
			require.Equal(t, "failed", status, "the sixth failure spends max_attempts")
			require.NotNil(t, finished)
			require.True(t, finished.Equal(now))
			require.Equal(t, "error", ev.Level)
			require.Equal(t, true, ev.Fields["final"])
			require.Nil(t, ev.Fields["next_run_at"])
		}
	}
	var events int
	c.QueryRow(`select count(*) from pgrun.job_events where job_id = $1 and event = 'job.failed'`, []any{id}, &events)
	require.Equal(t, 6, events)
}

// retry_later and requeue_job put a running job back without spending a failure:
// retry_later after exactly its delay, requeue_job at once, each with its event. A
// job allowed one attempt that was put back twice still has that attempt.
func TestPutBackSpendsNoFailure(t *testing.T) {
	b := testkit.Setup(t)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := testkit.PinClock(t, b, t0)
	var id int64
	c.QueryRow(`select id from pgrun.enqueue_job('api', max_attempts => 1)`, nil, &id)
	require.Equal(t, []testkit.Claim{{ID: id, Attempt: 1}}, testkit.ClaimN(t, c.Conn, "default", "w", 1, "30 seconds"))

	var status string
	var runAt time.Time
	var failures int
	c.QueryRow(`select status::text, run_at, failures from pgrun.retry_later($1, 1, '90 seconds', 'rate limited')`,
		[]any{id}, &status, &runAt, &failures)
	require.Equal(t, "queued", status)
	require.True(t, runAt.Equal(t0.Add(90*time.Second)), "run_at %s", runAt)
	require.Zero(t, failures)
	ev := kitLastEvent(t, c.Conn, id)
	require.Equal(t, "job.retry_later", ev.Event)
	require.Equal(t, "rate limited", *ev.Message)
	require.EqualValues(t, 1, ev.Fields["attempt"])
	require.Equal(t, "w", ev.Fields["worker"])

	c.Set(t0.Add(89 * time.Second))
	require.Empty(t, testkit.ClaimN(t, c.Conn, "default", "w", 1, "30 seconds"), "not due before its delay")
	c.Set(t0.Add(90 * time.Second))
	require.Equal(t, []testkit.Claim{{ID: id, Attempt: 2}}, testkit.ClaimN(t, c.Conn, "default", "w", 1, "30 seconds"))

	c.QueryRow(`select status::text, run_at, failures from pgrun.requeue_job($1, 2, 'shutting down')`,
		[]any{id}, &status, &runAt, &failures)
	require.Equal(t, "queued", status)
	require.True(t, runAt.Equal(t0.Add(90*time.Second)), "due at once")
	require.Zero(t, failures)
	ev = kitLastEvent(t, c.Conn, id)
	require.Equal(t, "job.requeued", ev.Event)
	require.Equal(t, "shutting down", *ev.Message)

	require.Equal(t, []testkit.Claim{{ID: id, Attempt: 3}}, testkit.ClaimN(t, c.Conn, "default", "w", 1, "30 seconds"))
	c.QueryRow(`select status::text, failures from pgrun.fail_job($1, 3, '{"message": "real failure"}')`,
		[]any{id}, &status, &failures)
	require.Equal(t, "failed", status, "the single attempt was still unspent until now")
	require.Equal(t, 1, failures)
}

// A permanent failure (retryable false) ends the job at once with attempts left;
// retry_job then redrives it with its failure count reset.
func TestPermanentFailureEndsTheJobAtOnce(t *testing.T) {
	b := testkit.Setup(t)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := testkit.PinClock(t, b, t0)
	var id int64
	c.QueryRow(`select id from pgrun.enqueue_job('parse', max_attempts => 25)`, nil, &id)
	require.Equal(t, []testkit.Claim{{ID: id, Attempt: 1}}, testkit.ClaimN(t, c.Conn, "default", "w", 1, "30 seconds"))
	c.Set(t0.Add(5 * time.Second))
	var status string
	var failures int
	var finished *time.Time
	c.QueryRow(`select status::text, failures, finished_at
		from pgrun.fail_job($1, 1, '{"message": "bad input", "class": "validation"}', retryable => false)`,
		[]any{id}, &status, &failures, &finished)
	require.Equal(t, "failed", status)
	require.Equal(t, 1, failures)
	require.NotNil(t, finished)
	require.True(t, finished.Equal(t0.Add(5*time.Second)))
	ev := kitLastEvent(t, c.Conn, id)
	require.Equal(t, "job.failed", ev.Event)
	require.Equal(t, "error", ev.Level)
	require.Equal(t, true, ev.Fields["final"])
	require.Equal(t, false, ev.Fields["retryable"])
	require.Equal(t, "validation", ev.Fields["class"])
	require.Empty(t, testkit.ClaimN(t, c.Conn, "default", "w", 1, "30 seconds"), "a failed job is not claimed")

	c.QueryRow(`select status::text, failures from pgrun.retry_job($1)`, []any{id}, &status, &failures)
	require.Equal(t, "queued", status)
	require.Zero(t, failures)
	require.Equal(t, []testkit.Claim{{ID: id, Attempt: 2}}, testkit.ClaimN(t, c.Conn, "default", "w", 1, "30 seconds"))
}
