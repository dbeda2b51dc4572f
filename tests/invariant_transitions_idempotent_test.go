package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// transition is one worker-side report, called with a job's (id, attempt).
type transition struct {
	name string
	sql  string // $1 id, $2 attempt; returns one value that is NULL when nothing changed
}

var transitions = []transition{
	{"complete_jobs", `select (select max(x) from pgrun.complete_jobs(array[$1::bigint], array[$2::int]) x)`},
	{"fail_job", `select (pgrun.fail_job($1, $2, '{"message": "boom"}')).id`},
	{"retry_later", `select (pgrun.retry_later($1, $2, '1 minute', 'busy')).id`},
	{"requeue_job", `select (pgrun.requeue_job($1, $2, 'shutdown')).id`},
}

// Each worker-side transition applies once: a duplicate delivery, a stale attempt or
// a call on a job that is not running returns NULL and changes nothing.
func TestTransitionsAreIdempotentAndStaleSafe(t *testing.T) {
	for _, tr := range transitions {
		t.Run(tr.name, func(t *testing.T) {
			b := testkit.Setup(t)
			job, err := pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil)
			require.NoError(t, err)

			// Not running yet: nothing happens.
			before, counts := testkit.RowJSON(t, b.Pool, job.ID), testkit.TableCounts(t, b)
			var got *int64
			require.NoError(t, b.Pool.QueryRow(b.Ctx, tr.sql, job.ID, 0).Scan(&got))
			require.Nil(t, got)
			require.Equal(t, before, testkit.RowJSON(t, b.Pool, job.ID))

			id, attempt := testkit.ClaimOne(t, b.Pool, "w1", "30 seconds")
			require.Equal(t, job.ID, id)
			require.NoError(t, b.Pool.QueryRow(b.Ctx, tr.sql, id, attempt).Scan(&got))
			require.NotNil(t, got, "the first call applies")
			after, counts := testkit.RowJSON(t, b.Pool, id), testkit.TableCounts(t, b)

			// The duplicate changes nothing.
			require.NoError(t, b.Pool.QueryRow(b.Ctx, tr.sql, id, attempt).Scan(&got))
			require.Nil(t, got)
			require.Equal(t, after, testkit.RowJSON(t, b.Pool, id))
			require.Equal(t, counts, testkit.TableCounts(t, b))

			// After a re-claim, the old attempt is stale.
			if testkit.JobStatus(t, b, id) == pgrun.StatusQueued {
				_, err := b.Pool.Exec(b.Ctx, `update pgrun.jobs set run_at = now() where id = $1`, id)
				require.NoError(t, err)
				id2, attempt2 := testkit.ClaimOne(t, b.Pool, "w2", "30 seconds")
				require.Equal(t, id, id2)
				require.Equal(t, attempt+1, attempt2)
				reclaimed := testkit.RowJSON(t, b.Pool, id)
				require.NoError(t, b.Pool.QueryRow(b.Ctx, tr.sql, id, attempt).Scan(&got))
				require.Nil(t, got, "a stale attempt changes nothing")
				require.Equal(t, reclaimed, testkit.RowJSON(t, b.Pool, id))
			}
		})
	}
}

// A retryable failure goes back to the queue after an exponential backoff with
// jitter: the delay for failure n lies in [d/2, d] with d = 1 s * 2^(n-1).
func TestFailJobBacksOffExponentiallyThenFails(t *testing.T) {
	b := testkit.Setup(t)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := testkit.PinClock(t, b, now)
	c.Exec(`select pgrun.enqueue_job('flaky', max_attempts => 5)`)
	for n := 1; n <= 5; n++ {
		c.Set(now)
		var id int64
		var attempt int
		c.QueryRow(`select id, attempt from pgrun.claim_jobs('default', 'w', 1)`, nil, &id, &attempt)
		require.Equal(t, n, attempt)
		var status string
		var runAt time.Time
		var failures int
		var finished *time.Time
		c.QueryRow(`select status, run_at, failures, finished_at from pgrun.fail_job($1, $2, '{"message": "flaky", "class": "upstream"}')`,
			[]any{id, attempt}, &status, &runAt, &failures, &finished)
		require.Equal(t, n, failures)
		if n < 5 {
			require.Equal(t, "queued", status)
			d := time.Second << (n - 1)
			delay := runAt.Sub(now)
			require.GreaterOrEqual(t, delay, d/2, "failure %d", n)
			require.LessOrEqual(t, delay, d, "failure %d", n)
			require.Nil(t, finished)
			now = runAt
		} else {
			require.Equal(t, "failed", status, "max_attempts spent")
			require.NotNil(t, finished)
		}
	}
	var events, final int
	c.QueryRow(`select count(*), count(*) filter (where (fields->>'final')::bool and level = 'error')
		from pgrun.job_events where event = 'job.failed' and fields->>'class' = 'upstream'`, nil, &events, &final)
	require.Equal(t, 5, events)
	require.Equal(t, 1, final)
}

// The backoff is capped: far into the retries the delay stays within an hour.
func TestBackoffIsCapped(t *testing.T) {
	b := testkit.Setup(t)
	var lo, hi time.Duration
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select min(d), max(d) from (select pgrun.backoff(40) d from generate_series(1, 200)) s`).Scan(&lo, &hi))
	require.GreaterOrEqual(t, lo, 30*time.Minute)
	require.LessOrEqual(t, hi, time.Hour)
	require.NotEqual(t, lo, hi, "jitter spreads retries")
}

// A permanent failure ends the job at once, whatever attempts remain; retry_later and
// requeue_job spend no attempt.
func TestPermanentFailureAndFreeRequeues(t *testing.T) {
	b := testkit.Setup(t)
	job, err := pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil, pgrun.MaxAttempts(1))
	require.NoError(t, err)
	for range 3 {
		id, attempt := testkit.ClaimOne(t, b.Pool, "w", "30 seconds")
		_, err := b.Pool.Exec(b.Ctx, `select pgrun.retry_later($1, $2, '0 s', 'later')`, id, attempt)
		require.NoError(t, err)
		id, attempt = testkit.ClaimOne(t, b.Pool, "w", "30 seconds")
		_, err = b.Pool.Exec(b.Ctx, `select pgrun.requeue_job($1, $2, 'shutdown')`, id, attempt)
		require.NoError(t, err)
	}
	j, err := pgrun.GetJob(b.Ctx, b.Pool, job.ID)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusQueued, j.Status)
	require.Equal(t, 6, j.Attempt)
	require.Zero(t, j.Failures, "max_attempts 1 is still unspent")

	perm, err := pgrun.Enqueue(b.Ctx, b.Pool, "other", nil, pgrun.Queue("perm"))
	require.NoError(t, err)
	var id int64
	var attempt int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id, attempt from pgrun.claim_jobs('perm', 'w', 1)`).Scan(&id, &attempt))
	require.Equal(t, perm.ID, id)
	var status string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select status from pgrun.fail_job($1, $2, '{"message": "bad input"}', retryable => false)`, id, attempt).Scan(&status))
	require.Equal(t, "failed", status)
}
