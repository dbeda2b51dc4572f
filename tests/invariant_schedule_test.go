package tests

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testkit"
)

// cron_next is checked against explicit instants.
func TestCronNextAtExplicitInstants(t *testing.T) {
	b := testkit.Setup(t)
	for _, c := range []struct {
		expr, tz, after, want string
	}{
		{"*/15 * * * *", "UTC", "2030-01-01T10:07:00Z", "2030-01-01T10:15:00Z"},
		{"*/15 * * * *", "UTC", "2030-01-01T10:15:00Z", "2030-01-01T10:30:00Z"},
		{"5/20 * * * *", "UTC", "2030-01-01T10:26:00Z", "2030-01-01T10:45:00Z"},
		{"0 9-17 * * mon-fri", "UTC", "2030-01-04T17:30:00Z", "2030-01-07T09:00:00Z"}, // Friday evening -> Monday
		{"0 12 * * 7", "UTC", "2030-01-01T00:00:00Z", "2030-01-06T12:00:00Z"},         // 7 is Sunday
		{"0 0 1 jan,jul *", "UTC", "2030-02-10T00:00:00Z", "2030-07-01T00:00:00Z"},
		{"0 0 13 * fri", "UTC", "2030-01-01T00:00:00Z", "2030-01-04T00:00:00Z"}, // day 13 OR Friday
		{"30 2 * * *", "Europe/Berlin", "2030-06-01T12:00:00Z", "2030-06-02T00:30:00Z"},
		{"0 0 29 feb *", "UTC", "2030-03-01T00:00:00Z", "2032-02-29T00:00:00Z"},
		{"@hourly", "UTC", "2030-01-01T10:07:00Z", "2030-01-01T11:00:00Z"},
		{"@daily", "UTC", "2030-01-01T10:07:00Z", "2030-01-02T00:00:00Z"},
		{"@weekly", "UTC", "2030-01-01T10:07:00Z", "2030-01-06T00:00:00Z"},
		{"@monthly", "UTC", "2030-01-31T10:07:00Z", "2030-02-01T00:00:00Z"},
		{"@yearly", "UTC", "2030-01-31T10:07:00Z", "2031-01-01T00:00:00Z"},
		{"@every 30s", "UTC", "2030-01-01T10:07:10Z", "2030-01-01T10:07:30Z"},
		{"@every 5 minutes", "UTC", "2030-01-01T10:07:10Z", "2030-01-01T10:10:00Z"},
	} {
		var got time.Time
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select pgrun.cron_next($1, $2, $3)`, c.expr, testkit.At(c.after), c.tz).Scan(&got), c.expr)
		require.Equal(t, testkit.At(c.want), got.UTC(), "%s after %s in %s", c.expr, c.after, c.tz)
	}
	for expr, want := range map[string]string{
		"61 * * * *":   "cron minute field '61' is out of range",
		"* * *":        "does not have five fields",
		"0 0 30 feb *": "never fires",
		"@every soon":  "has a bad interval",
		"0 0 * * fun":  "unknown value 'fun'",
		"*/0 * * * *":  "has a bad step",
	} {
		_, err := b.Pool.Exec(b.Ctx, `select pgrun.cron_next($1, now())`, expr)
		require.Equal(t, "22023", testkit.SQLState(err), expr)
		require.ErrorContains(t, err, want, expr)
	}
}

// A due slot fires exactly once however many callers run maintain() at once; after
// downtime the missed slots fire once, not as a storm.
func TestScheduleFiresEachSlotOnce(t *testing.T) {
	b := testkit.Setup(t)
	now := testkit.At("2030-01-01T10:00:30Z")
	c := testkit.PinClock(t, b, now)
	c.Exec(`select pgrun.set_schedule('tick', '@every 1 minute', 'noop', '{"from": "schedule"}', queue => 'cron')`)
	var next time.Time
	c.QueryRow(`select next_fire_at from pgrun.schedules where name = 'tick'`, nil, &next)
	require.Equal(t, testkit.At("2030-01-01T10:01:00Z"), next.UTC())

	// Eight concurrent maintainers at 10:01:05.
	c.Set(testkit.At("2030-01-01T10:01:05Z"))
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := b.Pool.Acquire(b.Ctx)
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Release()
			tx, err := conn.Begin(b.Ctx)
			if err != nil {
				t.Error(err)
				return
			}
			defer tx.Rollback(b.Ctx)
			if err := c.PinTx(b.Ctx, tx); err != nil {
				t.Error(err)
				return
			}
			if _, err := tx.Exec(b.Ctx, `select pgrun.maintain()`); err != nil {
				t.Error(err)
				return
			}
			if err := tx.Commit(b.Ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	var jobs int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs where queue = 'cron'`).Scan(&jobs))
	require.Equal(t, 1, jobs)

	// Down for an hour: one job for the missed slots, next slot in the future.
	c.Set(testkit.At("2030-01-01T11:01:30Z"))
	c.Exec(`select pgrun.maintain()`)
	c.Exec(`select pgrun.maintain()`)
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs where queue = 'cron'`).Scan(&jobs))
	require.Equal(t, 2, jobs)
	var last time.Time
	c.QueryRow(`select next_fire_at, last_fire_at from pgrun.schedules where name = 'tick'`, nil, &next, &last)
	require.Equal(t, testkit.At("2030-01-01T11:02:00Z"), next.UTC())
	require.Equal(t, testkit.At("2030-01-01T10:02:00Z"), last.UTC())

	// Disabled schedules do not fire; drop removes.
	c.Exec(`select pgrun.set_schedule('tick', '@every 1 minute', 'noop', queue => 'cron', enabled => false)`)
	c.Set(testkit.At("2030-01-01T12:00:00Z"))
	c.Exec(`select pgrun.maintain()`)
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs where queue = 'cron'`).Scan(&jobs))
	require.Equal(t, 2, jobs)
	c.Exec(`select pgrun.drop_schedule('tick')`)
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.drop_schedule('tick')`)
	require.Equal(t, "P0002", testkit.SQLState(err))
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.set_schedule('x', '@daily', 'noop', timezone => 'Mars/Olympus')`)
	require.ErrorContains(t, err, "time zone 'Mars/Olympus' is not known")
}

