package tests

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
)

// claimed is a job as a test worker sees it.
type claimed struct {
	ID       int64           `json:"id"`
	Attempt  int             `json:"attempt"`
	Kind     string          `json:"kind"`
	Node     *string         `json:"node"`
	ParentID *int64          `json:"parent_id"`
	Args     json.RawMessage `json:"args"`
}

// outcome is what a test worker reports for a job: a result, or an error.
type outcome struct {
	result    any
	fail      string
	permanent bool
}

// drive plays a worker in SQL: it claims everything due in queue default and reports
// what decide says, until nothing is left to claim. It returns the claims in order.
func drive(t *testing.T, b *bundle, decide func(claimed) outcome) []claimed {
	t.Helper()
	var all []claimed
	for {
		var batch []claimed
		var raw []byte
		require.NoError(t, b.pool.QueryRow(b.ctx, `select coalesce(jsonb_agg(jsonb_build_object(
			'id', id, 'attempt', attempt, 'kind', kind, 'node', node, 'parent_id', parent_id, 'args', args)), '[]')
			from pgrun.claim_jobs('default', 'driver', 1000)`).Scan(&raw))
		require.NoError(t, json.Unmarshal(raw, &batch))
		if len(batch) == 0 {
			return all
		}
		for _, c := range batch {
			report(t, b, c, decide(c))
		}
		all = append(all, batch...)
	}
}

// report sends one outcome for claimed job c.
func report(t *testing.T, b *bundle, c claimed, o outcome) {
	t.Helper()
	if o.fail != "" {
		e, _ := json.Marshal(map[string]any{"message": o.fail})
		_, err := b.pool.Exec(b.ctx, `select pgrun.fail_job($1, $2, $3::jsonb, $4)`, c.ID, c.Attempt, e, !o.permanent)
		require.NoError(t, err)
		return
	}
	res, _ := json.Marshal(o.result)
	_, err := b.pool.Exec(b.ctx, `select pgrun.complete_jobs(array[$1::bigint], array[$2::int], array[$3::jsonb])`, c.ID, c.Attempt, res)
	require.NoError(t, err)
}

// succeed is the default decision: every job succeeds with its args as result.
func succeed(c claimed) outcome { return outcome{result: c.Args} }

// defineWorkflow defines spec under name, failing the test on error.
func defineWorkflow(t *testing.T, b *bundle, name, spec string) {
	t.Helper()
	_, err := pgrun.DefineWorkflow(b.ctx, b.pool, name, json.RawMessage(spec))
	require.NoError(t, err)
}

// nodeStates maps node name to status for a run.
func nodeStates(t *testing.T, b *bundle, runID int64) map[string]pgrun.JobStatus {
	t.Helper()
	nodes, err := pgrun.RunNodes(b.ctx, b.pool, runID)
	require.NoError(t, err)
	m := map[string]pgrun.JobStatus{}
	for _, n := range nodes {
		m[n.Node] = n.Status
	}
	return m
}
