package tests

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// dagClaim claims the one due job of queue and returns it; it fails the test if there
// is none. Nodes that must be driven one by one sit in queues of their own.
func dagClaim(t *testing.T, b *testkit.DB, queue string) testkit.Claimed {
	t.Helper()
	var raw []byte
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select coalesce(jsonb_agg(jsonb_build_object(
		'id', id, 'attempt', attempt, 'kind', kind, 'node', node, 'parent_id', parent_id, 'args', args)), '[]')
		from pgrun.claim_jobs($1, 'dag-test', 1)`, queue).Scan(&raw))
	var got []testkit.Claimed
	require.NoError(t, json.Unmarshal(raw, &got))
	require.Lenf(t, got, 1, "one job due in queue %s", queue)
	return got[0]
}

// dagNode is a node's row as a redrive test looks at it.
type dagNode struct {
	ID            int64
	Status        pgrun.JobStatus
	DepsRemaining int
	ErrorClass    *string
	Cause         *string
}

func dagNodeOf(t *testing.T, b *testkit.DB, runID int64, node string) dagNode {
	t.Helper()
	var n dagNode
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id, status::text, deps_remaining, error ->> 'class', error ->> 'cause'
		from pgrun.jobs where run_id = $1 and node = $2 and parent_id is null`, runID, node).
		Scan(&n.ID, &n.Status, &n.DepsRemaining, &n.ErrorClass, &n.Cause))
	return n
}

func dagRun(t *testing.T, b *testkit.DB, runID int64) *pgrun.Run {
	t.Helper()
	r, err := pgrun.GetRun(b.Ctx, b.Pool, runID)
	require.NoError(t, err)
	return r
}

