package tests

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// wfCounts is testkit.Counts with the workflow tables: what a refused call must leave
// as it found it.
func wfCounts(t *testing.T, b *testkit.DB) map[string]int {
	t.Helper()
	c := testkit.Counts(t, b.Pool)
	var wf, runs, inputs, outbox int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select (select count(*) from pgrun.workflows), (select count(*) from pgrun.runs),
		(select count(*) from pgrun.run_inputs), (select count(*) from pgrun.outbox)`).Scan(&wf, &runs, &inputs, &outbox))
	c["workflows"], c["runs"], c["run_inputs"], c["outbox"] = wf, runs, inputs, outbox
	return c
}

// refusedBounds asserts that sql fails with 22023, a message holding every piece of
// wants and a HINT, and that no table changed.
func refusedBounds(t *testing.T, b *testkit.DB, wants []string, sql string, args ...any) {
	t.Helper()
	before := wfCounts(t, b)
	_, err := b.Pool.Exec(b.Ctx, sql, args...)
	require.Error(t, err, "accepted: %.300s", sql)
	pe := testkit.PgError(t, err, sql)
	require.Equal(t, "22023", pe.Code, "%.300s: %s", sql, pe.Message)
	for _, w := range wants {
		require.Contains(t, pe.Message, w, "%.300s", sql)
	}
	require.NotEmpty(t, strings.TrimSpace(pe.Hint), "%.300s: a HINT says what is allowed", sql)
	require.Less(t, len(pe.Message), 400, "the message quotes a cut value, not all of it")
	require.Equal(t, before, wfCounts(t, b), "%.300s wrote something", sql)
}

// boundsNode is a spec of one node named n: a plain job of kind work, with extra's keys.
func boundsNode(extra string) string {
	if extra != "" {
		extra = ", " + extra
	}
	return `{"nodes": [{"name": "n", "kind": "work"` + extra + `}]}`
}

// define_workflow refuses every node field the engine reads later when it has the
// wrong JSON type or is out of range (the attacker's "optional": "banana" and
// "failure_ratio": "abc" stranded a run: its dispatch failed in the outbox for good).
// Each refusal is 22023, names the workflow, the node, the field and the value, has a
// HINT, and writes nothing; the value just inside each bound is accepted.
func TestBoundsWorkflowNodeFieldsAreCheckedByTypeAndRange(t *testing.T) {
	b := testkit.Setup(t)
	kind128 := "k" + strings.Repeat("x", 127)
	queue63 := "q" + strings.Repeat("x", 62)
	bad := []struct {
		extra, field, value string
	}{
		{`"optional": "banana"`, "optional", `"banana"`},
		{`"optional": 1`, "optional", "1"},
		{`"optional": "true"`, "optional", `"true"`},
		{`"input": "yes"`, "input", `"yes"`},
		{`"failure_ratio": "abc"`, "failure_ratio", `"abc"`},
		{`"failure_ratio": 2`, "failure_ratio", "2"},
		{`"failure_ratio": -1`, "failure_ratio", "-1"},
		{`"failure_ratio": 1.0000001`, "failure_ratio", "1.0000001"},
		{`"failure_ratio": 1e-400`, "failure_ratio", "0.0000"}, // in range, but no double holds it
		{`"timeout": "soon"`, "timeout", `"soon"`},
		{`"timeout": "366 days 1 second"`, "timeout", `"366 days 1 second"`},
		{`"timeout": "-1 second"`, "timeout", `"-1 second"`},
		{`"timeout": true`, "timeout", "true"},
		{`"timeout": "1000000 years"`, "timeout", `"1000000 years"`},
		{`"max_attempts": 0`, "max_attempts", "0"},
		{`"max_attempts": 2147483648`, "max_attempts", "2147483648"},
		{`"max_attempts": 1.5`, "max_attempts", "1.5"},
		{`"max_attempts": "3"`, "max_attempts", `"3"`},
		{`"priority": 32768`, "priority", "32768"},
		{`"priority": -1`, "priority", "-1"},
		{`"priority": "high"`, "priority", `"high"`},
		{`"priority": 1e30`, "priority", "1000000000000000000000000000000"},
		{`"queue": "Bad Queue"`, "queue", `"Bad Queue"`},
		{`"queue": "` + queue63 + `x"`, "queue", queue63},
		{`"queue": 5`, "queue", "5"},
		{`"model": ""`, "model", `""`},
		{`"model": {"name": "m"}`, "model", `{"name": "m"}`},
	}
	for _, c := range bad {
		t.Run(c.field+" "+c.value, func(t *testing.T) {
			refusedBounds(t, b, []string{"workflow 'wf'", "node n", c.field, c.value},
				`select pgrun.define_workflow('wf', $1::jsonb)`, boundsNode(c.extra))
		})
	}
	// Kind: the job's type and form, an input node's too (its job is a row of pgrun.jobs).
	refusedBounds(t, b, []string{"workflow 'wf'", "node n", "kind", "true"},
		`select pgrun.define_workflow('wf', '{"nodes": [{"name": "n", "kind": true}]}')`)
	refusedBounds(t, b, []string{"workflow 'wf'", "node n", "kind", `"9lives"`},
		`select pgrun.define_workflow('wf', '{"nodes": [{"name": "n", "input": true, "kind": "9lives"}]}')`)
	refusedBounds(t, b, []string{"workflow 'wf'", "node n", "kind", `"kxxx`, "..."},
		`select pgrun.define_workflow('wf', $1::jsonb)`, `{"nodes": [{"name": "n", "input": true, "kind": "`+kind128+`x"}]}`)
	// A node name must be a JSON string ("name": true read as the name 'true').
	refusedBounds(t, b, []string{"node name"}, `select pgrun.define_workflow('wf', '{"nodes": [{"name": true, "kind": "work"}]}')`)
	// A long bad value is quoted cut.
	refusedBounds(t, b, []string{"workflow 'wf'", "node n", "model", "..."},
		`select pgrun.define_workflow('wf', $1::jsonb)`, boundsNode(`"model": {"m": "`+strings.Repeat("m", 5000)+`"}`))

	// Each bound's edge, and JSON null for a field left out.
	for i, extra := range []string{
		`"optional": true`, `"optional": false`, `"input": false`, `"failure_ratio": 0`, `"failure_ratio": 1`,
		`"timeout": "366 days"`, `"timeout": 0`, `"timeout": "0"`, `"timeout": 30`, `"timeout": "P1D"`,
		`"max_attempts": 1`, `"max_attempts": 2147483647`, `"priority": 0`, `"priority": 32767`,
		`"queue": "` + queue63 + `"`, `"model": "m"`,
		`"optional": null, "input": null, "failure_ratio": null, "timeout": null, "max_attempts": null, "priority": null, "queue": null, "model": null`,
	} {
		_, err := b.Pool.Exec(b.Ctx, `select pgrun.define_workflow($1, $2::jsonb)`, fmt.Sprintf("edge%d", i), boundsNode(extra))
		require.NoError(t, err, extra)
	}
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.define_workflow('edge_kind', $1::jsonb)`,
		`{"nodes": [{"name": "n", "kind": "`+kind128+`"}, {"name": "ask", "input": true, "kind": "`+kind128+`"}]}`)
	require.NoError(t, err)
}

// A workflow whose every field sits at the edge of its bound runs to its end: start_run
// inserts its jobs, a claim takes the node with the longest timeout and the lowest
// priority, maintain() runs beside it, the map node fans out with its children's
// fields, the input node takes its input, and the run succeeds with nothing left in
// the outbox.
func TestBoundsWorkflowAtTheEdgesRunsToItsEnd(t *testing.T) {
	b := testkit.Setup(t)
	kind128 := "k" + strings.Repeat("x", 127)
	queue63 := "q" + strings.Repeat("x", 62)
	testkit.DefineWorkflow(t, b, "edges", `{"nodes": [
	  {"name": "a", "kind": "`+kind128+`", "queue": "`+queue63+`", "priority": 32767, "max_attempts": 2147483647,
	   "timeout": "366 days", "model": "m", "optional": false, "args": {"x": {"$from": "input.x"}}},
	  {"name": "each", "kind": "work", "deps": ["a"], "map": {"$from": "input.items"}, "args": {"v": {"$from": "item"}},
	   "failure_ratio": 0, "priority": 0, "max_attempts": 1, "timeout": 0, "input": false},
	  {"name": "ask", "input": true, "deps": ["a"], "failure_ratio": 1, "timeout": 30, "queue": null, "model": null, "optional": true},
	  {"name": "last", "kind": "work", "deps": ["each", "ask"], "optional": true, "priority": null,
	   "args": {"vs": {"$from": "each.output"}, "ok": {"$from": "ask.output.ok"}}}
	]}`)
	key := strings.Repeat("k", 512) // the longest unique key
	run, err := pgrun.StartRun(b.Ctx, b.Pool, "edges", map[string]any{"x": 1, "items": []int{1, 2, 3}}, key)
	require.NoError(t, err)
	require.Equal(t, "running", run.Status)

	// a: its job carries the node's fields as given.
	claimed := testkit.ClaimN(t, b.Pool, queue63, "w", 10, "1 minute")
	require.Len(t, claimed, 1)
	var prio, maxAttempts int
	var timeout, model string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select priority, max_attempts, timeout::text, model from pgrun.jobs where id = $1`,
		claimed[0].ID).Scan(&prio, &maxAttempts, &timeout, &model))
	require.Equal(t, []any{32767, 2147483647, "366 days", "m"}, []any{prio, maxAttempts, timeout, model})
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.maintain()`)
	require.NoError(t, err, "maintenance beside a node at the edges")
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.complete_jobs(array[$1::bigint], array[$2::int], array['{"a": 1}'::jsonb])`,
		claimed[0].ID, claimed[0].Attempt)
	require.NoError(t, err)

	// each: one child per item, each with the node's fields (timeout 0: none).
	var kids, kidFields int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*), count(*) filter (where priority = 0 and max_attempts = 1 and timeout is null)
		from pgrun.jobs where parent_id is not null`).Scan(&kids, &kidFields))
	require.Equal(t, 3, kids)
	require.Equal(t, 3, kidFields)
	took, err := pgrun.SubmitInput(b.Ctx, b.Pool, run.ID, "ask", map[string]any{"ok": true})
	require.NoError(t, err)
	require.True(t, took)
	testkit.Drive(t, b, func(c testkit.Claimed) testkit.Outcome {
		var a struct {
			V  int   `json:"v"`
			Vs []int `json:"vs"`
		}
		require.NoError(t, json.Unmarshal(c.Args, &a))
		if c.ParentID != nil {
			return testkit.Outcome{Result: a.V * 10}
		}
		return testkit.Outcome{Result: a.Vs}
	})

	r := dagRun(t, b, run.ID)
	require.Equal(t, "succeeded", r.Status, "error: %s", r.Error)
	require.JSONEq(t, `{"last": [10, 20, 30]}`, string(r.Output))
	require.Equal(t, key, *r.UniqueKey)
	var outbox int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.outbox`).Scan(&outbox))
	require.Zero(t, outbox, "no dispatch failed")
}

