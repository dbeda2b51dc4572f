package tests

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
)

// TestFailoverPromotionAfterAGap: synchronous replication, two runners of 20 slots on
// jobs of 20 ms, the primary stopped immediately (its last claims committed
// milliseconds before, on the standby too), and the standby promoted only after a gap
// longer than a lease. The jobs of those last claims finish during the gap and cannot
// be reported; after the promotion maintain() rounds come at once, before the runners
// are back (pg_cron, or a runner that reconnected first), and must not take their
// leases, long run out, for lost: the promotion gives every lease a grace of its
// length (from when it is first seen, not from the standby's own start, long before),
// in which the runners report what they finished. No job whose handler finished runs
// again. The gap and the leases are scaled down (8 s and 5 s leases, for 45 s and
// 30 s): only their ratio matters. PGRUN_FAILOVER_GAP=45s (with leases two thirds of
// it, 30 s) runs the incident at its own scale.
func TestFailoverPromotionAfterAGap(t *testing.T) {
	if os.Getenv("PGRUN_FAILOVER_TEST") != "1" {
		t.Skip("set PGRUN_FAILOVER_TEST=1 to run the failover tests (about half a minute)")
	}
	lease, gap := 5*time.Second, 8*time.Second
	if v := os.Getenv("PGRUN_FAILOVER_GAP"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err, "PGRUN_FAILOVER_GAP")
		require.True(t, d >= 3*time.Second && d <= 5*time.Minute, "PGRUN_FAILOVER_GAP %s: 3s to 5m", d)
		lease, gap = d*2/3, d
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute+4*gap)
	defer cancel()
	// Every commit waits for the standby: a claim the runner got is on the standby.
	primary, standby, url, admin := replicatedPair(t, ctx)
	specs := make([]pgrun.JobSpec, 4000)
	for i := range specs {
		specs[i] = pgrun.JobSpec{Kind: "work", Args: workArgs{MS: 20}}
	}
	enqueued, err := pgrun.EnqueueMany(ctx, admin, specs)
	require.NoError(t, err)

	rec := newRunRecorder()
	var logs testkit.Buffer
	for i := range 2 {
		r, err := runner.New(failoverPool(t, ctx, url, nil), runner.Config{
			WorkerID:          fmt.Sprintf("runner-%d", i),
			Queues:            map[string]runner.QueueConfig{"default": {Workers: 20}},
			Lease:             lease,
			Logger:            failoverLogger(&logs),
			TelemetryInterval: -1,
			ShutdownGrace:     time.Second,
		})
		require.NoError(t, err)
		testkit.Handle(t, r, "work", rec.handler)
		testkit.StartRunner(t, r)
	}
	testkit.Eventually(t, 30*time.Second, "jobs to finish on the primary", func() bool { return rec.finishedCount() > 500 })
	testkit.Eventually(t, 10*time.Second, "maintenance to run on the primary", func() bool {
		var n int
		require.NoError(t, admin.QueryRow(ctx, `select count(*) from pgrun.server_epochs where checked_at is not null`).Scan(&n))
		return n > 0
	})

	down := time.Now()
	primary.stop("immediate")
	time.Sleep(gap) // the outage itself, not a wait for a condition
	standby.promote()
	promoted := time.Now()
	finishedInGap := rec.finishedBetween(down, promoted)
	t.Logf("%d handlers finished between the stop and the promotion", len(finishedInGap))
	require.NotEmpty(t, finishedInGap, "no job finished in the gap: the test shows nothing")

	// Rounds of maintain() from the moment the new primary takes writes, as pg_cron
	// would run them, racing the runners' reports.
	rounds := 0
	for time.Since(promoted) < 2*lease {
		mctx, mcancel := context.WithTimeout(ctx, time.Second)
		if _, err := admin.Exec(mctx, `select pgrun.maintain()`); err == nil {
			rounds++
		}
		mcancel()
		time.Sleep(50 * time.Millisecond) // the rounds' own pace
	}
	require.Positive(t, rounds, "no maintain() round ran on the new primary")

	ids := make([]int64, len(enqueued))
	for i, j := range enqueued {
		ids[i] = j.ID
	}
	testkit.Eventually(t, 60*time.Second, "every job to succeed", func() bool {
		var n int
		require.NoError(t, admin.QueryRow(ctx, `select count(*) from pgrun.jobs where id = any($1) and status = 'succeeded'`, ids).Scan(&n))
		return n == len(ids)
	})
	finished := make([]int64, 0, len(finishedInGap))
	for id := range finishedInGap {
		finished = append(finished, id)
	}
	var reaped int
	require.NoError(t, admin.QueryRow(ctx, `select count(*) from pgrun.job_events
		where job_id = any($1) and event in ('job.lease_expired_requeue', 'job.lease_expired')`, finished).Scan(&reaped))
	rerun := rec.startedAgain(finishedInGap)
	t.Logf("promotion %s after the stop: %d maintain() rounds in the first %s; of %d jobs finished in the gap, %d reaped, %d ran again",
		gap, rounds, 2*lease, len(finishedInGap), reaped, len(rerun))
	require.Zero(t, reaped, "leases of jobs finished in the gap were taken for lost")
	require.Empty(t, rerun, "jobs that finished in the gap ran again")
	var epoch string
	var since time.Time
	require.NoError(t, admin.QueryRow(ctx, `select reason, since from pgrun.server_epochs order by id desc limit 1`).Scan(&epoch, &since))
	require.Equal(t, "promotion", epoch)
	require.WithinDuration(t, promoted, since, 2*time.Second, "a promotion takes effect when first seen")
}

