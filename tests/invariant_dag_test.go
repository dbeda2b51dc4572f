package tests

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
)

const pipeline = `{"nodes": [
  {"name": "fetch", "kind": "fetch", "args": {"url": {"$from": "input.url"}}},
  {"name": "embed", "kind": "embed", "deps": ["fetch"], "map": {"$from": "fetch.output.docs"},
   "args": {"doc": {"$from": "item"}, "dim": {"$value": 384}}},
  {"name": "approve", "input": true, "deps": ["fetch"]},
  {"name": "report", "kind": "report", "deps": ["embed", "approve"],
   "args": {"vectors": {"$from": "embed.output"}, "by": {"$from": "approve.output.by"}},
   "skip_if": {"$eq": [{"$from": "approve.output.ok"}, false]}}
]}`

// A run creates every node at once; nodes become ready only when their deps are done;
// a map node fans out one child per element and its dependents receive the outputs
// in element order, whatever order the children finished in; an input submitted
// before its node is reached is kept and used.
func TestDAGRunReferencesMapFanInAndLateInput(t *testing.T) {
	b := setup(t)
	defineWorkflow(t, b, "pipeline", pipeline)
	run, err := pgrun.StartRun(b.ctx, b.pool, "pipeline", map[string]any{"url": "http://docs"}, "")
	require.NoError(t, err)
	require.Equal(t, map[string]pgrun.JobStatus{"fetch": "queued", "embed": "pending", "approve": "pending", "report": "pending"},
		nodeStates(t, b, run.ID))

	took, err := pgrun.SubmitInput(b.ctx, b.pool, run.ID, "approve", map[string]any{"ok": true, "by": "ann"})
	require.NoError(t, err)
	require.False(t, took, "not reached yet: kept for later")

	// fetch returns three docs.
	fetch := claimOneClaimed(t, b)
	report(t, b, fetch, outcome{result: map[string]any{"docs": []string{"a", "b", "c"}}})
	states := nodeStates(t, b, run.ID)
	require.Equal(t, pgrun.StatusWaiting, states["embed"])
	require.Equal(t, pgrun.StatusSucceeded, states["approve"], "the early input was used")

	// Finish the embed children in reverse order.
	var kids []claimed
	var raw []byte
	require.NoError(t, b.pool.QueryRow(b.ctx, `select jsonb_agg(jsonb_build_object('id', id, 'attempt', attempt, 'args', args) order by id desc)
		from pgrun.claim_jobs('default', 'w', 10)`).Scan(&raw))
	require.NoError(t, json.Unmarshal(raw, &kids))
	require.Len(t, kids, 3)
	for _, k := range kids {
		var a struct {
			Doc string `json:"doc"`
			Dim int    `json:"dim"`
		}
		require.NoError(t, json.Unmarshal(k.Args, &a))
		require.Equal(t, 384, a.Dim)
		report(t, b, k, outcome{result: "vec-" + a.Doc})
	}
	rep := claimOneClaimed(t, b)
	var args map[string]any
	require.NoError(t, b.pool.QueryRow(b.ctx, `select args from pgrun.jobs where id = $1`, rep.ID).Scan(&args))
	require.Equal(t, map[string]any{"vectors": []any{"vec-a", "vec-b", "vec-c"}, "by": "ann"}, args)
	report(t, b, rep, outcome{result: "report.pdf"})

	r, err := pgrun.GetRun(b.ctx, b.pool, run.ID)
	require.NoError(t, err)
	require.Equal(t, "succeeded", r.Status)
	require.JSONEq(t, `{"report": "report.pdf"}`, string(r.Output))
}

// skip_if skips a node; an input submitted while its node waits is taken at once.
func TestDAGSkipIfAndWaitingInput(t *testing.T) {
	b := setup(t)
	defineWorkflow(t, b, "pipeline", pipeline)
	run, err := pgrun.StartRun(b.ctx, b.pool, "pipeline", map[string]any{"url": "u"}, "")
	require.NoError(t, err)
	drive(t, b, func(c claimed) outcome { return outcome{result: map[string]any{"docs": []string{}}} })
	require.Equal(t, pgrun.StatusWaiting, nodeStates(t, b, run.ID)["approve"])
	took, err := pgrun.SubmitInput(b.ctx, b.pool, run.ID, "approve", map[string]any{"ok": false})
	require.NoError(t, err)
	require.True(t, took)
	_, err = pgrun.SubmitInput(b.ctx, b.pool, run.ID, "approve", map[string]any{"ok": true})
	require.Equal(t, "23505", sqlState(err), "one input per node")
	states := nodeStates(t, b, run.ID)
	require.Equal(t, pgrun.StatusSucceeded, states["embed"], "an empty map succeeds at once")
	require.Equal(t, pgrun.StatusSkipped, states["report"])
	r, err := pgrun.GetRun(b.ctx, b.pool, run.ID)
	require.NoError(t, err)
	require.Equal(t, "succeeded", r.Status)
}

