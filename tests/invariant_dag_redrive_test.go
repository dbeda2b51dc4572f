package tests

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
)

// dagClaim claims the one due job of queue and returns it; it fails the test if there
// is none. Nodes that must be driven one by one sit in queues of their own.
func dagClaim(t *testing.T, b *bundle, queue string) claimed {
	t.Helper()
	var raw []byte
	require.NoError(t, b.pool.QueryRow(b.ctx, `select coalesce(jsonb_agg(jsonb_build_object(
		'id', id, 'attempt', attempt, 'kind', kind, 'node', node, 'parent_id', parent_id, 'args', args)), '[]')
		from pgrun.claim_jobs($1, 'dag-test', 1)`, queue).Scan(&raw))
	var got []claimed
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

func dagNodeOf(t *testing.T, b *bundle, runID int64, node string) dagNode {
	t.Helper()
	var n dagNode
	require.NoError(t, b.pool.QueryRow(b.ctx, `select id, status::text, deps_remaining, error ->> 'class', error ->> 'cause'
		from pgrun.jobs where run_id = $1 and node = $2 and parent_id is null`, runID, node).
		Scan(&n.ID, &n.Status, &n.DepsRemaining, &n.ErrorClass, &n.Cause))
	return n
}

func dagRun(t *testing.T, b *bundle, runID int64) *pgrun.Run {
	t.Helper()
	r, err := pgrun.GetRun(b.ctx, b.pool, runID)
	require.NoError(t, err)
	return r
}

func retryJob(t *testing.T, b *bundle, id int64) {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, `select pgrun.retry_job($1)`, id)
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
	b := setup(t)
	defineWorkflow(t, b, "chain", `{"nodes": [
	  {"name": "a", "kind": "work"},
	  {"name": "b", "kind": "work", "deps": ["a"], "args": {"from_a": {"$from": "a.output"}}},
	  {"name": "c", "kind": "work", "deps": ["b"], "args": {"from_b": {"$from": "b.output"}}}
	]}`)
	run, err := pgrun.StartRun(b.ctx, b.pool, "chain", nil, "")
	require.NoError(t, err)
	report(t, b, dagClaim(t, b, "default"), outcome{result: "A"})
	bjob := dagClaim(t, b, "default")
	report(t, b, bjob, outcome{fail: "b broke", permanent: true})

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
	report(t, b, again, outcome{result: "B"})
	require.Equal(t, pgrun.StatusQueued, dagNodeOf(t, b, run.ID, "c").Status, "b's success releases c")
	cjob := dagClaim(t, b, "default")
	require.JSONEq(t, `{"from_b": "B"}`, string(cjob.Args))
	report(t, b, cjob, outcome{result: "C"})

	r = dagRun(t, b, run.ID)
	require.Equal(t, "succeeded", r.Status)
	require.JSONEq(t, `{"c": "C"}`, string(r.Output))
	require.Equal(t, map[string]pgrun.JobStatus{"a": "succeeded", "b": "succeeded", "c": "succeeded"}, nodeStates(t, b, run.ID))
}

