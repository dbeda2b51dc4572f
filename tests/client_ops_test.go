package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// A bad value is refused by the engine before anything is written, and the client
// says so with the server's message and hint, matching ErrInvalidInput.
func TestClientInvalidInputKeepsTheServersWords(t *testing.T) {
	b := testkit.Setup(t)
	c := newClient(t, b, pgrun.Config{})
	_, err := c.Enqueue(b.Ctx, "resize", nil, pgrun.Queue("Bad Queue"))
	requireInvalidInput(t, err, "queue name 'Bad Queue' is not valid",
		"Use 1 to 63 characters from a-z, 0-9, _, - and . starting with a letter.")
	_, err = c.PauseQueue(b.Ctx, "Bad Queue")
	requireInvalidInput(t, err, "queue name 'Bad Queue' is not valid", "Use 1 to 63 characters")
	_, err = c.EnqueueMany(b.Ctx, []pgrun.JobSpec{{Kind: "ok"}, {Kind: "ok", Priority: -1}})
	requireInvalidInput(t, err, "priority -1", "")
	_, err = pgrun.NewClient(b.Pool, pgrun.Config{Queue: "Bad Queue"})
	require.NoError(t, err, "the default queue is checked by the engine, at the first enqueue")
	bad := newClient(t, b, pgrun.Config{Queue: "Bad Queue"})
	_, err = bad.Enqueue(b.Ctx, "resize", nil)
	requireInvalidInput(t, err, "queue name 'Bad Queue' is not valid", "Use 1 to 63 characters")
	require.Equal(t, 0, testkit.Counts(t, b.Pool)["jobs"], "nothing was written")
}

