package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testkit"
)

// The front (sql/functions/39_claim_keyed.sql): the per-key claims of a queue resume
// their look at its front where the last one left off, instead of stepping over every
// job claimed since the last vacuum, and look from the start again at least every
// 250 ms. These tests pin the engine's clock, so that no look starts over unless the
// test moves it.

// frontClaim claims up to n jobs of queue for worker "w" at the clock's time and returns
// their ids in the order claim_jobs returns them.
func frontClaim(t *testing.T, c *testkit.Clock, queue string, n int) []int64 {
	t.Helper()
	var ids []int64
	c.QueryRow(`select coalesce(array_agg(id), '{}') from pgrun.claim_jobs($1, 'w', $2)`, []any{queue, n}, &ids)
	return ids
}

// jobIDs returns the ids of queue's jobs of key, oldest first.
func jobIDs(t *testing.T, b *testkit.DB, queue, key string) []int64 {
	t.Helper()
	var ids []int64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select coalesce(array_agg(id order by run_at, id), '{}') from pgrun.jobs
		where queue = $1 and concurrency_key is not distinct from nullif($2, '')`, queue, key).Scan(&ids))
	return ids
}

// A job passed over for its key's limit stays ahead of the front: the next claim, with
// no look from the start in between, takes it as soon as its key has room, before the
// jobs after it.
func TestClaimFrontStopsAtAJobPassedOver(t *testing.T) {
	b := testkit.Setup(t)
	testkit.ExecAll(t, b, `select pgrun.set_queue('lim', concurrency_limit => 1)`)
	enqueueKeyed(t, b, "lim", "k1", 2, time.Hour)
	enqueueKeyed(t, b, "lim", "k2", 2, 30*time.Minute)
	k1, k2 := jobIDs(t, b, "lim", "k1"), jobIDs(t, b, "lim", "k2")
	c := testkit.PinClock(t, b, time.Now().Add(time.Minute))

	require.Equal(t, []int64{k1[0], k2[0]}, frontClaim(t, c, "lim", 2), "one job of each key; k1's second passed over")
	var front int64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select front_id from pgrun.fair_cursors where queue = 'lim'`).Scan(&front))
	require.Equal(t, k1[0], front, "the front stops before the job passed over")

	c.Exec(`select pgrun.complete_jobs(array[$1::bigint], array[1], null, 'w')`, k1[0])
	require.Equal(t, []int64{k1[1]}, frontClaim(t, c, "lim", 1), "k1's second, not k2's: it was ahead")
}

// The front moves past what a claim took: a job that becomes claimable behind it (here
// a more urgent one enqueued later) waits for the next look from the start, at most
// 250 ms, and is then the first taken.
func TestClaimFrontFindsAJobBehindItWithinTheSweep(t *testing.T) {
	b := testkit.Setup(t)
	testkit.ExecAll(t, b, `select pgrun.set_queue('lim', key_rate_limit => 1000, key_rate_period => '1 second')`)
	enqueueKeyed(t, b, "lim", "k1", 10, time.Hour, 1)
	enqueueKeyed(t, b, "lim", "k2", 10, 30*time.Minute, 1)
	at := time.Now().Add(time.Minute)
	c := testkit.PinClock(t, b, at)
	require.Len(t, frontClaim(t, c, "lim", 5), 5)

	enqueueKeyed(t, b, "lim", "k3", 1, 2*time.Hour, 0) // more urgent, and older: behind the front
	urgent := jobIDs(t, b, "lim", "k3")[0]
	c.Set(at.Add(100 * time.Millisecond))
	require.NotContains(t, frontClaim(t, c, "lim", 1), urgent, "within the sweep the look goes on from the front")
	c.Set(at.Add(260 * time.Millisecond))
	require.Equal(t, []int64{urgent}, frontClaim(t, c, "lim", 1), "a look from the start finds it first")
}

// A fair queue's turn of the jobs without a key looks on from where the last turn
// stopped: keyless jobs behind more keyed jobs than one turn looks at (256) are found
// within a few turns, not only once the keyed jobs ahead of them have run. A turn that
// found none waits 50 ms before the next.
func TestClaimFrontKeylessTurnLooksFurtherEachTurn(t *testing.T) {
	b := testkit.Setup(t)
	testkit.ExecAll(t, b, `select pgrun.set_queue('fair', fair_by => 'concurrency_key')`)
	enqueueKeyed(t, b, "fair", "A", 600, time.Hour)
	enqueueKeyed(t, b, "fair", "", 3, 30*time.Minute)
	keyless := jobIDs(t, b, "fair", "")
	c := testkit.PinClock(t, b, time.Now().Add(time.Minute))

	var got []int64
	for range 8 { // each claim of one: key A's turn, then the keyless turn, in turn
		got = append(got, frontClaim(t, c, "fair", 1)...)
		c.Advance(60 * time.Millisecond)
	}
	require.Len(t, got, 8)
	require.Contains(t, got, keyless[0], "found within 8 claims though 600 keyed jobs are ahead of it")

	// Within 50 ms of a turn that found none, no turn looks: the keyless job enqueued
	// now waits for the next.
	c.Advance(time.Second)
	for range 4 { // the keyless jobs left, and a turn that finds none
		frontClaim(t, c, "fair", 1)
		c.Advance(60 * time.Millisecond)
	}
	var restAt time.Time
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select keyless_at from pgrun.fair_cursors where queue = 'fair'`).Scan(&restAt))
	require.True(t, restAt.After(c.Now().Add(-60*time.Millisecond)), "a turn found none and rests until %s", restAt)
}