// retry_run redrives every failed or cancelled node of a failed run, and what the
// failure cut off (skipped downstream, cancelled elsewhere) runs again; the run ends
// as if the failure had not happened. It changes nothing on a running or succeeded
// run, and an unknown run is P0002.
func TestDAGRetryRunResumesEverythingTheFailureCutOff(t *testing.T) {
	b := setup(t)
	defineWorkflow(t, b, "split", `{"nodes": [
	  {"name": "a", "kind": "work"},
	  {"name": "b", "kind": "work", "deps": ["a"], "queue": "flaky"},
	  {"name": "c", "kind": "work", "deps": ["b"]},
	  {"name": "d", "kind": "work", "deps": ["a"], "queue": "slow"},
	  {"name": "e", "kind": "work", "deps": ["d"]},
	  {"name": "ask", "input": true, "deps": ["a"]}
	]}`)
	run, err := pgrun.StartRun(b.ctx, b.pool, "split", nil, "")
	require.NoError(t, err)
	report(t, b, dagClaim(t, b, "default"), outcome{result: "A"})
	slow := dagClaim(t, b, "slow") // d is running when the run fails
	report(t, b, dagClaim(t, b, "flaky"), outcome{fail: "b broke", permanent: true})

	require.Equal(t, "failed", dagRun(t, b, run.ID).Status)
	d := dagNodeOf(t, b, run.ID, "d")
	require.Equal(t, pgrun.StatusCancelled, d.Status)
	require.Equal(t, "run_failed", *d.Cause)
	require.Equal(t, pgrun.StatusCancelled, dagNodeOf(t, b, run.ID, "ask").Status)

	var got *int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `select (pgrun.retry_run($1)).id`, run.ID).Scan(&got))
	require.NotNil(t, got)
	require.Equal(t, "running", dagRun(t, b, run.ID).Status)
	require.Equal(t, map[string]pgrun.JobStatus{"a": "succeeded", "b": "queued", "c": "pending", "d": "queued", "e": "pending", "ask": "waiting"},
		nodeStates(t, b, run.ID), "an input node waits for its input again; it is not queued as a job")
	// The stale worker of d's cancelled attempt cannot report for the new one.
	report(t, b, slow, outcome{result: "stale"})
	require.Equal(t, pgrun.StatusQueued, dagNodeOf(t, b, run.ID, "d").Status)

	var none *int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `select (pgrun.retry_run($1)).id`, run.ID).Scan(&none))
	require.Nil(t, none, "a running run is not redriven")

	report(t, b, dagClaim(t, b, "flaky"), outcome{result: "B"})
	report(t, b, dagClaim(t, b, "slow"), outcome{result: "D"})
	took, err := pgrun.SubmitInput(b.ctx, b.pool, run.ID, "ask", map[string]any{"ok": true})
	require.NoError(t, err)
	require.True(t, took)
	drive(t, b, func(c claimed) outcome { return outcome{result: *c.Node} })
	r := dagRun(t, b, run.ID)
	require.Equal(t, "succeeded", r.Status)
	require.JSONEq(t, `{"c": "c", "e": "e", "ask": {"ok": true}}`, string(r.Output))

	require.NoError(t, b.pool.QueryRow(b.ctx, `select (pgrun.retry_run($1)).id`, run.ID).Scan(&none))
	require.Nil(t, none, "a succeeded run is not redriven")
	_, err = b.pool.Exec(b.ctx, `select pgrun.retry_run(424242)`)
	require.Equal(t, "P0002", sqlState(err))
}

// A cancelled run resumes with retry_run too: every node cancel_run cancelled runs
// again, each when its dependencies are done.
func TestDAGRetryRunResumesACancelledRun(t *testing.T) {
	b := setup(t)
	defineWorkflow(t, b, "chain", `{"nodes": [
	  {"name": "a", "kind": "work"},
	  {"name": "b", "kind": "work", "deps": ["a"]},
	  {"name": "c", "kind": "work", "deps": ["b"]}
	]}`)
	run, err := pgrun.StartRun(b.ctx, b.pool, "chain", nil, "")
	require.NoError(t, err)
	report(t, b, dagClaim(t, b, "default"), outcome{result: "A"})
	_, err = pgrun.CancelRun(b.ctx, b.pool, run.ID, "operator")
	require.NoError(t, err)
	require.Equal(t, map[string]pgrun.JobStatus{"a": "succeeded", "b": "cancelled", "c": "cancelled"}, nodeStates(t, b, run.ID))

	_, err = b.pool.Exec(b.ctx, `select pgrun.retry_run($1)`, run.ID)
	require.NoError(t, err)
	require.Equal(t, map[string]pgrun.JobStatus{"a": "succeeded", "b": "queued", "c": "pending"}, nodeStates(t, b, run.ID),
		"c waits for b: it is not queued before its dependency is done")
	require.Equal(t, 1, dagNodeOf(t, b, run.ID, "c").DepsRemaining)
	drive(t, b, succeed)
	require.Equal(t, "succeeded", dagRun(t, b, run.ID).Status)
}