// PauseQueue stops claims and ResumeQueue lets them go on; Queues shows the counts
// and the pause; an unknown queue is not created.
func TestClientPauseResumeQueue(t *testing.T) {
	b := testkit.Setup(t)
	c := newClient(t, b, pgrun.Config{})
	for range 3 {
		_, err := c.Enqueue(b.Ctx, "task", nil, pgrun.Queue("images"))
		require.NoError(t, err)
	}
	_, err := c.Enqueue(b.Ctx, "task", nil, pgrun.Queue("images"), pgrun.RunAt(time.Now().Add(time.Hour)))
	require.NoError(t, err)

	q, err := c.PauseQueue(b.Ctx, "images")
	require.NoError(t, err)
	require.True(t, q.Paused)
	var paused bool
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select paused from pgrun.queues where name = 'images'`).Scan(&paused))
	require.True(t, paused)
	require.Empty(t, testkit.ClaimN(t, b.Pool, "images", "w", 10, "30 seconds"), "a paused queue hands out nothing")
	stats, err := c.Queues(b.Ctx)
	require.NoError(t, err)
	require.Len(t, stats, 1)
	require.Equal(t, "images", stats[0].Queue)
	require.True(t, stats[0].Paused)
	require.EqualValues(t, 3, stats[0].Queued)
	require.EqualValues(t, 1, stats[0].Scheduled)
	require.NotNil(t, stats[0].OldestQueuedAge)

	q, err = c.ResumeQueue(b.Ctx, "images")
	require.NoError(t, err)
	require.False(t, q.Paused)
	require.Len(t, testkit.ClaimN(t, b.Pool, "images", "w", 10, "30 seconds"), 3)

	_, err = c.PauseQueue(b.Ctx, "nosuch")
	require.ErrorIs(t, err, pgrun.ErrQueueNotFound)
	require.EqualError(t, err, `pgrun: queue "nosuch" not found`)
	_, err = c.ResumeQueue(b.Ctx, "nosuch")
	require.ErrorIs(t, err, pgrun.ErrQueueNotFound)
	policies, err := c.QueuePolicies(b.Ctx)
	require.NoError(t, err)
	require.Len(t, policies, 1, "pausing an unknown queue created nothing")
}

// SetQueue changes the settings it is given and keeps the others; Reset clears; a
// NoTimeout default is the engine's "none".
func TestClientSetQueue(t *testing.T) {
	b := testkit.Setup(t)
	c := newClient(t, b, pgrun.Config{})
	q, err := c.SetQueue(b.Ctx, "images", pgrun.QueueSettings{
		MaxRunning: new(4), RateLimit: new(10), RatePeriod: new(time.Minute), DefaultTimeout: new(pgrun.NoTimeout),
		DefaultMaxAttempts: new(5), Retention: new(48 * time.Hour), Archive: new(true),
	})
	require.NoError(t, err)
	require.Equal(t, "images", q.Name)
	require.Equal(t, 4, *q.MaxRunning)
	require.Equal(t, 10, *q.RateLimit)
	require.Equal(t, time.Minute, *q.RatePeriod)
	require.Equal(t, time.Duration(0), *q.DefaultTimeout)
	require.Equal(t, 5, *q.DefaultMaxAttempts)
	require.Equal(t, 48*time.Hour, *q.Retention)
	require.True(t, q.Archive)

	q, err = c.SetQueue(b.Ctx, "images", pgrun.QueueSettings{ConcurrencyLimit: new(2), Reset: []string{"max_running"}})
	require.NoError(t, err)
	require.Nil(t, q.MaxRunning, "reset")
	require.Equal(t, 2, *q.ConcurrencyLimit)
	require.Equal(t, 10, *q.RateLimit, "kept")
	j, err := c.Enqueue(b.Ctx, "task", nil, pgrun.Queue("images"))
	require.NoError(t, err)
	require.Nil(t, j.Timeout, "the queue's default: no timeout")
	require.Equal(t, 5, j.MaxAttempts)

	_, err = c.SetQueue(b.Ctx, "images", pgrun.QueueSettings{DefaultLease: new(time.Second)})
	requireInvalidInput(t, err, "default_lease", "Use 15 seconds or more")
	_, err = c.SetQueue(b.Ctx, "images", pgrun.QueueSettings{Reset: []string{"paused"}})
	requireInvalidInput(t, err, "setting 'paused' cannot be reset", "Reset one of")
}

// Schedules are set, listed, paused, resumed and dropped; an unknown one is
// ErrScheduleNotFound and a bad cron ErrInvalidInput.
func TestClientSchedules(t *testing.T) {
	b := testkit.Setup(t)
	c := newClient(t, b, pgrun.Config{Queue: "reports"})
	s, err := c.SetSchedule(b.Ctx, pgrun.ScheduleSpec{Name: "nightly", Cron: "0 2 * * *", Kind: "report",
		Args: map[string]any{"kind": "daily"}, Timezone: "Europe/Berlin"})
	require.NoError(t, err)
	require.Equal(t, "reports", s.Queue, "the client's default queue")
	require.Equal(t, "Europe/Berlin", s.Timezone)
	require.True(t, s.Enabled)
	require.NotNil(t, s.NextFireAt)
	require.JSONEq(t, `{"kind": "daily"}`, string(s.Args))
	_, err = c.SetSchedule(b.Ctx, pgrun.ScheduleSpec{Name: "tick", Cron: "@every 30s", Kind: "noop", Queue: "default", Disabled: true})
	require.NoError(t, err)

	all, err := c.Schedules(b.Ctx)
	require.NoError(t, err)
	require.Len(t, all, 2)
	require.Equal(t, "nightly", all[0].Name)
	require.Equal(t, "UTC", all[1].Timezone)
	require.False(t, all[1].Enabled)

	s, err = c.PauseSchedule(b.Ctx, "nightly")
	require.NoError(t, err)
	require.False(t, s.Enabled)
	s, err = c.ResumeSchedule(b.Ctx, "nightly")
	require.NoError(t, err)
	require.True(t, s.Enabled)
	require.NoError(t, c.DropSchedule(b.Ctx, "nightly"))
	all, err = c.Schedules(b.Ctx)
	require.NoError(t, err)
	require.Len(t, all, 1)

	err = c.DropSchedule(b.Ctx, "nightly")
	require.ErrorIs(t, err, pgrun.ErrScheduleNotFound)
	require.EqualError(t, err, `pgrun: schedule "nightly" not found`)
	_, err = c.PauseSchedule(b.Ctx, "nightly")
	require.ErrorIs(t, err, pgrun.ErrScheduleNotFound)
	_, err = c.ResumeSchedule(b.Ctx, "nightly")
	require.ErrorIs(t, err, pgrun.ErrScheduleNotFound)
	_, err = c.SetSchedule(b.Ctx, pgrun.ScheduleSpec{Name: "bad", Cron: "61 * * * *", Kind: "noop"})
	requireInvalidInput(t, err, "cron minute field '61' is out of range", "")
}

// Worker control is set per host and queue and listed; the workers that heartbeat
// are listed with whether they are alive.
func TestClientWorkerControlAndWorkers(t *testing.T) {
	b := testkit.Setup(t)
	c := newClient(t, b, pgrun.Config{})
	require.NoError(t, c.SetWorkerControl(b.Ctx, "h1", "images", pgrun.WorkerDrain))
	require.NoError(t, c.SetWorkerControl(b.Ctx, "h1", "*", pgrun.WorkerOff))
	require.NoError(t, c.SetWorkerControl(b.Ctx, "h1", "images", pgrun.WorkerOn))
	controls, err := c.WorkerControls(b.Ctx)
	require.NoError(t, err)
	require.Len(t, controls, 2)
	require.Equal(t, "*", controls[0].Queue)
	require.Equal(t, pgrun.WorkerOff, controls[0].Mode)
	require.Equal(t, pgrun.WorkerOn, controls[1].Mode)
	err = c.SetWorkerControl(b.Ctx, "h1", "images", "sideways")
	requireInvalidInput(t, err, "worker control mode 'sideways' is not valid", "Use on, drain or off.")

	_, err = b.Pool.Exec(b.Ctx, `select pgrun.worker_heartbeat('w1', 'h1', 42, '{images}', kinds => '{resize}')`)
	require.NoError(t, err)
	workers, err := c.Workers(b.Ctx)
	require.NoError(t, err)
	require.Len(t, workers, 1)
	w := workers[0]
	require.Equal(t, "w1", w.ID)
	require.Equal(t, 42, w.PID)
	require.Equal(t, []string{"images"}, w.Queues)
	require.Equal(t, []string{"resize"}, w.Kinds)
	require.True(t, w.Alive)
	require.EqualValues(t, 0, w.Running)
}

// Maintain runs a round and reports it: here a lease that ran out is put back.
func TestClientMaintain(t *testing.T) {
	b := testkit.Setup(t)
	c := newClient(t, b, pgrun.Config{})
	j, err := c.Enqueue(b.Ctx, "task", nil)
	require.NoError(t, err)
	claimed := testkit.ClaimN(t, b.Pool, "default", "w", 1, "30 seconds")
	require.Len(t, claimed, 1)

	// A client whose sessions read the clock two minutes on (the test clock seam).
	later := testkit.PinClock(t, b, time.Now().Add(2*time.Minute)).Pool()
	lc, err := pgrun.NewClient(later, pgrun.Config{})
	require.NoError(t, err)

	r, err := lc.Maintain(b.Ctx)
	require.NoError(t, err)
	require.Equal(t, 1, r.LeaseRequeued, "report %s", r.Raw)
	require.False(t, r.Skipped)
	require.Empty(t, r.Errors)
	require.Contains(t, string(r.Raw), `"lease_requeued": 1`)
	got, err := c.GetJob(b.Ctx, j.ID)
	require.NoError(t, err)
	require.Equal(t, pgrun.StatusQueued, got.Status)
	require.Equal(t, 1, got.LeaseExpiries)

	r, err = c.Maintain(b.Ctx)
	require.NoError(t, err)
	require.Equal(t, 0, r.LeaseRequeued)
}