// A promoted standby has a start time of its own, from long before the promotion (it
// ran as a standby). Its epoch takes effect when maintain() first sees the new
// timeline, so the leases that ran out while the primary was gone get their grace
// from then: here a standby promoted 45 s after the primary died, with 30 s leases
// claimed just before. (The rows are what the standby replicated from the primary:
// another server's start, an older timeline, its last round.)
func TestPromotedStandbyGivesLeasesTheirGraceFromThePromotion(t *testing.T) {
	b := testkit.Setup(t)
	t0 := testkit.At("2030-01-01T10:00:00Z")
	c := testkit.PinClock(t, b, t0)
	c.Exec(`insert into pgrun.server_epochs (postmaster_at, timeline, since, reason, checked_at, round_every)
		select pg_postmaster_start_time() + interval '1 hour', pgrun.server_timeline() - 1, $1, 'start',
		       now() - interval '45 seconds', interval '1 second'`, t0.Add(-time.Hour))
	c.Exec(`select pgrun.enqueue_job('noop')`)
	id, _ := testkit.ClaimOne(t, c.Conn, "w", "30 seconds")
	promoted := t0.Add(45 * time.Second)
	c.Set(promoted)
	require.EqualValues(t, 0, kitMaintain(t, c, "")["lease_requeued"], "first round on the new primary")
	var reason string
	var since time.Time
	c.QueryRow(`select reason, since from pgrun.server_epochs order by id desc limit 1`, nil, &reason, &since)
	require.Equal(t, "promotion", reason)
	require.True(t, since.Equal(promoted), "a promotion takes effect when first seen, got %s", since)
	c.Set(promoted.Add(29 * time.Second))
	require.EqualValues(t, 0, kitMaintain(t, c, "")["lease_requeued"], "within a lease of the promotion")
	require.Equal(t, "running", statusOf(t, c, id))
	c.Set(promoted.Add(31 * time.Second))
	require.EqualValues(t, 1, kitMaintain(t, c, "")["lease_requeued"], "past it")
}

// A round that comes long after the one before it (no round for 45 s, where they ran
// every second: every runner, the maintenance leader among them, was cut off from the
// database) starts an epoch of reason gap, and leases get their grace from it as after
// a restart. Rounds a minute apart that always were a minute apart (pg_cron) are not
// a gap. The gap is real time (now()), which the test moves by rewriting the last
// round's time, the one seam.
func TestGapInTheMaintenanceRoundsGivesLeasesTheirGrace(t *testing.T) {
	b := testkit.Setup(t)
	t0 := testkit.At("2030-01-01T10:00:00Z")
	c := testkit.PinClock(t, b, t0)
	c.Exec(`select pgrun.enqueue_jobs('[{"kind": "a"}, {"kind": "b"}]')`)
	first, _ := testkit.ClaimOne(t, c.Conn, "w", "30 seconds")
	kitMaintain(t, c, "") // the running server's epoch, and its first round
	lastRound := func(ago, every string) {
		c.Exec(`update pgrun.server_epochs set checked_at = now() - $1::interval, round_every = $2::interval
			where id = (select max(id) from pgrun.server_epochs)`, ago, every)
	}
	lastRound("45 seconds", "1 second")
	back := t0.Add(45 * time.Second)
	c.Set(back)
	require.EqualValues(t, 0, kitMaintain(t, c, "")["lease_requeued"], "the first round after the gap")
	var reason string
	c.QueryRow(`select reason from pgrun.server_epochs order by id desc limit 1`, nil, &reason)
	require.Equal(t, "gap", reason)
	c.Set(back.Add(29 * time.Second))
	require.EqualValues(t, 0, kitMaintain(t, c, "")["lease_requeued"], "within a lease of the gap's end")
	c.Set(back.Add(31 * time.Second))
	require.EqualValues(t, 1, kitMaintain(t, c, "")["lease_requeued"], "past it")
	require.Equal(t, "queued", statusOf(t, c, first))

	// pg_cron's pace: a minute between rounds, as always.
	second, _ := testkit.ClaimOne(t, c.Conn, "w", "30 seconds")
	lastRound("60 seconds", "60 seconds")
	c.Set(back.Add(31*time.Second + time.Minute))
	require.EqualValues(t, 1, kitMaintain(t, c, "")["lease_requeued"], "not a gap: judged at once")
	require.Equal(t, "queued", statusOf(t, c, second))
	c.QueryRow(`select reason from pgrun.server_epochs order by id desc limit 1`, nil, &reason)
	require.Equal(t, "gap", reason, "no new epoch")
}