// When no node is active any more a run succeeds only if every required node passed:
// redriving one of two nodes that did not pass cannot declare the run a success.
//
// Was a BUG (fixed): the run succeeded as soon as no node was active.
func TestDAGRunDoesNotSucceedWhileARequiredNodeHasNotPassed(t *testing.T) {
	b := setup(t)
	defineWorkflow(t, b, "pair", `{"nodes": [
	  {"name": "a", "kind": "work", "queue": "qa"},
	  {"name": "b", "kind": "work", "queue": "qb"}
	]}`)
	run, err := pgrun.StartRun(b.ctx, b.pool, "pair", nil, "")
	require.NoError(t, err)
	a := dagNodeOf(t, b, run.ID, "a")
	// An operator cancels a; the run fails and b is cancelled with it.
	_, err = b.pool.Exec(b.ctx, `select pgrun.cancel_job($1, 'not needed')`, a.ID)
	require.NoError(t, err)
	require.Equal(t, "failed", dagRun(t, b, run.ID).Status)
	bn := dagNodeOf(t, b, run.ID, "b")
	require.Equal(t, pgrun.StatusCancelled, bn.Status)

	// Redrive b alone: a stays cancelled (the operator did that, not the failure).
	retryJob(t, b, bn.ID)
	require.Equal(t, "running", dagRun(t, b, run.ID).Status)
	require.Equal(t, pgrun.StatusCancelled, dagNodeOf(t, b, run.ID, "a").Status)
	report(t, b, dagClaim(t, b, "qb"), outcome{result: "B"})
	r := dagRun(t, b, run.ID)
	require.Equal(t, "failed", r.Status, "a required node is still cancelled")
	require.Contains(t, string(r.Error), `"node": "a"`)

	retryJob(t, b, a.ID)
	report(t, b, dagClaim(t, b, "qa"), outcome{result: "A"})
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
	b := setup(t)
	defineWorkflow(t, b, "deep", `{"nodes": [
	  {"name": "root", "kind": "work"},
	  {"name": "a", "kind": "work", "deps": ["root"], "queue": "qa"},
	  {"name": "b", "kind": "work", "deps": ["a"]},
	  {"name": "c", "kind": "work", "deps": ["b"], "optional": true},
	  {"name": "d", "kind": "work", "deps": ["c", "x"]},
	  {"name": "x", "kind": "work", "deps": ["root"], "queue": "qx"},
	  {"name": "y", "kind": "work", "deps": ["x"]}
	]}`)
	run, err := pgrun.StartRun(b.ctx, b.pool, "deep", nil, "")
	require.NoError(t, err)
	report(t, b, dagClaim(t, b, "default"), outcome{result: 1})
	dagClaim(t, b, "qx") // x keeps running
	report(t, b, dagClaim(t, b, "qa"), outcome{fail: "a broke", permanent: true})

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
	require.NoError(t, b.pool.QueryRow(b.ctx, `select error_message from pgrun.run_status where run_id = $1 and node = 'd'`, run.ID).Scan(&msg))
	require.Equal(t, "upstream node a ended failed", msg)
}

// Redriving a map node that failed on some children retries those children only: the
// ones that succeeded keep their results, and the node's output is in element order.
func TestDAGRedriveOfAMapNodeRetriesItsFailedChildren(t *testing.T) {
	b := setup(t)
	defineWorkflow(t, b, "fan", `{"nodes": [
	  {"name": "list", "kind": "work"},
	  {"name": "each", "kind": "part", "deps": ["list"], "map": {"$from": "list.output"},
	   "args": {"n": {"$from": "item"}}, "failure_ratio": 0.1},
	  {"name": "sum", "kind": "work", "deps": ["each"], "args": {"parts": {"$from": "each.output"}}}
	]}`)
	run, err := pgrun.StartRun(b.ctx, b.pool, "fan", nil, "")
	require.NoError(t, err)
	report(t, b, dagClaim(t, b, "default"), outcome{result: []int{1, 2, 3}})
	var parts []claimed
	parts = append(parts, dagClaim(t, b, "default"), dagClaim(t, b, "default"), dagClaim(t, b, "default"))
	report(t, b, parts[0], outcome{result: "p1"})
	report(t, b, parts[1], outcome{fail: "p2 broke", permanent: true}) // 1/3 >= 0.1: each fails
	require.Equal(t, "failed", dagRun(t, b, run.ID).Status)
	each := dagNodeOf(t, b, run.ID, "each")
	require.Equal(t, pgrun.StatusFailed, each.Status)

	retryJob(t, b, each.ID)
	require.Equal(t, "running", dagRun(t, b, run.ID).Status)
	require.Equal(t, pgrun.StatusWaiting, dagNodeOf(t, b, run.ID, "each").Status, "a map node waits for its children again")
	var kids int
	require.NoError(t, b.pool.QueryRow(b.ctx, `select count(*) from pgrun.jobs where parent_id = $1`, each.ID).Scan(&kids))
	require.Equal(t, 3, kids, "no new fan-out")
	require.Equal(t, pgrun.StatusSucceeded, jobStatus(t, b, parts[0].ID), "a child that succeeded is kept")
	require.Equal(t, pgrun.StatusQueued, jobStatus(t, b, parts[1].ID))
	require.Equal(t, pgrun.StatusQueued, jobStatus(t, b, parts[2].ID))

	drive(t, b, func(c claimed) outcome {
		if c.Kind == "part" {
			var a struct{ N int }
			require.NoError(t, json.Unmarshal(c.Args, &a))
			return outcome{result: fmt.Sprintf("p%d", a.N)}
		}
		return outcome{result: c.Args}
	})
	r := dagRun(t, b, run.ID)
	require.Equal(t, "succeeded", r.Status)
	require.JSONEq(t, `{"sum": {"parts": ["p1", "p2", "p3"]}}`, string(r.Output))
}