// Pausing a schedule keeps every setting and stops it firing; resuming fires from the
// next slot after the clock, so the slots missed while paused do not fire at all.
func TestPausedScheduleKeepsSettingsAndDoesNotFire(t *testing.T) {
	b := testkit.Setup(t)
	c := testkit.PinClock(t, b, testkit.At("2030-01-01T10:00:30Z"))
	c.Exec(`select pgrun.set_schedule('report', '*/5 * * * *', 'report', '{"kind": "daily"}',
		queue => 'reports', timezone => 'Europe/Berlin')`)
	const settings = `select cron, kind, args::text, queue, timezone from pgrun.schedules where name = 'report'`
	var cron, kind, args, queue, tz string
	c.QueryRow(settings, nil, &cron, &kind, &args, &queue, &tz)
	before := []string{cron, kind, args, queue, tz}
	require.Equal(t, []string{"*/5 * * * *", "report", `{"kind": "daily"}`, "reports", "Europe/Berlin"}, before)

	var enabled bool
	c.QueryRow(`select enabled from pgrun.pause_schedule('report')`, nil, &enabled)
	require.False(t, enabled)
	c.QueryRow(`select enabled from pgrun.pause_schedule('report')`, nil, &enabled) // twice is harmless
	require.False(t, enabled)

	// Two hours pass with maintain() running: nothing fires.
	for _, now := range []string{"2030-01-01T10:05:10Z", "2030-01-01T11:00:00Z", "2030-01-01T12:02:00Z"} {
		c.Set(testkit.At(now))
		c.Exec(`select pgrun.maintain()`)
	}
	jobs := func() int {
		var n int
		c.QueryRow(`select count(*) from pgrun.jobs where queue = 'reports'`, nil, &n)
		return n
	}
	require.Zero(t, jobs())

	// Resumed at 12:02: the next slot is 12:05, the missed ones are skipped.
	var next time.Time
	c.QueryRow(`select enabled, next_fire_at from pgrun.resume_schedule('report')`, nil, &enabled, &next)
	require.True(t, enabled)
	require.Equal(t, testkit.At("2030-01-01T12:05:00Z"), next.UTC())
	c.QueryRow(settings, nil, &cron, &kind, &args, &queue, &tz)
	require.Equal(t, before, []string{cron, kind, args, queue, tz})
	c.Exec(`select pgrun.maintain()`)
	require.Zero(t, jobs(), "a resumed schedule must not fire its missed slots")

	// Resuming a running schedule changes nothing; at 12:05 it fires with its args.
	c.QueryRow(`select next_fire_at from pgrun.resume_schedule('report')`, nil, &next)
	require.Equal(t, testkit.At("2030-01-01T12:05:00Z"), next.UTC())
	c.Set(testkit.At("2030-01-01T12:05:20Z"))
	c.Exec(`select pgrun.maintain()`)
	require.Equal(t, 1, jobs())
	var jobKind, jobArgs string
	c.QueryRow(`select kind, args::text from pgrun.jobs where queue = 'reports'`, nil, &jobKind, &jobArgs)
	require.Equal(t, "report", jobKind)
	require.Equal(t, `{"kind": "daily"}`, jobArgs)

	for _, fn := range []string{"pause_schedule", "resume_schedule"} {
		_, err := b.Pool.Exec(b.Ctx, `select pgrun.`+fn+`('reprot')`)
		require.Equal(t, "P0002", testkit.SQLState(err), fn)
		require.ErrorContains(t, err, "schedule 'reprot' does not exist", fn)
		require.Contains(t, pgHint(err), "pgrun.schedules", fn)
	}
	var n int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.schedules`).Scan(&n))
	require.Equal(t, 1, n)
}