// start_run's inputs have the bounds of a job's: a unique key is non-empty and at most
// max_key_bytes() (3,000 bytes was a raw 54000 from the index), and a workflow name
// is one define_workflow would take; a refusal is 22023 before anything is written.
func TestBoundsStartRunInputs(t *testing.T) {
	b := testkit.Setup(t)
	testkit.DefineWorkflow(t, b, "gate", `{"nodes": [{"name": "ask", "input": true}]}`)
	refusedBounds(t, b, []string{"unique_key", "3000 bytes", "512"},
		`select pgrun.start_run('gate', '{}', $1)`, strings.Repeat("k", 3000))
	refusedBounds(t, b, []string{"unique_key", "513 bytes", "512"},
		`select pgrun.start_run('gate', '{}', $1)`, strings.Repeat("é", 256)+"k")
	refusedBounds(t, b, []string{"unique_key", "empty"}, `select pgrun.start_run('gate', '{}', '')`)
	refusedBounds(t, b, []string{"workflow name", "'" + strings.Repeat("w", 63) + "...'"},
		`select pgrun.start_run($1)`, strings.Repeat("w", 3000))
	refusedBounds(t, b, []string{"workflow name", "NULL"}, `select pgrun.start_run(null)`)
	refusedBounds(t, b, []string{"workflow name", "'Gate'"}, `select pgrun.start_run('Gate')`)
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.start_run('nope')`)
	require.Equal(t, "P0002", testkit.SQLState(err), "a valid name that is not defined")

	key := strings.Repeat("é", 256) // 512 bytes
	first, err := pgrun.StartRun(b.Ctx, b.Pool, "gate", nil, key)
	require.NoError(t, err)
	again, err := pgrun.StartRun(b.Ctx, b.Pool, "gate", nil, key)
	require.NoError(t, err)
	require.Equal(t, first.ID, again.ID, "the key deduplicates")
}

// submit_input names a node name it cannot find cut to 63 characters, and cancel_run
// refuses a reason over 2,000 bytes (stored on the run and every node it cancels);
// both write nothing, and the run goes on.
func TestBoundsRunNodeNameAndCancelReason(t *testing.T) {
	b := testkit.Setup(t)
	testkit.DefineWorkflow(t, b, "gate", `{"nodes": [{"name": "ask", "input": true}, {"name": "after", "kind": "work", "deps": ["ask"]}]}`)
	run, err := pgrun.StartRun(b.Ctx, b.Pool, "gate", nil, "")
	require.NoError(t, err)
	refusedBounds(t, b, []string{"'" + strings.Repeat("n", 63) + "...'", "is not an input node"},
		`select pgrun.submit_input($1, $2, '{}')`, run.ID, strings.Repeat("n", 3000))
	refusedBounds(t, b, []string{"reason", "2001 bytes", "2000"},
		`select pgrun.cancel_run($1, $2)`, run.ID, strings.Repeat("r", 2001))
	require.Equal(t, "running", dagRun(t, b, run.ID).Status)
	require.Equal(t, pgrun.StatusWaiting, testkit.NodeStates(t, b, run.ID)["ask"])

	r, err := pgrun.CancelRun(b.Ctx, b.Pool, run.ID, strings.Repeat("r", 2000))
	require.NoError(t, err)
	require.Equal(t, "cancelled", r.Status)
}

// A node's args are resolved when it is reached; what they resolve to is held to a
// job's bound on args (max_json_bytes), as a map node's children's are by the enqueue
// they go through. Over it the node fails with class bad_args naming the size, in the
// dispatch that reached it, and the run fails (b is optional, so that m is reached
// too): before, a map child over the bound failed the dispatch itself, for good, and
// the run never ended. Redriving the node resolves its args again (it does not run
// with args it never had).
func TestBoundsDAGResolvedArgsOverTheLimitFailTheNode(t *testing.T) {
	b := testkit.Setup(t)
	testkit.DefineWorkflow(t, b, "twice", `{"nodes": [
	  {"name": "a", "kind": "work"},
	  {"name": "b", "kind": "work", "deps": ["a"], "optional": true,
	   "args": {"x": {"$from": "a.output.blob"}, "y": {"$from": "a.output.blob"}}},
	  {"name": "m", "kind": "work", "deps": ["a"], "map": {"$from": "a.output.items"},
	   "args": {"x": {"$from": "a.output.blob"}, "y": {"$from": "item"}, "z": {"$from": "a.output.blob"}}}
	]}`)
	run, err := pgrun.StartRun(b.Ctx, b.Pool, "twice", nil, "")
	require.NoError(t, err)
	blob := strings.Repeat("x", 600<<10) // one copy fits a job's args, two do not
	a := claimOneClaimed(t, b)
	testkit.Report(t, b, a, testkit.Outcome{Result: map[string]any{"blob": blob, "items": []int{1, 2}}})

	nodes, err := pgrun.RunNodes(b.Ctx, b.Pool, run.ID)
	require.NoError(t, err)
	got := map[string]pgrun.RunNode{}
	for _, n := range nodes {
		got[n.Node] = n
	}
	require.Equal(t, pgrun.StatusFailed, got["b"].Status)
	require.Equal(t, "bad_args", *got["b"].ErrorClass)
	require.Regexp(t, `^args of node b resolved to \d+ bytes, over the limit of 1048576 bytes$`, *got["b"].ErrorMessage)
	require.Equal(t, "bad_args", *got["m"].ErrorClass)
	require.Regexp(t, `^args of element 0 of map node m resolved to \d+ bytes, over the limit of 1048576 bytes$`, *got["m"].ErrorMessage)
	var kids, outbox int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select (select count(*) from pgrun.jobs where parent_id is not null),
		(select count(*) from pgrun.outbox)`).Scan(&kids, &outbox))
	require.Zero(t, kids)
	require.Zero(t, outbox, "the dispatch went through")
	require.Equal(t, "failed", dagRun(t, b, run.ID).Status)

	// Redriven, b is made ready again: its args still resolve over the bound.
	retryJob(t, b, got["b"].JobID)
	require.Equal(t, pgrun.StatusFailed, testkit.JobStatus(t, b, got["b"].JobID))
	var claimable int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs where status = 'queued'`).Scan(&claimable))
	require.Zero(t, claimable, "b is not queued with args it never resolved")
	require.Equal(t, "failed", dagRun(t, b, run.ID).Status)
}

// References that build more than a jsonb can hold (here 270 copies of a 1 MB input,
// over PostgreSQL's 256 MiB) fail the node they are in with class bad_args, in the
// dispatch that reached it, instead of failing that dispatch for good (outbox) and
// leaving the run running. (The backend builds ~256 MiB before it gives up.)
func TestBoundsDAGReferencesPastWhatJSONHoldsFailTheNode(t *testing.T) {
	b := testkit.Setup(t)
	args := map[string]any{}
	for i := range 270 {
		args[fmt.Sprintf("k%d", i)] = map[string]any{"$from": "input.blob"}
	}
	spec, err := json.Marshal(map[string]any{"nodes": []any{
		map[string]any{"name": "a", "kind": "work"},
		map[string]any{"name": "b", "kind": "work", "deps": []string{"a"}, "args": args},
	}})
	require.NoError(t, err)
	testkit.DefineWorkflow(t, b, "amplify", string(spec))
	run, err := pgrun.StartRun(b.Ctx, b.Pool, "amplify", map[string]any{"blob": strings.Repeat("x", 1_040_000)}, "")
	require.NoError(t, err)
	testkit.Report(t, b, claimOneClaimed(t, b), testkit.Outcome{Result: 1})

	var class, message string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select error_class, error_message from pgrun.run_status where run_id = $1 and node = 'b'`,
		run.ID).Scan(&class, &message))
	require.Equal(t, "bad_args", class)
	require.Contains(t, message, "the references of node b resolve to more than a JSON value can hold")
	require.Equal(t, "failed", dagRun(t, b, run.ID).Status)
	var outbox int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.outbox`).Scan(&outbox))
	require.Zero(t, outbox)
}

// A run's output, its leaf nodes' outputs, is held to max_json_bytes in all: within
// it the output is whole; past it the run still succeeds and its output says it was
// left out ({"truncated": true, ...}), where the leaves of a wide workflow could
// otherwise build a value no jsonb holds and fail the run's last dispatch for good.
func TestBoundsRunOutputIsBounded(t *testing.T) {
	b := testkit.Setup(t)
	testkit.DefineWorkflow(t, b, "leaves", `{"nodes": [{"name": "l1", "kind": "work"}, {"name": "l2", "kind": "work"}]}`)
	half := strings.Repeat("x", 600<<10)
	small, err := pgrun.StartRun(b.Ctx, b.Pool, "leaves", nil, "")
	require.NoError(t, err)
	claims := testkit.ClaimN(t, b.Pool, "default", "w", 2, "1 minute")
	require.Len(t, claims, 2)
	for i, c := range claims {
		res := "small"
		if i == 0 {
			res = half // 600 KiB and a word: within the bound together
		}
		testkit.Report(t, b, testkit.Claimed{ID: c.ID, Attempt: int(c.Attempt)}, testkit.Outcome{Result: res})
	}
	r := dagRun(t, b, small.ID)
	require.Equal(t, "succeeded", r.Status)
	var whole map[string]string
	require.NoError(t, json.Unmarshal(r.Output, &whole))
	require.Equal(t, half, whole["l1"])
	require.Equal(t, "small", whole["l2"])

	big, err := pgrun.StartRun(b.Ctx, b.Pool, "leaves", nil, "")
	require.NoError(t, err)
	testkit.Drive(t, b, func(testkit.Claimed) testkit.Outcome { return testkit.Outcome{Result: half} })
	r = dagRun(t, b, big.ID)
	require.Equal(t, "succeeded", r.Status)
	var cut struct {
		Truncated bool   `json:"truncated"`
		Message   string `json:"message"`
	}
	require.NoError(t, json.Unmarshal(r.Output, &cut))
	require.True(t, cut.Truncated, "output: %.200s", r.Output)
	require.Contains(t, cut.Message, "1048576 bytes")
	var results int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs where run_id = $1 and result = to_jsonb($2::text)`,
		big.ID, half).Scan(&results))
	require.Equal(t, 2, results, "each leaf's result stays on its job")
}
