package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// release_unheld hands back, in one call, exactly the jobs running under the worker
// whose claims it does not hold: queued, due now, no attempt spent, an event saying
// why, and a wake-up; held claims and other workers' jobs are untouched, and a
// second call changes nothing.
func TestReleaseUnheldHandsBackOnlyUnheldClaims(t *testing.T) {
	b := testkit.Setup(t)
	now := testkit.At("2030-01-01T10:00:00Z")
	c := testkit.PinClock(t, b, now)
	c.Exec(`select pgrun.enqueue_jobs('[{"kind": "a"}, {"kind": "b"}, {"kind": "c"}, {"kind": "d"}]')`)
	c.Exec(`select pgrun.claim_jobs('default', 'w', 3, '30 seconds')`)
	c.Exec(`select pgrun.claim_jobs('default', 'other', 1, '30 seconds')`)
	var mine []int64
	var held pgrun.ClaimID
	c.QueryRow(`select array_agg(id order by id) from pgrun.jobs where claimed_by = 'w'`, nil, &mine)
	require.Len(t, mine, 3)
	c.QueryRow(`select claim_id from pgrun.jobs where id = $1`, []any{mine[0]}, &held)
	var theirs int64
	c.QueryRow(`select id from pgrun.jobs where claimed_by = 'other'`, nil, &theirs)
	keptHeld, keptTheirs := testkit.RowJSON(t, b.Pool, mine[0]), testkit.RowJSON(t, b.Pool, theirs)
	listener := testkit.Listen(t, b, pgrun.ChannelJobs)

	c.Set(now.Add(time.Second))
	var released []int64
	c.QueryRow(`select coalesce(array_agg(x order by x), '{}') from pgrun.release_unheld('w', $1) x`,
		[]any{[]pgrun.ClaimID{held}}, &released)
	require.Equal(t, mine[1:], released)
	for _, id := range released {
		j, err := pgrun.GetJob(b.Ctx, b.Pool, id)
		require.NoError(t, err)
		require.Equal(t, pgrun.StatusQueued, j.Status)
		require.Equal(t, 1, j.Attempt, "the attempt counter keeps the claim")
		require.Zero(t, j.Failures, "no attempt spent")
		require.Zero(t, j.LeaseExpiries)
		require.Nil(t, j.LeaseExpiresAt)
		require.True(t, j.RunAt.Equal(now.Add(time.Second)), "due at once")
		var event, msg string
		c.QueryRow(`select event, message from pgrun.job_events where job_id = $1`, []any{id}, &event, &msg)
		require.Equal(t, "job.released", event)
		require.Contains(t, msg, "worker w does not hold claim")
	}
	require.Equal(t, keptHeld, testkit.RowJSON(t, b.Pool, mine[0]), "a held claim is left alone")
	require.Equal(t, keptTheirs, testkit.RowJSON(t, b.Pool, theirs), "another worker's job is left alone")
	n := testkit.NextNotification(t, listener, 5*time.Second)
	require.NotNil(t, n, "the queue is woken")
	require.Equal(t, "default", n.Payload)

	c.QueryRow(`select coalesce(array_agg(x), '{}') from pgrun.release_unheld('w', $1) x`,
		[]any{[]pgrun.ClaimID{held}}, &released)
	require.Empty(t, released, "a second call changes nothing")

	// A NULL among the held claims holds nothing and keeps the held claim held.
	c.QueryRow(`select coalesce(array_agg(x), '{}') from pgrun.release_unheld('w', array[$1::uuid, null]) x`,
		[]any{held}, &released)
	require.Empty(t, released)
	require.Equal(t, keptHeld, testkit.RowJSON(t, b.Pool, mine[0]))

	// Holding nothing hands back everything, and a bad worker id is refused.
	c.QueryRow(`select coalesce(array_agg(x), '{}') from pgrun.release_unheld('w', '{}') x`, nil, &released)
	require.Equal(t, mine[:1], released)
	_, err := c.Conn.Exec(b.Ctx, `select pgrun.release_unheld('', '{}')`)
	require.Equal(t, "22023", testkit.PgError(t, err, "release_unheld with an empty worker id").Code)
}
