package testkit

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
)

// Claimed is a job as a test worker sees it.
type Claimed struct {
	ID       int64           `json:"id"`
	Attempt  int             `json:"attempt"`
	Kind     string          `json:"kind"`
	Node     *string         `json:"node"`
	ParentID *int64          `json:"parent_id"`
	Args     json.RawMessage `json:"args"`
}

// Outcome is what a test worker reports for a job: a result, or an error (Fail),
// retryable unless Permanent.
type Outcome struct {
	Result    any
	Fail      string
	Permanent bool
}

// Drive plays a worker in SQL: it claims everything due in queue default and reports
// what decide says, until nothing is left to claim. It returns the claims in order.
func Drive(t testing.TB, db *DB, decide func(Claimed) Outcome) []Claimed {
	t.Helper()
	var all []Claimed
	for {
		var batch []Claimed
		var raw []byte
		require.NoError(t, db.Pool.QueryRow(db.Ctx, `select coalesce(jsonb_agg(jsonb_build_object(
			'id', id, 'attempt', attempt, 'kind', kind, 'node', node, 'parent_id', parent_id, 'args', args)), '[]')
			from pgrun.claim_jobs('default', 'driver', 1000)`).Scan(&raw))
		require.NoError(t, json.Unmarshal(raw, &batch))
		if len(batch) == 0 {
			return all
		}
		for _, c := range batch {
			Report(t, db, c, decide(c))
		}
		all = append(all, batch...)
	}
}

// Report sends one outcome for claimed job c.
func Report(t testing.TB, db *DB, c Claimed, o Outcome) {
	t.Helper()
	if o.Fail != "" {
		e, _ := json.Marshal(map[string]any{"message": o.Fail})
		_, err := db.Pool.Exec(db.Ctx, `select pgrun.fail_job($1, $2, $3::jsonb, $4)`, c.ID, c.Attempt, e, !o.Permanent)
		require.NoError(t, err)
		return
	}
	res, _ := json.Marshal(o.Result)
	_, err := db.Pool.Exec(db.Ctx, `select pgrun.complete_jobs(array[$1::bigint], array[$2::int], array[$3::jsonb])`, c.ID, c.Attempt, res)
	require.NoError(t, err)
}

// Succeed is the default decision: every job succeeds with its args as result.
func Succeed(c Claimed) Outcome { return Outcome{Result: c.Args} }

// DefineWorkflow defines spec under name, failing the test on error.
func DefineWorkflow(t testing.TB, db *DB, name, spec string) {
	t.Helper()
	_, err := pgrun.DefineWorkflow(db.Ctx, db.Pool, name, json.RawMessage(spec))
	require.NoError(t, err)
}

// NodeStates maps node name to status for a run.
func NodeStates(t testing.TB, db *DB, runID int64) map[string]pgrun.JobStatus {
	t.Helper()
	nodes, err := pgrun.RunNodes(db.Ctx, db.Pool, runID)
	require.NoError(t, err)
	m := map[string]pgrun.JobStatus{}
	for _, n := range nodes {
		m[n.Node] = n.Status
	}
	return m
}
