package tests

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testkit"
)

// A jobs table vacuumed while nearly empty keeps its pages, and pg_class then says a
// handful of rows over all of them; refilled before the next ANALYZE, it looks that
// small to the planner however many jobs it holds. A runner's session planned its
// claims from that (after five calls PostgreSQL may keep a generic plan for the
// session): a bitmap scan and a sort of the whole backlog for every claim, 560 ms a
// claim with 900,000 queued. maintain() analyzes the table once the planner's idea of
// its size is a tenth of its live rows or less, which also makes every session plan
// its claims again; then claims go by the claim index, and a second round, with the
// statistics right, analyzes nothing.
func TestMaintainAnalyzesATableRefilledAfterAVacuumWhileNearlyEmpty(t *testing.T) {
	b := testkit.Setup(t)
	vacuumNearlyEmpty(t, b)

	// The refill, on one connection, whose counts reach the table's statistics at its
	// next transaction's end (pg_stat_force_next_flush; a busy server flushes every
	// second anyway).
	refill, err := b.Pool.Acquire(b.Ctx)
	require.NoError(t, err)
	enqueueBatchOn(t, b.Ctx, refill, "refill", 30000)
	_, err = refill.Exec(b.Ctx, `select pg_stat_force_next_flush()`)
	require.NoError(t, err)
	_, err = refill.Exec(b.Ctx, `select 1`)
	require.NoError(t, err)
	refill.Release()

	// A runner's session claims before maintenance runs, past the five custom plans.
	conn, plans := explainSession(t, b)
	for range 7 {
		_, err := conn.Exec(b.Ctx, `select count(*) from pgrun.claim_jobs('refill', 'w1', 100)`)
		require.NoError(t, err)
	}
	t.Logf("claims planned from the stale statistics:\n%s", lastClaimScan(plans()))

	// An operator's maintain, as the runners run it: pgrun_admin, not the table's owner.
	admin := testkit.AsRole(t, b, "pgrun_admin")
	var refreshed int
	require.NoError(t, admin.QueryRow(b.Ctx, `select (pgrun.maintain() ->> 'stats_refreshed')::int`).Scan(&refreshed))
	require.Equal(t, 1, refreshed, "maintain analyzed pgrun.jobs")
	var tuples float64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select reltuples from pg_class where oid = 'pgrun.jobs'::regclass`).Scan(&tuples))
	require.Greater(t, tuples, 25000.0, "the statistics count the refill")

	before := len(plans())
	_, err = conn.Exec(b.Ctx, `select count(*) from pgrun.claim_jobs('refill', 'w1', 100)`)
	require.NoError(t, err)
	scan := lastClaimScan(plans()[before:])
	require.Contains(t, scan, "Index Scan using jobs_claim_idx", "the same session claims by the claim index")
	require.NotContains(t, scan, "Sort", "the claim sorts nothing")

	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select (pgrun.maintain() ->> 'stats_refreshed')::int`).Scan(&refreshed))
	require.Zero(t, refreshed, "with the statistics right, the next round analyzes nothing")
}

// lastClaimScan is the last plan in plans of claim_jobs' scan for the ids it locks.
func lastClaimScan(plans []string) string {
	for i := len(plans) - 1; i >= 0; i-- {
		if strings.Contains(plans[i], "for update skip locked") && strings.Contains(plans[i], "order by c.priority") {
			return plans[i]
		}
	}
	return ""
}
