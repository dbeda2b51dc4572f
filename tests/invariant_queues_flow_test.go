package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// The queue settings of flow control per key (set_queue: sequence_on_failure, fair_by,
// key_rate_limit, key_rate_period, priority_aging), what queue_stats shows of them, and
// job_blocker, which says why a due job is not being claimed.

// Each setting is set, kept by a call that leaves it out, and reset; a value out of
// bounds is refused with 22023, a message naming it and a hint, and changes nothing.
func TestQueueFlowSettingsSetKeepResetAndBounds(t *testing.T) {
	b := testkit.Setup(t)
	c, err := pgrun.NewClient(b.Pool, pgrun.Config{})
	require.NoError(t, err)
	s := func(v string) *string { return &v }
	q, err := c.SetQueue(b.Ctx, "flow", pgrun.QueueSettings{SequenceOnFailure: s("continue"), FairBy: s("tenant"),
		KeyRateLimit: new(10), KeyRatePeriod: new(time.Minute), PriorityAging: new(30 * time.Second)})
	require.NoError(t, err)
	require.Equal(t, "continue", q.SequenceOnFailure)
	require.Equal(t, "tenant", *q.FairBy)
	require.Equal(t, 10, *q.KeyRateLimit)
	require.Equal(t, time.Minute, *q.KeyRatePeriod)
	require.Equal(t, 30*time.Second, *q.PriorityAging)

	q, err = c.SetQueue(b.Ctx, "flow", pgrun.QueueSettings{MaxRunning: new(3)})
	require.NoError(t, err)
	require.Equal(t, "tenant", *q.FairBy, "a setting left out keeps its value")
	require.Equal(t, 10, *q.KeyRateLimit)

	for _, bad := range []struct{ call, msg string }{
		{`select pgrun.set_queue('flow', fair_by => 'kind')`, "fair_by 'kind' of queue flow is not valid"},
		{`select pgrun.set_queue('flow', sequence_on_failure => 'skip')`, "sequence_on_failure 'skip' of queue flow is not valid"},
		{`select pgrun.set_queue('flow', key_rate_limit => 0)`, "key_rate_limit 0 of queue flow is out of bounds"},
		{`select pgrun.set_queue('flow', key_rate_limit => 1000001)`, "key_rate_limit 1000001 of queue flow is out of bounds"},
		{`select pgrun.set_queue('flow', key_rate_period => '0')`, "key_rate_period 00:00:00 is out of bounds"},
		{`select pgrun.set_queue('flow', key_rate_period => '400 days')`, "key_rate_period 400 days is out of bounds"},
		{`select pgrun.set_queue('flow', priority_aging => '500 milliseconds')`, "priority_aging 00:00:00.5 is out of bounds"},
		{`select pgrun.set_queue('flow', priority_aging => '400 days')`, "priority_aging 400 days is out of bounds"},
	} {
		_, err := b.Pool.Exec(b.Ctx, bad.call)
		pe := testkit.PgError(t, err, bad.call)
		require.Equal(t, "22023", pe.Code, bad.call)
		require.Equal(t, bad.msg, pe.Message)
		require.NotEmpty(t, pe.Hint)
	}
	q, err = c.SetQueue(b.Ctx, "flow", pgrun.QueueSettings{})
	require.NoError(t, err)
	require.Equal(t, "tenant", *q.FairBy, "a refused call changed nothing")

	q, err = c.SetQueue(b.Ctx, "flow", pgrun.QueueSettings{Reset: []string{"sequence_on_failure", "fair_by",
		"key_rate_limit", "key_rate_period", "priority_aging"}})
	require.NoError(t, err)
	require.Equal(t, "hold", q.SequenceOnFailure, "back to the default")
	require.Nil(t, q.FairBy)
	require.Nil(t, q.KeyRateLimit)
	require.Nil(t, q.KeyRatePeriod)
	require.Nil(t, q.PriorityAging)
	require.Equal(t, 3, *q.MaxRunning)
}