func retryJob(t *testing.T, b *testkit.DB, id int64) {
	t.Helper()
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.retry_job($1)`, id)
	require.NoError(t, err)
}

// Redriving the node a run failed at (retry_job) resumes the run: it is running again,
// the dependents its failure skipped wait for it again, and once it succeeds they run
// and the run succeeds.
//
// Was a BUG (fixed): retry_job re-ran the node but the run stayed failed, its
// dependents stayed skipped, and the redriven node's own success was never dispatched
// (its dispatched_at was still set from its failure).
func TestDAGRedriveOfTheFailedNodeResumesTheRun(t *testing.T) {
	b := testkit.Setup(t)
	testkit.DefineWorkflow(t, b, "chain", `{"nodes": [
	  {"name": "a", "kind": "work"},
	  {"name": "b", "kind": "work", "deps": ["a"], "args": {"from_a": {"$from": "a.output"}}},
	  {"name": "c", "kind": "work", "deps": ["b"], "args": {"from_b": {"$from": "b.output"}}}
	]}`)
	run, err := pgrun.StartRun(b.Ctx, b.Pool, "chain", nil, "")
	require.NoError(t, err)
	testkit.Report(t, b, dagClaim(t, b, "default"), testkit.Outcome{Result: "A"})
	bjob := dagClaim(t, b, "default")
	testkit.Report(t, b, bjob, testkit.Outcome{Fail: "b broke", Permanent: true})

	r := dagRun(t, b, run.ID)
	require.Equal(t, "failed", r.Status)
	require.NotNil(t, r.FinishedAt)
	c := dagNodeOf(t, b, run.ID, "c")
	require.Equal(t, pgrun.StatusSkipped, c.Status)
	require.Equal(t, "upstream_failed", *c.ErrorClass)

	retryJob(t, b, bjob.ID)
	r = dagRun(t, b, run.ID)
	require.Equal(t, "running", r.Status, "the run resumes")
	require.Nil(t, r.FinishedAt)
	require.Nil(t, r.Error)
	require.Equal(t, pgrun.StatusQueued, dagNodeOf(t, b, run.ID, "b").Status)
	c = dagNodeOf(t, b, run.ID, "c")
	require.Equal(t, pgrun.StatusPending, c.Status, "what the failure skipped waits again")
	require.Equal(t, 1, c.DepsRemaining)
	require.Nil(t, c.ErrorClass)

	again := dagClaim(t, b, "default")
	require.Equal(t, bjob.ID, again.ID)
	require.Equal(t, "b", *again.Node)
	testkit.Report(t, b, again, testkit.Outcome{Result: "B"})
	require.Equal(t, pgrun.StatusQueued, dagNodeOf(t, b, run.ID, "c").Status, "b's success releases c")
	cjob := dagClaim(t, b, "default")
	require.JSONEq(t, `{"from_b": "B"}`, string(cjob.Args))
	testkit.Report(t, b, cjob, testkit.Outcome{Result: "C"})

	r = dagRun(t, b, run.ID)
	require.Equal(t, "succeeded", r.Status)
	require.JSONEq(t, `{"c": "C"}`, string(r.Output))
	require.Equal(t, map[string]pgrun.JobStatus{"a": "succeeded", "b": "succeeded", "c": "succeeded"}, testkit.NodeStates(t, b, run.ID))
}

// retry_run redrives every failed or cancelled node of a failed run, and what the
// failure cut off (skipped downstream, cancelled elsewhere) runs again; the run ends
// as if the failure had not happened. It changes nothing on a running or succeeded
// run, and an unknown run is P0002.
func TestDAGRetryRunResumesEverythingTheFailureCutOff(t *testing.T) {
	b := testkit.Setup(t)
	testkit.DefineWorkflow(t, b, "split", `{"nodes": [
	  {"name": "a", "kind": "work"},
	  {"name": "b", "kind": "work", "deps": ["a"], "queue": "flaky"},
	  {"name": "c", "kind": "work", "deps": ["b"]},
	  {"name": "d", "kind": "work", "deps": ["a"], "queue": "slow"},
	  {"name": "e", "kind": "work", "deps": ["d"]},
	  {"name": "ask", "input": true, "deps": ["a"]}
	]}`)
	run, err := pgrun.StartRun(b.Ctx, b.Pool, "split", nil, "")
	require.NoError(t, err)
	testkit.Report(t, b, dagClaim(t, b, "default"), testkit.Outcome{Result: "A"})
	slow := dagClaim(t, b, "slow") // d is running when the run fails
	testkit.Report(t, b, dagClaim(t, b, "flaky"), testkit.Outcome{Fail: "b broke", Permanent: true})

	require.Equal(t, "failed", dagRun(t, b, run.ID).Status)
	d := dagNodeOf(t, b, run.ID, "d")
	require.Equal(t, pgrun.StatusCancelled, d.Status)
	require.Equal(t, "run_failed", *d.Cause)
	require.Equal(t, pgrun.StatusCancelled, dagNodeOf(t, b, run.ID, "ask").Status)

	var got *int64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select (pgrun.retry_run($1)).id`, run.ID).Scan(&got))
	require.NotNil(t, got)
	require.Equal(t, "running", dagRun(t, b, run.ID).Status)
	require.Equal(t, map[string]pgrun.JobStatus{"a": "succeeded", "b": "queued", "c": "pending", "d": "queued", "e": "pending", "ask": "waiting"},
		testkit.NodeStates(t, b, run.ID), "an input node waits for its input again; it is not queued as a job")
	// The stale worker of d's cancelled attempt cannot report for the new one.
	testkit.Report(t, b, slow, testkit.Outcome{Result: "stale"})
	require.Equal(t, pgrun.StatusQueued, dagNodeOf(t, b, run.ID, "d").Status)

	var none *int64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select (pgrun.retry_run($1)).id`, run.ID).Scan(&none))
	require.Nil(t, none, "a running run is not redriven")

	testkit.Report(t, b, dagClaim(t, b, "flaky"), testkit.Outcome{Result: "B"})
	testkit.Report(t, b, dagClaim(t, b, "slow"), testkit.Outcome{Result: "D"})
	took, err := pgrun.SubmitInput(b.Ctx, b.Pool, run.ID, "ask", map[string]any{"ok": true})
	require.NoError(t, err)
	require.True(t, took)
	testkit.Drive(t, b, func(c testkit.Claimed) testkit.Outcome { return testkit.Outcome{Result: *c.Node} })
	r := dagRun(t, b, run.ID)
	require.Equal(t, "succeeded", r.Status)
	require.JSONEq(t, `{"c": "c", "e": "e", "ask": {"ok": true}}`, string(r.Output))

	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select (pgrun.retry_run($1)).id`, run.ID).Scan(&none))
	require.Nil(t, none, "a succeeded run is not redriven")
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.retry_run(424242)`)
	require.Equal(t, "P0002", testkit.SQLState(err))
}

// A cancelled run resumes with retry_run too: every node cancel_run cancelled runs
// again, each when its dependencies are done.
func TestDAGRetryRunResumesACancelledRun(t *testing.T) {
	b := testkit.Setup(t)
	testkit.DefineWorkflow(t, b, "chain", `{"nodes": [
	  {"name": "a", "kind": "work"},
	  {"name": "b", "kind": "work", "deps": ["a"]},
	  {"name": "c", "kind": "work", "deps": ["b"]}
	]}`)
	run, err := pgrun.StartRun(b.Ctx, b.Pool, "chain", nil, "")
	require.NoError(t, err)
	testkit.Report(t, b, dagClaim(t, b, "default"), testkit.Outcome{Result: "A"})
	_, err = pgrun.CancelRun(b.Ctx, b.Pool, run.ID, "operator")
	require.NoError(t, err)
	require.Equal(t, map[string]pgrun.JobStatus{"a": "succeeded", "b": "cancelled", "c": "cancelled"}, testkit.NodeStates(t, b, run.ID))

	_, err = b.Pool.Exec(b.Ctx, `select pgrun.retry_run($1)`, run.ID)
	require.NoError(t, err)
	require.Equal(t, map[string]pgrun.JobStatus{"a": "succeeded", "b": "queued", "c": "pending"}, testkit.NodeStates(t, b, run.ID),
		"c waits for b: it is not queued before its dependency is done")
	require.Equal(t, 1, dagNodeOf(t, b, run.ID, "c").DepsRemaining)
	testkit.Drive(t, b, testkit.Succeed)
	require.Equal(t, "succeeded", dagRun(t, b, run.ID).Status)
}

// When no node is active any more a run succeeds only if every required node passed:
// redriving one of two nodes that did not pass cannot declare the run a success.
//
// Was a BUG (fixed): the run succeeded as soon as no node was active.
func TestDAGRunDoesNotSucceedWhileARequiredNodeHasNotPassed(t *testing.T) {
	b := testkit.Setup(t)
	testkit.DefineWorkflow(t, b, "pair", `{"nodes": [
	  {"name": "a", "kind": "work", "queue": "qa"},
	  {"name": "b", "kind": "work", "queue": "qb"}
	]}`)
	run, err := pgrun.StartRun(b.Ctx, b.Pool, "pair", nil, "")
	require.NoError(t, err)
	a := dagNodeOf(t, b, run.ID, "a")
	// An operator cancels a; the run fails and b is cancelled with it.
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.cancel_job($1, 'not needed')`, a.ID)
	require.NoError(t, err)
	require.Equal(t, "failed", dagRun(t, b, run.ID).Status)
	bn := dagNodeOf(t, b, run.ID, "b")
	require.Equal(t, pgrun.StatusCancelled, bn.Status)

	// Redrive b alone: a stays cancelled (the operator did that, not the failure).
	retryJob(t, b, bn.ID)
	require.Equal(t, "running", dagRun(t, b, run.ID).Status)
	require.Equal(t, pgrun.StatusCancelled, dagNodeOf(t, b, run.ID, "a").Status)
	testkit.Report(t, b, dagClaim(t, b, "qb"), testkit.Outcome{Result: "B"})
	r := dagRun(t, b, run.ID)
	require.Equal(t, "failed", r.Status, "a required node is still cancelled")
	require.Contains(t, string(r.Error), `"node": "a"`)

	retryJob(t, b, a.ID)
	testkit.Report(t, b, dagClaim(t, b, "qa"), testkit.Outcome{Result: "A"})
	r = dagRun(t, b, run.ID)
	require.Equal(t, "succeeded", r.Status)
	require.JSONEq(t, `{"a": "A", "b": "B"}`, string(r.Output))
}

