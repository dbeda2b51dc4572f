package tests

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
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
	b := testkit.Setup(t)
	testkit.DefineWorkflow(t, b, "pipeline", pipeline)
	run, err := pgrun.StartRun(b.Ctx, b.Pool, "pipeline", map[string]any{"url": "http://docs"}, "")
	require.NoError(t, err)
	require.Equal(t, map[string]pgrun.JobStatus{"fetch": "queued", "embed": "pending", "approve": "pending", "report": "pending"},
		testkit.NodeStates(t, b, run.ID))

	took, err := pgrun.SubmitInput(b.Ctx, b.Pool, run.ID, "approve", map[string]any{"ok": true, "by": "ann"})
	require.NoError(t, err)
	require.False(t, took, "not reached yet: kept for later")

	// fetch returns three docs.
	fetch := claimOneClaimed(t, b)
	testkit.Report(t, b, fetch, testkit.Outcome{Result: map[string]any{"docs": []string{"a", "b", "c"}}})
	states := testkit.NodeStates(t, b, run.ID)
	require.Equal(t, pgrun.StatusWaiting, states["embed"])
	require.Equal(t, pgrun.StatusSucceeded, states["approve"], "the early input was used")

	// Finish the embed children in reverse order.
	var kids []testkit.Claimed
	var raw []byte
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select jsonb_agg(jsonb_build_object('id', id, 'attempt', attempt, 'args', args) order by id desc)
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
		testkit.Report(t, b, k, testkit.Outcome{Result: "vec-" + a.Doc})
	}
	rep := claimOneClaimed(t, b)
	var args map[string]any
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select args from pgrun.jobs where id = $1`, rep.ID).Scan(&args))
	require.Equal(t, map[string]any{"vectors": []any{"vec-a", "vec-b", "vec-c"}, "by": "ann"}, args)
	testkit.Report(t, b, rep, testkit.Outcome{Result: "report.pdf"})

	r, err := pgrun.GetRun(b.Ctx, b.Pool, run.ID)
	require.NoError(t, err)
	require.Equal(t, "succeeded", r.Status)
	require.JSONEq(t, `{"report": "report.pdf"}`, string(r.Output))
}

// skip_if skips a node; an input submitted while its node waits is taken at once.
func TestDAGSkipIfAndWaitingInput(t *testing.T) {
	b := testkit.Setup(t)
	testkit.DefineWorkflow(t, b, "pipeline", pipeline)
	run, err := pgrun.StartRun(b.Ctx, b.Pool, "pipeline", map[string]any{"url": "u"}, "")
	require.NoError(t, err)
	testkit.Drive(t, b, func(c testkit.Claimed) testkit.Outcome {
		return testkit.Outcome{Result: map[string]any{"docs": []string{}}}
	})
	require.Equal(t, pgrun.StatusWaiting, testkit.NodeStates(t, b, run.ID)["approve"])
	took, err := pgrun.SubmitInput(b.Ctx, b.Pool, run.ID, "approve", map[string]any{"ok": false})
	require.NoError(t, err)
	require.True(t, took)
	_, err = pgrun.SubmitInput(b.Ctx, b.Pool, run.ID, "approve", map[string]any{"ok": true})
	require.Equal(t, "23505", testkit.SQLState(err), "one input per node")
	states := testkit.NodeStates(t, b, run.ID)
	require.Equal(t, pgrun.StatusSucceeded, states["embed"], "an empty map succeeds at once")
	require.Equal(t, pgrun.StatusSkipped, states["report"])
	r, err := pgrun.GetRun(b.Ctx, b.Pool, run.ID)
	require.NoError(t, err)
	require.Equal(t, "succeeded", r.Status)
}

// A required node that fails for good skips its dependents (upstream_failed) and fails
// the run, cancelling what is unfinished; an optional node's failure does neither.
func TestDAGFailureSkipsDependentsUnlessOptional(t *testing.T) {
	b := testkit.Setup(t)
	testkit.DefineWorkflow(t, b, "branches", `{"nodes": [
	  {"name": "a", "kind": "work"},
	  {"name": "opt", "kind": "flaky", "optional": true, "deps": ["a"]},
	  {"name": "after_opt", "kind": "work", "deps": ["opt"]},
	  {"name": "req", "kind": "doomed", "deps": ["a"]},
	  {"name": "after_req", "kind": "work", "deps": ["req"]},
	  {"name": "slow", "kind": "slow", "deps": ["a"]}
	]}`)
	run, err := pgrun.StartRun(b.Ctx, b.Pool, "branches", nil, "")
	require.NoError(t, err)
	a := claimOneClaimed(t, b)
	testkit.Report(t, b, a, testkit.Outcome{Result: 1})
	var raw []byte
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select jsonb_agg(jsonb_build_object('id', id, 'attempt', attempt, 'kind', kind) order by kind)
		from pgrun.claim_jobs('default', 'w', 10)`).Scan(&raw))
	var ready []testkit.Claimed
	require.NoError(t, json.Unmarshal(raw, &ready))
	require.Len(t, ready, 3)                                                              // doomed, flaky, slow
	testkit.Report(t, b, ready[1], testkit.Outcome{Fail: "flaky broke", Permanent: true}) // flaky (optional)
	require.Equal(t, pgrun.StatusQueued, testkit.NodeStates(t, b, run.ID)["after_opt"], "an optional failure releases dependents")
	testkit.Report(t, b, ready[0], testkit.Outcome{Fail: "doomed broke", Permanent: true}) // doomed (required)

	states := testkit.NodeStates(t, b, run.ID)
	require.Equal(t, pgrun.StatusSkipped, states["after_req"])
	require.Equal(t, pgrun.StatusCancelled, states["slow"], "the run failed: unfinished nodes are cancelled")
	require.Equal(t, pgrun.StatusCancelled, states["after_opt"])
	var class string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select error_class from pgrun.run_status where run_id = $1 and node = 'after_req'`, run.ID).Scan(&class))
	require.Equal(t, "upstream_failed", class)
	r, err := pgrun.GetRun(b.Ctx, b.Pool, run.ID)
	require.NoError(t, err)
	require.Equal(t, "failed", r.Status)
	require.Contains(t, string(r.Error), `"node": "req"`)
	// The late report of the cancelled slow node changes nothing.
	testkit.Report(t, b, ready[2], testkit.Outcome{Result: "late"})
	require.Equal(t, pgrun.StatusCancelled, testkit.NodeStates(t, b, run.ID)["slow"])
}

// cancel_run cancels every unfinished node, map children included.
func TestCancelRunCancelsEverything(t *testing.T) {
	b := testkit.Setup(t)
	testkit.DefineWorkflow(t, b, "pipeline", pipeline)
	run, err := pgrun.StartRun(b.Ctx, b.Pool, "pipeline", map[string]any{"url": "u"}, "")
	require.NoError(t, err)
	testkit.Report(t, b, claimOneClaimed(t, b), testkit.Outcome{Result: map[string]any{"docs": []int{1, 2, 3, 4}}})
	r, err := pgrun.CancelRun(b.Ctx, b.Pool, run.ID, "no longer needed")
	require.NoError(t, err)
	require.Equal(t, "cancelled", r.Status)
	var active int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs where status in ('pending', 'queued', 'running', 'waiting')`).Scan(&active))
	require.Zero(t, active)
	_, err = pgrun.CancelRun(b.Ctx, b.Pool, run.ID, "")
	require.ErrorIs(t, err, pgrun.ErrFinished)
	_, err = pgrun.CancelRun(b.Ctx, b.Pool, 999, "")
	require.ErrorIs(t, err, pgrun.ErrRunNotFound)
}

// Bad definitions are rejected with a message naming the node; the same spec twice
// is one version.
func TestDefineWorkflowChecksTheGraph(t *testing.T) {
	b := testkit.Setup(t)
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
		_, err := pgrun.DefineWorkflow(b.Ctx, b.Pool, "bad", json.RawMessage(spec))
		require.Equal(t, "22023", testkit.SQLState(err), spec)
		require.ErrorContains(t, err, want, spec)
	}
	var n int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.workflows`).Scan(&n))
	require.Zero(t, n)
	v1, err := pgrun.DefineWorkflow(b.Ctx, b.Pool, "pipeline", json.RawMessage(pipeline))
	require.NoError(t, err)
	v2, err := pgrun.DefineWorkflow(b.Ctx, b.Pool, "pipeline", json.RawMessage(pipeline))
	require.NoError(t, err)
	require.Equal(t, v1, v2)
	_, err = pgrun.StartRun(b.Ctx, b.Pool, "nope", nil, "")
	require.Equal(t, "P0002", testkit.SQLState(err))
}