// queue_stats shows each queue's flow control and its use now: jobs held by their
// sequence, the fairness key, the per-key limits, the keys running or with an open
// rate window, and the keys at their limit.
func TestQueueStatsShowFlowControlInUse(t *testing.T) {
	b := testkit.Setup(t)
	c, err := pgrun.NewClient(b.Pool, pgrun.Config{})
	require.NoError(t, err)
	testkit.ExecAll(t, b,
		`select pgrun.set_queue('flow', fair_by => 'concurrency_key', concurrency_limit => 2, key_rate_limit => 3,
		   key_rate_period => '1 hour', priority_aging => '1 minute')`,
		`select pgrun.enqueue_job('noop', queue => 'flow', concurrency_key => 'a') from generate_series(1, 5)`,
		`select pgrun.enqueue_job('noop', queue => 'flow', concurrency_key => 'b') from generate_series(1, 5)`,
		`select pgrun.enqueue_job('noop', queue => 'seq', sequence_key => 's1') from generate_series(1, 4)`)
	require.Equal(t, 4, claimCount(t, b.Pool, "flow", "w", 100), "two of each key: the concurrency limit")
	stats, err := c.Queues(b.Ctx)
	require.NoError(t, err)
	byName := map[string]pgrun.QueueStats{}
	for _, s := range stats {
		byName[s.Queue] = s
	}
	f := byName["flow"]
	require.Equal(t, "concurrency_key", *f.FairBy)
	require.Equal(t, 2, *f.ConcurrencyLimit)
	require.Equal(t, int64(2), *f.KeysRunning)
	require.Equal(t, 3, *f.KeyRateLimit)
	require.Equal(t, time.Hour, *f.KeyRatePeriod)
	require.Equal(t, int64(2), *f.KeyWindows)
	require.Equal(t, int64(2), *f.KeysAtLimit, "both keys at their concurrency limit")
	require.Equal(t, time.Minute, *f.PriorityAging)
	require.Zero(t, f.Held)

	s := byName["seq"]
	require.Equal(t, int64(3), s.Held, "three jobs behind the sequence's head")
	require.Nil(t, s.FairBy)
	require.Nil(t, s.KeysRunning)
	require.Nil(t, s.KeysAtLimit)
}

// job_blocker names every reason a queued or pending job is not claimed now, and
// nothing when it is claimable; the Go client and `runner job why` read it.
func TestJobBlockerSaysWhyAJobIsNotClaimed(t *testing.T) {
	b := testkit.Setup(t)
	now := testkit.At("2030-01-01T10:00:00Z")
	clk := testkit.PinClock(t, b, now)
	c, err := pgrun.NewClient(clk.Pool(), pgrun.Config{})
	require.NoError(t, err)
	why := func(id int64) string {
		t.Helper()
		w, err := c.JobBlocker(b.Ctx, id)
		require.NoError(t, err)
		return w
	}
	enqueue := func(sql string) int64 {
		t.Helper()
		var id int64
		clk.QueryRow(sql, nil, &id)
		return id
	}

	job := enqueue(`select id from pgrun.enqueue_job('noop', queue => 'q')`)
	require.Equal(t, "no live worker serves queue q", why(job))
	clk.Exec(`select pgrun.worker_heartbeat('w1', 'h1', 1, array['q'], kinds => array['other'])`)
	require.Equal(t, "no live worker serving queue q handles kind noop", why(job))
	clk.Exec(`select pgrun.worker_heartbeat('w1', 'h1', 1, array['q'])`)
	require.Empty(t, why(job), "claimable")
	clk.Exec(`select pgrun.set_worker_control('h1', 'q', 'drain')`)
	require.Equal(t, "every live worker serving queue q is set to drain or off for it (worker control)", why(job))
	clk.Exec(`select pgrun.set_worker_control('h1', 'q', 'on')`)

	clk.Exec(`select pgrun.pause_queue('q')`)
	later := enqueue(`select id from pgrun.enqueue_job('noop', queue => 'q', run_at => '2030-01-01T11:00:00Z')`)
	require.Equal(t, "not due until 2030-01-01 11:00:00+00; queue q is paused (resume_queue)", why(later))
	clk.Exec(`select pgrun.resume_queue('q')`)

	clk.Exec(`select pgrun.set_queue('q', max_running => 1, rate_limit => 5, rate_period => '1 minute')`)
	require.Equal(t, 1, claimCount(t, clk.Conn, "q", "w1", 10))
	other := enqueue(`select id from pgrun.enqueue_job('noop', queue => 'q')`)
	require.Equal(t, "max_running reached (1/1)", why(other))
	clk.Exec(`select pgrun.set_queue('q', reset => array['max_running'], rate_limit => 1)`)
	require.Equal(t, "the queue's rate window is full (1/1) until 2030-01-01 10:01:00+00", why(other))

	clk.Exec(`select pgrun.set_queue('k', concurrency_limit => 1)`)
	clk.Exec(`select pgrun.worker_heartbeat('w1', 'h1', 1, array['q', 'k'])`)
	enqueue(`select id from pgrun.enqueue_job('noop', queue => 'k', concurrency_key => 'acct')`)
	second := enqueue(`select id from pgrun.enqueue_job('noop', queue => 'k', concurrency_key => 'acct')`)
	require.Equal(t, 1, claimCount(t, clk.Conn, "k", "w1", 10))
	require.Equal(t, "concurrency key acct is at its limit (1/1 running)", why(second))

	first := enqueue(`select id from pgrun.enqueue_job('noop', queue => 'k', sequence_key => 'seq')`)
	held := enqueue(`select id from pgrun.enqueue_job('noop', queue => 'k', sequence_key => 'seq')`)
	require.Contains(t, why(held), "held by its sequence: ")
	require.Contains(t, why(held), "behind job ")
	require.Empty(t, why(first), "the sequence's head is claimable")

	clk.Exec(`select pgrun.cancel_job($1)`, job)
	require.Empty(t, why(job), "a job no longer queued waits for nothing")
	_, err = c.JobBlocker(b.Ctx, 1<<40)
	require.ErrorIs(t, err, pgrun.ErrNotFound)
}
