package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testkit"
)

// Priority aging (priority_aging, sql/functions/38_claim_keys.sql): a due job's
// effective priority is its priority less one level per priority_aging it has been
// due (lower is more urgent), so a steady stream of urgent work never starves the rest.

// A priority-10 job waits beside a steady stream of priority-0 jobs (one enqueued and
// one claimed every second, by the engine's clock). Without aging it is never claimed;
// with aging of 10 seconds it is claimed once its effective priority passes the
// stream's: after 110 seconds (at 100 it ties, and the tie goes to the lower
// priority). So alone, with fairness on (aging orders a key's jobs) and with per-key
// limits (the claim's order among keys with room).
func TestAgingClaimsALowPriorityJobOnceAged(t *testing.T) {
	for _, tc := range []struct{ name, settings string }{
		{"aging", "priority_aging => '10 seconds'"},
		{"aging and fairness", "priority_aging => '10 seconds', fair_by => 'concurrency_key'"},
		{"aging and a per-key limit", "priority_aging => '10 seconds', concurrency_limit => 1000"},
		{"no aging", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := testkit.Setup(t)
			t0 := testkit.At("2030-01-01T10:00:00Z")
			c := testkit.PinClock(t, b, t0)
			settings := "'q'"
			if tc.settings != "" {
				settings += ", " + tc.settings
			}
			c.Exec(`select pgrun.set_queue(` + settings + `)`)
			var low int64
			c.QueryRow(`select id from pgrun.enqueue_job('noop', queue => 'q', priority => 10, concurrency_key => 'k')`, nil, &low)
			claimedAt := -1
			for step := 0; step <= 150 && claimedAt < 0; step++ {
				c.Set(t0.Add(time.Duration(step) * time.Second))
				c.Exec(`select pgrun.enqueue_job('noop', queue => 'q', priority => 0, concurrency_key => 'k')`)
				var id int64
				c.QueryRow(`select id from pgrun.claim_jobs('q', 'w', 1)`, nil, &id)
				if id == low {
					claimedAt = step
				}
			}
			if tc.settings == "" {
				require.Equal(t, -1, claimedAt, "without aging the stream starves the low-priority job")
				return
			}
			require.Equal(t, 110, claimedAt, "claimed once its effective priority (10 - 11) passes the stream's (0)")
		})
	}
}

// Within one priority level aging changes nothing (the oldest first), and across
// levels the claim merges them by effective priority: with aging of a minute, a
// priority-3 job due for 5 minutes (effective -2) goes before a priority-0 job due
// for one (effective -1), which goes before a fresh priority-1 job (1).
func TestAgingOrdersByEffectivePriority(t *testing.T) {
	b := testkit.Setup(t)
	t0 := testkit.At("2030-01-01T10:00:00Z")
	c := testkit.PinClock(t, b, t0)
	c.Exec(`select pgrun.set_queue('q', priority_aging => '1 minute')`)
	c.Exec(`select pgrun.enqueue_job('noop', '{"n": "fresh1"}', queue => 'q', priority => 1, run_at => '2030-01-01T10:00:00Z')`)
	c.Exec(`select pgrun.enqueue_job('noop', '{"n": "old0"}', queue => 'q', priority => 0, run_at => '2030-01-01T09:59:00Z')`)
	c.Exec(`select pgrun.enqueue_job('noop', '{"n": "older0"}', queue => 'q', priority => 0, run_at => '2030-01-01T09:58:30Z')`)
	c.Exec(`select pgrun.enqueue_job('noop', '{"n": "oldest3"}', queue => 'q', priority => 3, run_at => '2030-01-01T09:55:00Z')`)
	c.Exec(`select pgrun.enqueue_job('noop', '{"n": "later"}', queue => 'q', priority => 0, run_at => '2030-01-01T10:05:00Z')`)
	var order []string
	for range 5 {
		var n *string
		c.QueryRow(`select (select args->>'n' from pgrun.claim_jobs('q', 'w', 1))`, nil, &n)
		if n != nil {
			order = append(order, *n)
		}
	}
	require.Equal(t, []string{"oldest3", "older0", "old0", "fresh1"}, order, "the job not yet due is not claimed")
}
