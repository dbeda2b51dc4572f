package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testkit"
)

// setEpoch records a server epoch of this very server (its start time and timeline,
// so maintain() sees nothing new) that took effect at since: what maintain() records
// after a restart or a promotion.
func setEpoch(c *testkit.Clock, since time.Time) {
	c.Exec(`insert into pgrun.server_epochs (postmaster_at, timeline, since, reason)
		select pg_postmaster_start_time(), pgrun.server_timeline(), $1, 'start'`, since)
}

// A lease that ran out during an outage is not judged until one lease length after
// the server came back: the reaper leaves it alone within the grace, and requeues it
// once the grace has passed. The grace is the job's own lease length.
func TestLeaseThatRanOutDuringAnOutageIsReapedOnlyAfterTheGrace(t *testing.T) {
	b := testkit.Setup(t)
	t0 := testkit.At("2030-01-01T10:00:00Z")
	c := testkit.PinClock(t, b, t0)
	c.Exec(`select pgrun.enqueue_jobs('[{"kind": "short"}, {"kind": "long"}]')`)
	var short, long int64
	c.QueryRow(`select id from pgrun.claim_jobs('default', 'w', 1, '30 seconds')`, nil, &short)
	c.QueryRow(`select id from pgrun.claim_jobs('default', 'w', 1, '2 minutes')`, nil, &long)
	// The server went away at t0 + 5 s and was back at t0 + 3 min: both leases ran out
	// in the gap.
	back := t0.Add(3 * time.Minute)
	setEpoch(c, back)

	reap := func(at time.Time) map[string]any {
		c.Set(at)
		return kitMaintain(t, c, "")
	}
	require.EqualValues(t, 0, reap(back.Add(time.Second))["lease_requeued"], "just back: within every grace")
	require.EqualValues(t, 0, reap(back.Add(29 * time.Second))["lease_requeued"], "within the 30 s lease's grace")
	require.Equal(t, "running", statusOf(t, c, short))
	require.EqualValues(t, 1, reap(back.Add(31 * time.Second))["lease_requeued"], "past the 30 s lease's grace")
	require.Equal(t, "queued", statusOf(t, c, short))
	require.Equal(t, "running", statusOf(t, c, long), "a 2 minute lease has 2 minutes of grace")
	require.EqualValues(t, 0, reap(back.Add(119 * time.Second))["lease_requeued"])
	require.EqualValues(t, 1, reap(back.Add(121 * time.Second))["lease_requeued"])
	require.Equal(t, "queued", statusOf(t, c, long))
}

// A runner that renews within the grace keeps its job: the renewal's lease counts
// from the renewal, and the job is judged by it alone afterwards.
func TestLeaseRenewedWithinTheGraceIsKept(t *testing.T) {
	b := testkit.Setup(t)
	t0 := testkit.At("2030-01-01T10:00:00Z")
	c := testkit.PinClock(t, b, t0)
	c.Exec(`select pgrun.enqueue_job('noop')`)
	var id int64
	c.QueryRow(`select id from pgrun.claim_jobs('default', 'w', 1, '30 seconds')`, nil, &id)
	back := t0.Add(time.Minute)
	setEpoch(c, back)
	c.Set(back.Add(2 * time.Second))
	c.Exec(`select pgrun.renew_leases('w', array[$1::bigint])`, id)
	c.Set(back.Add(31 * time.Second))
	require.EqualValues(t, 0, kitMaintain(t, c, "")["lease_requeued"], "renewed at back+2s, good until back+32s")
	c.Set(back.Add(33 * time.Second))
	require.EqualValues(t, 1, kitMaintain(t, c, "")["lease_requeued"], "then judged as any lease")
}