// A required failure skips its whole pending downstream, not only its direct
// dependents (class upstream_failed, as docs/workflows.md says); other unfinished
// nodes are cancelled.
//
// Was a BUG (fixed): only direct dependents were skipped; indirect ones were cancelled.
func TestDAGFailureSkipsTheWholeDownstream(t *testing.T) {
	b := testkit.Setup(t)
	testkit.DefineWorkflow(t, b, "deep", `{"nodes": [
	  {"name": "root", "kind": "work"},
	  {"name": "a", "kind": "work", "deps": ["root"], "queue": "qa"},
	  {"name": "b", "kind": "work", "deps": ["a"]},
	  {"name": "c", "kind": "work", "deps": ["b"], "optional": true},
	  {"name": "d", "kind": "work", "deps": ["c", "x"]},
	  {"name": "x", "kind": "work", "deps": ["root"], "queue": "qx"},
	  {"name": "y", "kind": "work", "deps": ["x"]}
	]}`)
	run, err := pgrun.StartRun(b.Ctx, b.Pool, "deep", nil, "")
	require.NoError(t, err)
	testkit.Report(t, b, dagClaim(t, b, "default"), testkit.Outcome{Result: 1})
	dagClaim(t, b, "qx") // x keeps running
	testkit.Report(t, b, dagClaim(t, b, "qa"), testkit.Outcome{Fail: "a broke", Permanent: true})

	for _, node := range []string{"b", "c", "d"} {
		n := dagNodeOf(t, b, run.ID, node)
		require.Equal(t, pgrun.StatusSkipped, n.Status, node)
		require.Equal(t, "upstream_failed", *n.ErrorClass, node)
	}
	for _, node := range []string{"x", "y"} {
		n := dagNodeOf(t, b, run.ID, node)
		require.Equal(t, pgrun.StatusCancelled, n.Status, node)
		require.Equal(t, "run_failed", *n.Cause, node)
	}
	var msg string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select error_message from pgrun.run_status where run_id = $1 and node = 'd'`, run.ID).Scan(&msg))
	require.Equal(t, "upstream node a ended failed", msg)
}

// Redriving a map node that failed on some children retries those children only: the
// ones that succeeded keep their results, and the node's output is in element order.
func TestDAGRedriveOfAMapNodeRetriesItsFailedChildren(t *testing.T) {
	b := testkit.Setup(t)
	testkit.DefineWorkflow(t, b, "fan", `{"nodes": [
	  {"name": "list", "kind": "work"},
	  {"name": "each", "kind": "part", "deps": ["list"], "map": {"$from": "list.output"},
	   "args": {"n": {"$from": "item"}}, "failure_ratio": 0.1},
	  {"name": "sum", "kind": "work", "deps": ["each"], "args": {"parts": {"$from": "each.output"}}}
	]}`)
	run, err := pgrun.StartRun(b.Ctx, b.Pool, "fan", nil, "")
	require.NoError(t, err)
	testkit.Report(t, b, dagClaim(t, b, "default"), testkit.Outcome{Result: []int{1, 2, 3}})
	var parts []testkit.Claimed
	parts = append(parts, dagClaim(t, b, "default"), dagClaim(t, b, "default"), dagClaim(t, b, "default"))
	testkit.Report(t, b, parts[0], testkit.Outcome{Result: "p1"})
	testkit.Report(t, b, parts[1], testkit.Outcome{Fail: "p2 broke", Permanent: true}) // 1/3 >= 0.1: each fails
	require.Equal(t, "failed", dagRun(t, b, run.ID).Status)
	each := dagNodeOf(t, b, run.ID, "each")
	require.Equal(t, pgrun.StatusFailed, each.Status)

	retryJob(t, b, each.ID)
	require.Equal(t, "running", dagRun(t, b, run.ID).Status)
	require.Equal(t, pgrun.StatusWaiting, dagNodeOf(t, b, run.ID, "each").Status, "a map node waits for its children again")
	var kids int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs where parent_id = $1`, each.ID).Scan(&kids))
	require.Equal(t, 3, kids, "no new fan-out")
	require.Equal(t, pgrun.StatusSucceeded, testkit.JobStatus(t, b, parts[0].ID), "a child that succeeded is kept")
	require.Equal(t, pgrun.StatusQueued, testkit.JobStatus(t, b, parts[1].ID))
	require.Equal(t, pgrun.StatusQueued, testkit.JobStatus(t, b, parts[2].ID))

	testkit.Drive(t, b, func(c testkit.Claimed) testkit.Outcome {
		if c.Kind == "part" {
			var a struct{ N int }
			require.NoError(t, json.Unmarshal(c.Args, &a))
			return testkit.Outcome{Result: fmt.Sprintf("p%d", a.N)}
		}
		return testkit.Outcome{Result: c.Args}
	})
	r := dagRun(t, b, run.ID)
	require.Equal(t, "succeeded", r.Status)
	require.JSONEq(t, `{"sum": {"parts": ["p1", "p2", "p3"]}}`, string(r.Output))
}

