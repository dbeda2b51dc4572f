package tests

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testkit"
)

// maintainRound is what one maintain() round reports about its steps.
type maintainRound struct {
	Pruned int                             `json:"pruned"`
	Steps  map[string]struct{ MS float64 } `json:"steps"`
	NotDue []string                        `json:"not_due"`
}

// roundAt runs maintain(args) on c with the clock at at.
func roundAt(t *testing.T, c *testkit.Clock, at time.Time, args string) maintainRound {
	t.Helper()
	c.Set(at)
	var r maintainRound
	c.QueryRow(`select pgrun.maintain(`+args+`)`, nil, &r)
	return r
}

// Each step runs at its own cadence: prune_history (once a minute by default) runs
// once within its minute and again after it, while the lease reaper runs every
// round; set_maintenance_step changes the cadence; a clock moved back makes the step
// due; and the step called alone ignores its cadence.
func TestMaintainStepCadence(t *testing.T) {
	b := testkit.Setup(t)
	t0 := testkit.At("2030-01-01T00:00:00Z")
	c := testkit.PinClock(t, b, t0)
	c.Exec(`select pgrun.enqueue_jobs((select jsonb_agg(jsonb_build_object('kind', 'noop')) from generate_series(1, 6)))`)
	c.Exec(`select pgrun.complete_jobs(array_agg(id), array_agg(attempt)) from pgrun.claim_jobs('default', 'w', 10)`)
	left := func() (n int) {
		c.QueryRow(`select count(*) from pgrun.jobs`, nil, &n)
		return n
	}

	due := t0.Add(8 * 24 * time.Hour) // past the default retention
	r := roundAt(t, c, due, `batch => 1`)
	require.Equal(t, 1, r.Pruned)
	require.Contains(t, r.Steps, "prune_history")
	require.Contains(t, r.Steps, "reap_expired_leases")
	require.Empty(t, r.NotDue, "the first round runs every step")
	for step, s := range r.Steps {
		require.GreaterOrEqual(t, s.MS, 0.0, step)
	}

	r = roundAt(t, c, due.Add(30*time.Second), `batch => 1`)
	require.Zero(t, r.Pruned, "prune_history ran twice within its minute")
	require.NotContains(t, r.Steps, "prune_history")
	require.ElementsMatch(t, []string{"forget_workers", "prune_history"}, r.NotDue)
	require.Contains(t, r.Steps, "reap_expired_leases", "the lease reaper runs every round")
	require.Equal(t, 5, left())

	r = roundAt(t, c, due.Add(61*time.Second), `batch => 1`)
	require.Equal(t, 1, r.Pruned, "prune_history runs again after its minute")
	require.Empty(t, r.NotDue)

	// Every round.
	c.Exec(`select pgrun.set_maintenance_step('prune_history', '0')`)
	r = roundAt(t, c, due.Add(62*time.Second), `batch => 1`)
	require.Equal(t, 1, r.Pruned)
	require.Equal(t, []string{"forget_workers"}, r.NotDue)
	// Once an hour, counted from its last run (the one just now).
	var every time.Duration
	c.QueryRow(`select (pgrun.set_maintenance_step('prune_history', '1 hour')).every`, nil, &every)
	require.Equal(t, time.Hour, every)
	r = roundAt(t, c, due.Add(62*time.Second+30*time.Minute), `batch => 1`)
	require.Zero(t, r.Pruned)
	require.Contains(t, r.NotDue, "prune_history")
	r = roundAt(t, c, due.Add(62*time.Second+time.Hour), `batch => 1`)
	require.Equal(t, 1, r.Pruned)

	// A clock moved back before the last run does not hold the step off.
	r = roundAt(t, c, due.Add(time.Minute), `batch => 1`)
	require.Equal(t, 1, r.Pruned, "a step whose last run is in the future is due")

	// Called alone, the step ignores its cadence.
	require.Equal(t, 1, left())
	var pruned int
	c.QueryRow(`select pgrun.prune_history()`, nil, &pruned)
	require.Equal(t, 1, pruned)
	require.Zero(t, left())
}

// A round never waits for a step that another round is running: its row is locked
// (here by a transaction that holds it), so the step sits this round out, reported as
// not due, and the other steps run.
func TestMaintainSkipsAStepAnotherRoundHolds(t *testing.T) {
	b := testkit.Setup(t)
	holder, err := b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	defer holder.Rollback(context.Background()) //nolint:errcheck
	_, err = holder.Exec(b.Ctx, `select 1 from pgrun.maintenance_steps where step = 'prune_history' for update`)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(b.Ctx, 5*time.Second)
	defer cancel()
	var r maintainRound
	require.NoError(t, b.Pool.QueryRow(ctx, `select pgrun.maintain()`).Scan(&r))
	require.Equal(t, []string{"prune_history"}, r.NotDue)
	require.Contains(t, r.Steps, "forget_workers")
	require.Contains(t, r.Steps, "reap_expired_leases")
}

// set_maintenance_step refuses an unknown step and a cadence out of bounds with
// 22023, a message naming the value and a hint, and changes nothing.
func TestMaintainStepBadInput(t *testing.T) {
	b := testkit.Setup(t)
	var before string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select jsonb_agg(s order by step)::text from pgrun.maintenance_steps s`).Scan(&before))
	for _, tc := range []struct{ sql, names string }{
		{`select pgrun.set_maintenance_step('reaper', '1 minute')`, "'reaper'"},
		{`select pgrun.set_maintenance_step(null, '1 minute')`, "NULL"},
		{`select pgrun.set_maintenance_step('prune_history', '-1 second')`, "-00:00:01"},
		{`select pgrun.set_maintenance_step('prune_history', '2 days')`, "2 days"},
		{`select pgrun.set_maintenance_step('prune_history', null)`, "NULL"},
	} {
		_, err := b.Pool.Exec(b.Ctx, tc.sql)
		pe := testkit.PgError(t, err, tc.sql)
		require.Equal(t, "22023", pe.Code, tc.sql)
		require.Contains(t, pe.Message, tc.names, tc.sql)
		require.NotEmpty(t, pe.Hint, tc.sql)
	}
	var after string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select jsonb_agg(s order by step)::text from pgrun.maintenance_steps s`).Scan(&after))
	require.Equal(t, before, after)
}