// maintain() records a new epoch when the server's start time or its timeline changes
// (a restart, a promotion), once; a restart takes effect from the server's start, a
// promotion from the moment maintain() first sees it.
func TestMaintainRecordsServerStartsAndPromotions(t *testing.T) {
	b := testkit.Setup(t)
	t0 := testkit.At("2030-01-01T10:00:00Z")
	c := testkit.PinClock(t, b, t0)
	count := func() (n int) {
		c.QueryRow(`select count(*) from pgrun.server_epochs`, nil, &n)
		return n
	}
	kitMaintain(t, c, "")
	require.Equal(t, 1, count(), "the first round records the running server")
	var reason string
	var startMatches bool
	c.QueryRow(`select reason, since = pg_postmaster_start_time() from pgrun.server_epochs order by id desc limit 1`, nil,
		&reason, &startMatches)
	require.Equal(t, "start", reason)
	require.True(t, startMatches, "a start takes effect from the server's start")
	kitMaintain(t, c, "")
	require.Equal(t, 1, count(), "nothing new, nothing recorded")

	// An earlier server: the newest row names another start.
	c.Exec(`update pgrun.server_epochs set postmaster_at = postmaster_at - interval '1 hour'`)
	kitMaintain(t, c, "")
	require.Equal(t, 2, count())
	c.QueryRow(`select reason, since = pg_postmaster_start_time() from pgrun.server_epochs order by id desc limit 1`, nil,
		&reason, &startMatches)
	require.Equal(t, "start", reason)
	require.True(t, startMatches)

	// A promotion: same start, the newest row names an older timeline.
	c.Exec(`update pgrun.server_epochs set timeline = timeline - 1 where id = (select max(id) from pgrun.server_epochs)`)
	c.Set(t0.Add(time.Minute))
	kitMaintain(t, c, "")
	require.Equal(t, 3, count())
	var since time.Time
	c.QueryRow(`select reason, since from pgrun.server_epochs order by id desc limit 1`, nil, &reason, &since)
	require.Equal(t, "promotion", reason)
	require.True(t, since.Equal(t0.Add(time.Minute)), "a promotion takes effect when first seen, got %s", since)
}

// A worker silent only because the server was away is not flagged dead within three
// of its cadences after the server came back; past them it is.
func TestWorkerSilentThroughAnOutageIsNotFlaggedWithinTheGrace(t *testing.T) {
	b := testkit.Setup(t)
	t0 := testkit.At("2030-01-01T10:00:00Z")
	c := testkit.PinClock(t, b, t0)
	c.Exec(`select pgrun.worker_heartbeat('w1', 'host-a', 42, '{default}', cadence => '10 seconds')`)
	c.Exec(`select pgrun.enqueue_job('noop')`)
	c.Exec(`select pgrun.claim_jobs('default', 'w1', 1, '10 minutes')`)
	back := t0.Add(time.Minute)
	setEpoch(c, back)
	c.Set(back.Add(29 * time.Second))
	require.EqualValues(t, 0, kitMaintain(t, c, "")["workers_flagged_dead"], "silent 89 s, but the server is back only 29 s")
	c.Set(back.Add(31 * time.Second))
	require.EqualValues(t, 1, kitMaintain(t, c, "")["workers_flagged_dead"], "three cadences after the server came back")
}

// The timeout rule does not judge across the gap either: the server's return counts
// as a sign of life of every job, so a job past its timeout whose beats could not
// arrive during the outage gets a full stall window after it, and fails only past it.
func TestTimeoutSparesJobsSilentOnlyThroughAnOutage(t *testing.T) {
	b := testkit.Setup(t)
	t0 := testkit.At("2030-01-01T10:00:00Z")
	c := testkit.PinClock(t, b, t0)
	var id int64
	c.QueryRow(`select id from pgrun.enqueue_job('noop', timeout => '1 minute')`, nil, &id)
	c.Exec(`select pgrun.claim_jobs('default', 'w', 1, '1 hour')`)
	back := t0.Add(3 * time.Minute) // silent since t0: the server was away
	setEpoch(c, back)
	c.Set(back.Add(59 * time.Second))
	require.EqualValues(t, 0, kitMaintain(t, c, "")["timed_out"], "within a stall window of the server's return")
	require.Equal(t, "running", statusOf(t, c, id))
	c.Set(back.Add(61 * time.Second))
	require.EqualValues(t, 1, kitMaintain(t, c, "")["timed_out"], "past it")
	var class string
	c.QueryRow(`select error ->> 'class' from pgrun.jobs where id = $1`, []any{id}, &class)
	require.Equal(t, "timeout", class)
}

// statusOf reads one job's status on the pinned connection.
func statusOf(t *testing.T, c *testkit.Clock, id int64) string {
	t.Helper()
	var s string
	c.QueryRow(`select status::text from pgrun.jobs where id = $1`, []any{id}, &s)
	return s
}
