package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
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
			b := setup(t)
			job, err := pgrun.Enqueue(b.ctx, b.pool, "noop", nil)
			require.NoError(t, err)

			// Not running yet: nothing happens.
			before, counts := rowJSON(t, b.pool, job.ID), tableCounts(t, b)
			var got *int64
			require.NoError(t, b.pool.QueryRow(b.ctx, tr.sql, job.ID, 0).Scan(&got))
			require.Nil(t, got)
			require.Equal(t, before, rowJSON(t, b.pool, job.ID))

			id, attempt := claimOne(t, b.pool, "w1", "30 seconds")
			require.Equal(t, job.ID, id)
			require.NoError(t, b.pool.QueryRow(b.ctx, tr.sql, id, attempt).Scan(&got))
			require.NotNil(t, got, "the first call applies")
			after, counts := rowJSON(t, b.pool, id), tableCounts(t, b)

			// The duplicate changes nothing.
			require.NoError(t, b.pool.QueryRow(b.ctx, tr.sql, id, attempt).Scan(&got))
			require.Nil(t, got)
			require.Equal(t, after, rowJSON(t, b.pool, id))
			require.Equal(t, counts, tableCounts(t, b))

			// After a re-claim, the old attempt is stale.
			if jobStatus(t, b, id) == pgrun.StatusQueued {
				_, err := b.pool.Exec(b.ctx, `update pgrun.jobs set run_at = now() where id = $1`, id)
				require.NoError(t, err)
				id2, attempt2 := claimOne(t, b.pool, "w2", "30 seconds")
				require.Equal(t, id, id2)
				require.Equal(t, attempt+1, attempt2)
				reclaimed := rowJSON(t, b.pool, id)
				require.NoError(t, b.pool.QueryRow(b.ctx, tr.sql, id, attempt).Scan(&got))
				require.Nil(t, got, "a stale attempt changes nothing")
				require.Equal(t, reclaimed, rowJSON(t, b.pool, id))
			}
		})
	}
}

// A retryable failure goes back to the queue after an exponential backoff with
// jitter: the delay for failure n lies in [d/2, d] with d = 1 s * 2^(n-1).
func TestFailJobBacksOffExponentiallyThenFails(t *testing.T) {
	b := setup(t)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := pinnedClock(t, b, now)
	c.exec(`select pgrun.enqueue_job('flaky', max_attempts => 5)`)
	for n := 1; n <= 5; n++ {
		c.set(now)
		var id int64
		var attempt int
		c.queryRow(`select id, attempt from pgrun.claim_jobs('default', 'w', 1)`, nil, &id, &attempt)
		require.Equal(t, n, attempt)
		var status string
		var runAt time.Time
		var failures int
		var finished *time.Time
		c.queryRow(`select status, run_at, failures, finished_at from pgrun.fail_job($1, $2, '{"message": "flaky", "class": "upstream"}')`,
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
	c.queryRow(`select count(*), count(*) filter (where (fields->>'final')::bool and level = 'error')
		from pgrun.job_events where event = 'job.failed' and fields->>'class' = 'upstream'`, nil, &events, &final)
	require.Equal(t, 5, events)
	require.Equal(t, 1, final)
}

// The backoff is capped: far into the retries the delay stays within an hour.
func TestBackoffIsCapped(t *testing.T) {
	b := setup(t)
	var lo, hi time.Duration
	require.NoError(t, b.pool.QueryRow(b.ctx, `select min(d), max(d) from (select pgrun.backoff(40) d from generate_series(1, 200)) s`).Scan(&lo, &hi))
	require.GreaterOrEqual(t, lo, 30*time.Minute)
	require.LessOrEqual(t, hi, time.Hour)
	require.NotEqual(t, lo, hi, "jitter spreads retries")
}

// A permanent failure ends the job at once, whatever attempts remain; retry_later and
// requeue_job spend no attempt.
func TestPermanentFailureAndFreeRequeues(t *testing.T) {
	b := setup(t)
	job, err := pgrun.Enqueue(b.ctx, b.pool, "noop", nil, pgrun.MaxAttempts(1))
	require.NoError(t, err)
	for range 3 {
		id, attempt := claimOne(t, b.pool, "w", "30 seconds")
		_, err := b.pool.Exec(b.ctx, `select pgrun.retry_later($1, $2, '0 s', 'later')`, id, attempt)
		require.NoError(t, err)
		id, attempt = claimOne(t, b.pool, "w", "30 seconds")
		_, err = b.pool.Exec(b.ctx, `select pgrun.requeue_job($1, $2, 'shutdown')`, id, attempt)
		require.NoError(t, err)
	}
	j, err := pgrun.GetJob(b.ctx, b.pool, job.ID)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusQueued, j.Status)
	require.Equal(t, 6, j.Attempt)
	require.Zero(t, j.Failures, "max_attempts 1 is still unspent")

	perm, err := pgrun.Enqueue(b.ctx, b.pool, "other", nil, pgrun.Queue("perm"))
	require.NoError(t, err)
	var id int64
	var attempt int
	require.NoError(t, b.pool.QueryRow(b.ctx, `select id, attempt from pgrun.claim_jobs('perm', 'w', 1)`).Scan(&id, &attempt))
	require.Equal(t, perm.ID, id)
	var status string
	require.NoError(t, b.pool.QueryRow(b.ctx, `select status from pgrun.fail_job($1, $2, '{"message": "bad input"}', retryable => false)`, id, attempt).Scan(&status))
	require.Equal(t, "failed", status)
}