// A required node that fails for good skips its dependents (upstream_failed) and fails
// the run, cancelling what is unfinished; an optional node's failure does neither.
func TestDAGFailureSkipsDependentsUnlessOptional(t *testing.T) {
	b := setup(t)
	defineWorkflow(t, b, "branches", `{"nodes": [
	  {"name": "a", "kind": "work"},
	  {"name": "opt", "kind": "flaky", "optional": true, "deps": ["a"]},
	  {"name": "after_opt", "kind": "work", "deps": ["opt"]},
	  {"name": "req", "kind": "doomed", "deps": ["a"]},
	  {"name": "after_req", "kind": "work", "deps": ["req"]},
	  {"name": "slow", "kind": "slow", "deps": ["a"]}
	]}`)
	run, err := pgrun.StartRun(b.ctx, b.pool, "branches", nil, "")
	require.NoError(t, err)
	a := claimOneClaimed(t, b)
	report(t, b, a, outcome{result: 1})
	var raw []byte
	require.NoError(t, b.pool.QueryRow(b.ctx, `select jsonb_agg(jsonb_build_object('id', id, 'attempt', attempt, 'kind', kind) order by kind)
		from pgrun.claim_jobs('default', 'w', 10)`).Scan(&raw))
	var ready []claimed
	require.NoError(t, json.Unmarshal(raw, &ready))
	require.Len(t, ready, 3)                                              // doomed, flaky, slow
	report(t, b, ready[1], outcome{fail: "flaky broke", permanent: true}) // flaky (optional)
	require.Equal(t, pgrun.StatusQueued, nodeStates(t, b, run.ID)["after_opt"], "an optional failure releases dependents")
	report(t, b, ready[0], outcome{fail: "doomed broke", permanent: true}) // doomed (required)

	states := nodeStates(t, b, run.ID)
	require.Equal(t, pgrun.StatusSkipped, states["after_req"])
	require.Equal(t, pgrun.StatusCancelled, states["slow"], "the run failed: unfinished nodes are cancelled")
	require.Equal(t, pgrun.StatusCancelled, states["after_opt"])
	var class string
	require.NoError(t, b.pool.QueryRow(b.ctx, `select error_class from pgrun.run_status where run_id = $1 and node = 'after_req'`, run.ID).Scan(&class))
	require.Equal(t, "upstream_failed", class)
	r, err := pgrun.GetRun(b.ctx, b.pool, run.ID)
	require.NoError(t, err)
	require.Equal(t, "failed", r.Status)
	require.Contains(t, string(r.Error), `"node": "req"`)
	// The late report of the cancelled slow node changes nothing.
	report(t, b, ready[2], outcome{result: "late"})
	require.Equal(t, pgrun.StatusCancelled, nodeStates(t, b, run.ID)["slow"])
}

// cancel_run cancels every unfinished node, map children included.
func TestCancelRunCancelsEverything(t *testing.T) {
	b := setup(t)
	defineWorkflow(t, b, "pipeline", pipeline)
	run, err := pgrun.StartRun(b.ctx, b.pool, "pipeline", map[string]any{"url": "u"}, "")
	require.NoError(t, err)
	report(t, b, claimOneClaimed(t, b), outcome{result: map[string]any{"docs": []int{1, 2, 3, 4}}})
	r, err := pgrun.CancelRun(b.ctx, b.pool, run.ID, "no longer needed")
	require.NoError(t, err)
	require.Equal(t, "cancelled", r.Status)
	var active int
	require.NoError(t, b.pool.QueryRow(b.ctx, `select count(*) from pgrun.jobs where status in ('pending', 'queued', 'running', 'waiting')`).Scan(&active))
	require.Zero(t, active)
	_, err = pgrun.CancelRun(b.ctx, b.pool, run.ID, "")
	require.ErrorIs(t, err, pgrun.ErrFinished)
	_, err = pgrun.CancelRun(b.ctx, b.pool, 999, "")
	require.ErrorIs(t, err, pgrun.ErrRunNotFound)
}

// Bad definitions are rejected with a message naming the node; the same spec twice
// is one version.
func TestDefineWorkflowChecksTheGraph(t *testing.T) {
	b := setup(t)
	for spec, want := range map[string]string{
		`{"nodes": []}`: `non-empty "nodes" array`,
		`{"nodes": [{"name": "a", "kind": "x"}, {"name": "a", "kind": "y"}]}`:                                       "node a is defined twice",
		`{"nodes": [{"name": "a", "kind": "x", "deps": ["ghost"]}]}`:                                                "node a depends on unknown node 'ghost'",
		`{"nodes": [{"name": "a", "kind": "x", "deps": ["b"]}, {"name": "b", "kind": "x", "deps": ["a"]}]}`:         "node a is on a dependency cycle",
		`{"nodes": [{"name": "a", "kind": "x", "args": {"v": {"$from": "b.output"}}}, {"name": "b", "kind": "x"}]}`: "node a refers to 'b.output'",
		`{"nodes": [{"name": "a", "kind": "x", "args": {"v": {"$from": "item"}}}]}`:                                 "node a refers to 'item' but is not a map node",
		`{"nodes": [{"name": "a", "kind": "x", "skip_if": {"$gt": [1, 2]}}]}`:                                       "skip_if of node a uses unknown operator '$gt'",
		`{"nodes": [{"name": "a", "kind": "x", "colour": "red"}]}`:                                                  "node a has unknown key 'colour'",
		`{"nodes": [{"name": "a"}]}`:                  "node a has no valid kind",
		`{"nodes": [{"name": "input", "kind": "x"}]}`: "node name 'input' is not valid",
	} {
		_, err := pgrun.DefineWorkflow(b.ctx, b.pool, "bad", json.RawMessage(spec))
		require.Equal(t, "22023", sqlState(err), spec)
		require.ErrorContains(t, err, want, spec)
	}
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, `select count(*) from pgrun.workflows`).Scan(&n))
	require.Zero(t, n)
	v1, err := pgrun.DefineWorkflow(b.ctx, b.pool, "pipeline", json.RawMessage(pipeline))
	require.NoError(t, err)
	v2, err := pgrun.DefineWorkflow(b.ctx, b.pool, "pipeline", json.RawMessage(pipeline))
	require.NoError(t, err)
	require.Equal(t, v1, v2)
	_, err = pgrun.StartRun(b.ctx, b.pool, "nope", nil, "")
	require.Equal(t, "P0002", sqlState(err))
}