// Redriving a run whose unique_key another running run has taken since is refused
// (23505), changing nothing.
func TestDAGRedriveRefusedWhileAnotherRunHoldsTheKey(t *testing.T) {
	b := testkit.Setup(t)
	testkit.DefineWorkflow(t, b, "one", `{"nodes": [{"name": "a", "kind": "work"}]}`)
	first, err := pgrun.StartRun(b.Ctx, b.Pool, "one", nil, "nightly")
	require.NoError(t, err)
	testkit.Report(t, b, dagClaim(t, b, "default"), testkit.Outcome{Fail: "broke", Permanent: true})
	require.Equal(t, "failed", dagRun(t, b, first.ID).Status)
	second, err := pgrun.StartRun(b.Ctx, b.Pool, "one", nil, "nightly")
	require.NoError(t, err)
	require.NotEqual(t, first.ID, second.ID)

	_, err = b.Pool.Exec(b.Ctx, `select pgrun.retry_run($1)`, first.ID)
	require.Equal(t, "23505", testkit.SQLState(err))
	require.ErrorContains(t, err, fmt.Sprintf("run %d cannot resume", first.ID))
	require.Equal(t, "failed", dagRun(t, b, first.ID).Status)
	require.Equal(t, pgrun.StatusFailed, dagNodeOf(t, b, first.ID, "a").Status)
}

