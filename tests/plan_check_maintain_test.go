package tests

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testkit"
)

// A maintenance round with nothing due reads none of the jobs it has nothing to do
// with: with 20,000 jobs running (a fleet's worth, none of their leases or timeouts
// due), 5,000 workflow nodes pending on their dependencies, 25,000 queued and
// 10,000 finished within their retention, every statement inside maintain() is
// planned and executed under auto_explain, and none may filter out a thousand rows or
// more. Two steps once did, every round, with nothing due: the lease reaper inlined
// its candidate list into its UPDATE, where the planner could not see it, and walked
// the whole running index; the timeout rule found waiting parents through the index
// of every parked job, pending nodes included (migration 0018 gave them their own).
// Milliseconds per thousand jobs, on the leader's every second. A plan check on what
// the statements read, not a timing.
func TestMaintainWithNothingDueScansNoBacklog(t *testing.T) {
	b := testkit.Setup(t)
	seedHot(t, b, 50000)
	testkit.DefineWorkflow(t, b, "two", `{"nodes": [{"name": "a", "kind": "x", "queue": "first"},
		{"name": "b", "kind": "x", "queue": "second", "deps": ["a"]}]}`)
	// Statistics from before the claims, as a table analyzed between bursts has them:
	// they show almost nothing running, which is when the planner took the running
	// index for a cheap place to look.
	testkit.ExecAll(t, b, `select count(pgrun.start_run('two')) from generate_series(1, 5000)`, `analyze pgrun.jobs`)
	var running int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.claim_jobs('hot', 'w1', 10000, '1 hour')`).Scan(&running))
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) + $1 from pgrun.claim_jobs('hot', 'w2', 10000, '1 hour')`, running).Scan(&running))
	require.Equal(t, 20000, running)

	conn, plans := analyzeSession(t, b)
	for range 7 { // past the five custom plans after which PostgreSQL may go generic
		var out string
		require.NoError(t, conn.QueryRow(b.Ctx, `select pgrun.maintain(leader => 'plan-check')::text`).Scan(&out))
		require.Contains(t, out, `"lease_requeued": 0`, "nothing was due")
	}
	requireNoWideFilter(t, plans(), 50, "a maintenance round with nothing due")
}
