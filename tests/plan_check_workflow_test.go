package tests

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testkit"
)

// The dispatch of finished workflow jobs keeps its index plans on a table of
// realistic size, as the plain hot paths do (TestHotPathsUseIndexes): every statement
// run inside complete_jobs for a batch of children (fan-in, then the parent's success)
// and for a DAG node (releasing its dependent) is planned by auto_explain, and none
// may read pgrun.jobs sequentially. The session's plans are made on a one-row batch
// first, as a runner's are, so that a plan cached for one row is what serves the
// batch of 500.
func TestWorkflowDispatchUsesIndexes(t *testing.T) {
	b := testkit.Setup(t)
	seedHot(t, b, 100000)
	parent := fanInParent(t, b, 1001, 1.0)
	testkit.DefineWorkflow(t, b, "two", `{"nodes": [{"name": "a", "kind": "x", "queue": "first"},
		{"name": "b", "kind": "x", "queue": "second", "deps": ["a"], "args": {"v": {"$from": "a.output"}}}]}`)
	_, err := b.Pool.Exec(b.Ctx, `select count(pgrun.start_run('two')) from generate_series(1, 50)`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.Ctx, `analyze pgrun.jobs`)
	require.NoError(t, err)

	conn, plans := explainSession(t, b)
	kids := testkit.ClaimN(t, conn, "kids", "w", 1001, "1 hour")
	require.Len(t, kids, 1001)
	for _, batch := range [][]testkit.Claim{kids[:1], kids[1:501], kids[501:]} {
		require.NoError(t, completeBatchOn(b.Ctx, conn, batch))
	}
	require.Equal(t, "succeeded", string(testkit.JobStatus(t, b, parent)))
	nodes := testkit.ClaimN(t, conn, "first", "w", 50, "1 hour")
	require.Len(t, nodes, 50)
	for _, batch := range [][]testkit.Claim{nodes[:1], nodes[1:]} {
		require.NoError(t, completeBatchOn(b.Ctx, conn, batch))
	}
	var queued int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs where queue = 'second' and status = 'queued'`).Scan(&queued))
	require.Equal(t, 50, queued, "every dependent released")

	requireNoSeqScan(t, plans(), 20, "the dispatch")
}

// completeBatchOn records claims as succeeded with one complete_jobs call on conn.
func completeBatchOn(ctx context.Context, conn *pgx.Conn, batch []testkit.Claim) error {
	ids := make([]int64, len(batch))
	attempts := make([]int32, len(batch))
	for i, c := range batch {
		ids[i], attempts[i] = c.ID, c.Attempt
	}
	_, err := conn.Exec(ctx, `select pgrun.complete_jobs($1, $2, null, 'w')`, ids, attempts)
	return err
}