// Random DAGs (as in TestRandomDAGsEndAsTheGraphImplies) whose run failed resume with
// retry_run once their doomed nodes are fixed, and end as if nothing had failed: the
// run succeeds, every node ends as the graph without failures implies, and no node
// that had succeeded runs again.
func TestRandomDAGsResumeAfterRetryRun(t *testing.T) {
	b := testkit.Setup(t)
	graphs := 30
	if testing.Short() {
		graphs = 8
	}
	rng := rand.New(rand.NewPCG(7, uint64(time.Now().UnixNano())))
	for gi := range graphs {
		nodes := randomDAG(rng)
		specNodes := make([]any, len(nodes))
		for i, g := range nodes {
			specNodes[i] = g.spec(nodes)
		}
		spec, _ := json.Marshal(map[string]any{"nodes": specNodes})
		name := fmt.Sprintf("g%d", gi)
		msg := fmt.Sprintf("graph %d: %s", gi, spec)
		testkit.DefineWorkflow(t, b, name, string(spec))
		run, err := pgrun.StartRun(b.Ctx, b.Pool, name, nil, "")
		require.NoError(t, err)
		fixed := false
		decide := func(c testkit.Claimed) testkit.Outcome {
			if c.Kind == "doomed" && !fixed {
				return testkit.Outcome{Fail: "doomed " + *c.Node, Permanent: true}
			}
			return testkit.Outcome{Result: *c.Node}
		}
		testkit.Drive(t, b, decide)
		if _, ok := expect(nodes); ok {
			continue // nothing required failed: nothing to resume
		}
		require.Equal(t, "failed", dagRun(t, b, run.ID).Status, msg)
		before := map[string]int{}
		rows, err := b.Pool.Query(b.Ctx, `select node, attempt from pgrun.jobs where run_id = $1 and status = 'succeeded'`, run.ID)
		require.NoError(t, err)
		for rows.Next() {
			var node string
			var attempt int
			require.NoError(t, rows.Scan(&node, &attempt))
			before[node] = attempt
		}
		require.NoError(t, rows.Err())

		fixed = true
		var resumed *int64
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select (pgrun.retry_run($1)).id`, run.ID).Scan(&resumed), msg)
		require.NotNil(t, resumed, msg)
		testkit.Drive(t, b, decide)

		clean := make([]genNode, len(nodes))
		for i, g := range nodes {
			g.fails = false
			clean[i] = g
		}
		want, ok := expect(clean)
		require.True(t, ok)
		require.Equal(t, "succeeded", dagRun(t, b, run.ID).Status, msg)
		require.Equal(t, want, testkit.NodeStates(t, b, run.ID), msg)
		for node, attempt := range before {
			var now int
			require.NoError(t, b.Pool.QueryRow(b.Ctx, `select attempt from pgrun.jobs where run_id = $1 and node = $2 and parent_id is null`, run.ID, node).Scan(&now))
			require.Equal(t, attempt, now, "%s: node %s ran again", msg, node)
		}
	}
}
