package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testdb"
	"github.com/pgrun/pgrun/internal/testkit"
)

// chainSpec is a workflow of n nodes in a chain, each passing its predecessor's output
// on, the shape whose checks used to cost O(n^2) and more.
func chainSpec(n int) json.RawMessage {
	nodes := make([]map[string]any, n)
	for i := range nodes {
		nodes[i] = map[string]any{"name": fmt.Sprintf("n%d", i), "kind": "work",
			"args": map[string]any{"x": map[string]any{"$from": "input.x"}}}
		if i > 0 {
			prev := fmt.Sprintf("n%d", i-1)
			nodes[i]["deps"] = []string{prev}
			nodes[i]["args"] = map[string]any{"prev": map[string]any{"$from": prev + ".output"},
				"first": map[string]any{"$from": "n0.output.v"}}
		}
	}
	raw, _ := json.Marshal(map[string]any{"nodes": nodes})
	return raw
}

// A workflow has at most 1,000 nodes: 1,000 is accepted (and runs), 1,001 is refused
// with 22023 naming the count and the limit.
func TestDefineWorkflowNodeLimit(t *testing.T) {
	b := testkit.Setup(t)
	v, err := pgrun.DefineWorkflow(b.Ctx, b.Pool, "big", chainSpec(1000))
	require.NoError(t, err)
	require.Equal(t, 1, v)
	run, err := pgrun.StartRun(b.Ctx, b.Pool, "big", map[string]any{"x": 1}, "")
	require.NoError(t, err)
	require.Equal(t, "running", run.Status)

	_, err = pgrun.DefineWorkflow(b.Ctx, b.Pool, "bigger", chainSpec(1001))
	require.Equal(t, "22023", testkit.SQLState(err))
	pe := testkit.PgError(t, err, "1001 nodes")
	require.Equal(t, "workflow has 1001 nodes, over the limit of 1000 nodes", pe.Message)
	require.NotEmpty(t, pe.Hint)
}

// The spec, a run's input and a submitted input are bounded by max_json_bytes (1 MiB):
// over it they are refused with 22023 naming what was too big, and nothing is written.
func TestWorkflowJSONSizeLimits(t *testing.T) {
	b := testkit.Setup(t)
	big := strings.Repeat("x", 1<<20+1)
	_, err := pgrun.DefineWorkflow(b.Ctx, b.Pool, "huge", map[string]any{"nodes": []any{
		map[string]any{"name": "a", "kind": "work", "args": map[string]any{"blob": map[string]any{"$value": big}}}}})
	require.Equal(t, "22023", testkit.SQLState(err))
	require.ErrorContains(t, err, "workflow spec is")

	testkit.DefineWorkflow(t, b, "gate", `{"nodes": [{"name": "ask", "input": true}]}`)
	_, err = pgrun.StartRun(b.Ctx, b.Pool, "gate", map[string]any{"blob": big}, "")
	require.Equal(t, "22023", testkit.SQLState(err))
	require.ErrorContains(t, err, "run input is")
	var runs int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.runs`).Scan(&runs))
	require.Zero(t, runs)

	run, err := pgrun.StartRun(b.Ctx, b.Pool, "gate", nil, "")
	require.NoError(t, err)
	_, err = pgrun.SubmitInput(b.Ctx, b.Pool, run.ID, "ask", big)
	require.Equal(t, "22023", testkit.SQLState(err))
	require.ErrorContains(t, err, fmt.Sprintf("input for node ask of run %d is", run.ID))
	require.Equal(t, pgrun.StatusWaiting, testkit.NodeStates(t, b, run.ID)["ask"])
}

// A map node fans out to at most 100,000 elements; over that it fails with class
// bad_map naming the count and the limit, and no child is created.
func TestDAGMapFanOutLimit(t *testing.T) {
	b := testkit.Setup(t)
	testkit.DefineWorkflow(t, b, "wide", `{"nodes": [
	  {"name": "each", "kind": "work", "map": {"$from": "input.items"}, "args": {"v": {"$from": "item"}}}
	]}`)
	items := make([]any, 100001) // JSON nulls: small enough for the input limit
	run, err := pgrun.StartRun(b.Ctx, b.Pool, "wide", map[string]any{"items": items}, "")
	require.NoError(t, err)
	nodes, err := pgrun.RunNodes(b.Ctx, b.Pool, run.ID)
	require.NoError(t, err)
	require.Len(t, nodes, 1)
	require.Equal(t, pgrun.StatusFailed, nodes[0].Status)
	require.Equal(t, "bad_map", *nodes[0].ErrorClass)
	require.Equal(t, "map of node each resolved to 100001 elements, over the limit of 100000", *nodes[0].ErrorMessage)
	var kids int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.jobs where parent_id is not null`).Scan(&kids))
	require.Zero(t, kids)
	require.Equal(t, "failed", dagRun(t, b, run.ID).Status)
}

// BenchmarkDefineWorkflow1000 times define_workflow of a 1,000-node chain (the checks
// run every time; the spec is stored once).
func BenchmarkDefineWorkflow1000(b *testing.B) {
	url := testdb.URL(b)
	pool := testdb.PoolFor(b, url)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	spec := chainSpec(1000)
	b.ResetTimer()
	for range b.N {
		if _, err := pgrun.DefineWorkflow(ctx, pool, "chain", spec); err != nil {
			b.Fatal(err)
		}
	}
}
