package tests

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// An expired lease sends the job back to the queue, the old holder's report is then
// stale, and once the lease budget (3) is spent the next expiry fails the job.
func TestExpiredLeaseRequeuesThenFailsPastBudget(t *testing.T) {
	b := testkit.Setup(t)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := testkit.PinClock(t, b, now)
	c.Exec(`select pgrun.enqueue_job('noop')`)

	for expiry := 1; expiry <= 4; expiry++ {
		var id int64
		var attempt int
		c.QueryRow(`select id, attempt from pgrun.claim_jobs('default', 'w', 1, '30 seconds')`, nil, &id, &attempt)
		require.Equal(t, expiry, attempt)

		c.Set(now.Add(29 * time.Second))
		var out string
		c.QueryRow(`select (pgrun.maintain() - 'steps' - 'not_due')::text`, nil, &out) // the counts, not the timings
		require.JSONEq(t, `{"lease_requeued": 0, "lease_failed": 0, "timed_out": 0, "workers_forgotten": 0,
			"workers_flagged_dead": 0, "schedules_fired": 0, "pruned": 0, "stats_refreshed": 0,
			"outbox_dispatched": 0, "outbox_retried": 0, "outbox_poisoned": 0, "waits_timed_out": 0}`, out, "lease still valid")

		c.Set(now.Add(31 * time.Second))
		c.QueryRow(`select (pgrun.maintain() - 'steps' - 'not_due')::text`, nil, &out)
		var did map[string]int
		require.NoError(t, json.Unmarshal([]byte(out), &did))
		j, err := pgrun.GetJob(b.Ctx, b.Pool, id)
		require.NoError(t, err)
		require.Equal(t, expiry, j.LeaseExpiries)
		if expiry <= 3 {
			require.Equal(t, 1, did["lease_requeued"])
			require.Equal(t, pgrun.StatusQueued, j.Status)
			// The old holder comes back late: its report is stale.
			var done *int64
			c.QueryRow(`select max(x) from pgrun.complete_jobs(array[$1::bigint], array[$2::int]) x`, []any{id, attempt}, &done)
			require.Nil(t, done)
		} else {
			require.Equal(t, 1, did["lease_failed"])
			require.Equal(t, pgrun.StatusFailed, j.Status)
			require.Contains(t, string(j.Error), `"class": "lease_expired"`)
		}
		now = now.Add(31 * time.Second)
	}
	var requeues, failed int
	c.QueryRow(`select count(*) filter (where event = 'job.lease_expired_requeue'),
		count(*) filter (where event = 'job.lease_expired') from pgrun.job_events`, nil, &requeues, &failed)
	require.Equal(t, 3, requeues)
	require.Equal(t, 1, failed)
}

// renew_leases extends the leases a worker still holds and leaves out the rest, so the
// runner can tell which jobs it lost.
func TestRenewLeasesReturnsOnlyHeldJobs(t *testing.T) {
	b := testkit.Setup(t)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := testkit.PinClock(t, b, now)
	c.Exec(`select pgrun.enqueue_jobs('[{"kind": "a"}, {"kind": "b"}, {"kind": "c"}]')`)
	c.Exec(`select pgrun.claim_jobs('default', 'w1', 2, '30 seconds')`)
	c.Exec(`select pgrun.claim_jobs('default', 'w2', 1, '30 seconds')`)
	var mine []int64
	c.QueryRow(`select array_agg(id order by id) from pgrun.jobs where claimed_by = 'w1'`, nil, &mine)
	require.Len(t, mine, 2)
	var theirs int64
	c.QueryRow(`select id from pgrun.jobs where claimed_by = 'w2'`, nil, &theirs)
	c.Exec(`select pgrun.cancel_job($1)`, mine[1])

	c.Set(now.Add(20 * time.Second))
	var held []int64
	c.QueryRow(`select coalesce(array_agg(x), '{}') from pgrun.renew_leases('w1', $1, '30 seconds') x`,
		[]any{[]int64{mine[0], mine[1], theirs}}, &held)
	require.Equal(t, []int64{mine[0]}, held, "the cancelled job and w2's job are not w1's")
	var until time.Time
	c.QueryRow(`select lease_expires_at from pgrun.jobs where id = $1`, []any{mine[0]}, &until)
	require.Equal(t, now.Add(50*time.Second), until.UTC())
}

// maintain() fails a running job past its timeout (class timeout, retried while
// attempts remain) unless it showed life within the stall window.
func TestTimeoutFailsSilentJobsAndSparesBeatingOnes(t *testing.T) {
	b := testkit.Setup(t)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := testkit.PinClock(t, b, now)
	c.Exec(`select pgrun.enqueue_jobs('[{"kind": "silent", "timeout": "10 seconds"}, {"kind": "beating", "timeout": "10 seconds"}]')`)
	c.Exec(`select pgrun.claim_jobs('default', 'w', 2, '10 minutes')`)
	var silent, beating int64
	c.QueryRow(`select id from pgrun.jobs where kind = 'silent'`, nil, &silent)
	c.QueryRow(`select id from pgrun.jobs where kind = 'beating'`, nil, &beating)

	c.Set(now.Add(50 * time.Second))
	c.Exec(`select pgrun.beat(array[$1::bigint])`, beating)
	c.Set(now.Add(70 * time.Second)) // 60 s past the timeout; silent for 70 s, beating beat 20 s ago
	var out string
	c.QueryRow(`select pgrun.maintain(stall_window => '1 minute')::text`, nil, &out)
	require.Contains(t, out, `"timed_out": 1`)

	j, err := pgrun.GetJob(context.Background(), b.Pool, silent)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusQueued, j.Status, "retried: attempts remain")
	require.Equal(t, 1, j.Failures)
	require.Contains(t, string(j.Error), `"class": "timeout"`)
	require.Equal(t, pgrun.StatusRunning, testkit.JobStatus(t, b, beating), "it showed life within the stall window")
}