// Redriving a run whose unique_key another running run has taken since is refused
// (23505), changing nothing.
func TestDAGRedriveRefusedWhileAnotherRunHoldsTheKey(t *testing.T) {
	b := setup(t)
	defineWorkflow(t, b, "one", `{"nodes": [{"name": "a", "kind": "work"}]}`)
	first, err := pgrun.StartRun(b.ctx, b.pool, "one", nil, "nightly")
	require.NoError(t, err)
	report(t, b, dagClaim(t, b, "default"), outcome{fail: "broke", permanent: true})
	require.Equal(t, "failed", dagRun(t, b, first.ID).Status)
	second, err := pgrun.StartRun(b.ctx, b.pool, "one", nil, "nightly")
	require.NoError(t, err)
	require.NotEqual(t, first.ID, second.ID)

	_, err = b.pool.Exec(b.ctx, `select pgrun.retry_run($1)`, first.ID)
	require.Equal(t, "23505", sqlState(err))
	require.ErrorContains(t, err, fmt.Sprintf("run %d cannot resume", first.ID))
	require.Equal(t, "failed", dagRun(t, b, first.ID).Status)
	require.Equal(t, pgrun.StatusFailed, dagNodeOf(t, b, first.ID, "a").Status)
}

// Random DAGs (as in TestRandomDAGsEndAsTheGraphImplies) whose run failed resume with
// retry_run once their doomed nodes are fixed, and end as if nothing had failed: the
// run succeeds, every node ends as the graph without failures implies, and no node
// that had succeeded runs again.
func TestRandomDAGsResumeAfterRetryRun(t *testing.T) {
	b := setup(t)
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
		defineWorkflow(t, b, name, string(spec))
		run, err := pgrun.StartRun(b.ctx, b.pool, name, nil, "")
		require.NoError(t, err)
		fixed := false
		decide := func(c claimed) outcome {
			if c.Kind == "doomed" && !fixed {
				return outcome{fail: "doomed " + *c.Node, permanent: true}
			}
			return outcome{result: *c.Node}
		}
		drive(t, b, decide)
		if _, ok := expect(nodes); ok {
			continue // nothing required failed: nothing to resume
		}
		require.Equal(t, "failed", dagRun(t, b, run.ID).Status, msg)
		before := map[string]int{}
		rows, err := b.pool.Query(b.ctx, `select node, attempt from pgrun.jobs where run_id = $1 and status = 'succeeded'`, run.ID)
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
		require.NoError(t, b.pool.QueryRow(b.ctx, `select (pgrun.retry_run($1)).id`, run.ID).Scan(&resumed), msg)
		require.NotNil(t, resumed, msg)
		drive(t, b, decide)

		clean := make([]genNode, len(nodes))
		for i, g := range nodes {
			g.fails = false
			clean[i] = g
		}
		want, ok := expect(clean)
		require.True(t, ok)
		require.Equal(t, "succeeded", dagRun(t, b, run.ID).Status, msg)
		require.Equal(t, want, nodeStates(t, b, run.ID), msg)
		for node, attempt := range before {
			var now int
			require.NoError(t, b.pool.QueryRow(b.ctx, `select attempt from pgrun.jobs where run_id = $1 and node = $2 and parent_id is null`, run.ID, node).Scan(&now))
			require.Equal(t, attempt, now, "%s: node %s ran again", msg, node)
		}
	}
}
