package tests

import (
	"encoding/json"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// {"$filter": [ARRAY, CONDITION]} keeps the elements for which the condition holds, in
// order, with item bound to the element; the condition reads the run's input and
// upstream outputs too. As a map it fans out over the kept elements only, and inside a
// map node's args item in the condition is the element tested, in the array the map
// element.
func TestDAGFilterSelectsElements(t *testing.T) {
	b := testkit.Setup(t)
	testkit.DefineWorkflow(t, b, "filter", `{"nodes": [
	  {"name": "fetch", "kind": "fetch"},
	  {"name": "pick", "kind": "pick", "deps": ["fetch"],
	   "args": {"docs": {"$filter": [{"$from": "fetch.output.docs"},
	                                 {"$eq": [{"$from": "item.lang"}, {"$from": "input.lang"}]}]},
	            "none": {"$filter": [{"$from": "fetch.output.missing"}, {"$exists": "item"}]},
	            "literal": {"$value": {"$filter": "not an operator here"}}}},
	  {"name": "each", "kind": "each", "deps": ["fetch"],
	   "map": {"$filter": [{"$from": "fetch.output.groups"}, {"$not": {"$eq": [{"$from": "item.skip"}, true]}}]},
	   "args": {"group": {"$from": "item.name"},
	            "big": {"$filter": [{"$from": "item.sizes"}, {"$or": [{"$eq": [{"$from": "item"}, 10]}, {"$eq": [{"$from": "item"}, 20]}]}]}}}
	]}`)
	run, err := pgrun.StartRun(b.Ctx, b.Pool, "filter", map[string]any{"lang": "en"}, "")
	require.NoError(t, err)
	fetch := dagClaim(t, b, "default")
	testkit.Report(t, b, fetch, testkit.Outcome{Result: map[string]any{
		"docs": []map[string]any{{"id": 1, "lang": "en"}, {"id": 2, "lang": "fr"}, {"id": 3, "lang": "en"}, {"id": 4}},
		"groups": []map[string]any{
			{"name": "g1", "sizes": []int{10, 15, 20}},
			{"name": "g2", "skip": true, "sizes": []int{10}},
			{"name": "g3", "sizes": []int{5}},
		},
	}})

	args := map[string]json.RawMessage{}
	var kinds []string
	for _, c := range testkit.Drive(t, b, func(c testkit.Claimed) testkit.Outcome { return testkit.Outcome{Result: c.Kind} }) {
		if c.Kind == "each" {
			var a struct{ Group string }
			require.NoError(t, json.Unmarshal(c.Args, &a))
			args[a.Group] = c.Args
		} else {
			args[c.Kind] = c.Args
		}
		kinds = append(kinds, c.Kind)
	}
	sort.Strings(kinds)
	require.Equal(t, []string{"each", "each", "pick"}, kinds, "g2 is filtered out of the map")
	require.JSONEq(t, `{"docs": [{"id": 1, "lang": "en"}, {"id": 3, "lang": "en"}], "none": null,
		"literal": {"$filter": "not an operator here"}}`, string(args["pick"]))
	require.JSONEq(t, `{"group": "g1", "big": [10, 20]}`, string(args["g1"]))
	require.JSONEq(t, `{"group": "g3", "big": []}`, string(args["g3"]))
	require.Equal(t, "succeeded", dagRun(t, b, run.ID).Status)
}

// Any key starting with $ that is not an operator where it stands is refused at
// define_workflow (22023, naming the node and the operator, with a HINT listing the
// known ones) instead of being passed on as literal JSON; $filter shapes are checked;
// item inside a $filter condition is allowed in any node.
//
// Was a BUG (fixed): {"$form": "input.url"} (a typo) reached the job as that object.
func TestDefineWorkflowRefusesUnknownOperators(t *testing.T) {
	b := testkit.Setup(t)
	for spec, want := range map[string]string{
		`{"nodes": [{"name": "a", "kind": "x", "args": {"url": {"$form": "input.url"}}}]}`:                                                                                           `args of node a uses unknown operator '$form'`,
		`{"nodes": [{"name": "a", "kind": "x", "args": {"l": [1, {"deep": {"$fro": "input"}}]}}]}`:                                                                                   `args of node a uses unknown operator '$fro'`,
		`{"nodes": [{"name": "a", "kind": "x", "args": {"v": {"$eq": [1, 1]}}}]}`:                                                                                                    `args of node a uses condition operator '$eq' where a value goes`,
		`{"nodes": [{"name": "a", "kind": "x", "args": {"v": {"$from": "input.x", "y": 1}}}]}`:                                                                                       `args of node a: $from must be the only key of its object`,
		`{"nodes": [{"name": "a", "kind": "x", "args": {"v": {"$from": 7}}}]}`:                                                                                                       `args of node a: $from takes a path string`,
		`{"nodes": [{"name": "a", "kind": "x", "skip_if": {"$eq": [{"$frm": "input.x"}, 1]}}]}`:                                                                                      `skip_if of node a uses unknown operator '$frm'`,
		`{"nodes": [{"name": "a", "kind": "x", "skip_if": {"$and": [{"$gte": [1, 2]}]}}]}`:                                                                                           `skip_if of node a uses unknown operator '$gte'`,
		`{"nodes": [{"name": "a", "kind": "x", "args": {"v": {"$filter": [{"$from": "input.xs"}]}}}]}`:                                                                               `args of node a: $filter takes [ARRAY, CONDITION]`,
		`{"nodes": [{"name": "a", "kind": "x", "args": {"v": {"$filter": [{"$from": "input.xs"}, {"$lt": 1}]}}}]}`:                                                                   `args of node a uses unknown operator '$lt'`,
		`{"nodes": [{"name": "a", "kind": "x", "args": {"v": {"$filter": [{"$from": "input.xs"}, true]}}}]}`:                                                                         `args of node a is not a condition`,
		`{"nodes": [{"name": "a", "kind": "x", "args": {"v": {"$filter": [{"$from": "item.xs"}, {"$exists": "item"}]}}}]}`:                                                           `node a refers to 'item.xs' but is not a map node`,
		`{"nodes": [{"name": "a", "kind": "x"}, {"name": "m", "kind": "x", "deps": ["a"], "map": {"$filter": [{"$from": "a.output"}, {"$eq": [{"$from": "item"}, {"$woo": 1}]}]}}]}`: `map of node m uses unknown operator '$woo'`,
		`{"nodes": [{"name": "a", "kind": "x"}, {"name": "m", "kind": "x", "deps": ["a"], "map": {"$from": "item"}}]}`:                                                               `node m refers to 'item' in its map, where there is no item`,
		`{"nodes": [{"name": "a", "kind": "x"}, {"name": "m", "kind": "x", "deps": ["a"], "map": {"$oops": "a.output"}}]}`:                                                           `map of node m must be a reference`,
	} {
		_, err := pgrun.DefineWorkflow(b.Ctx, b.Pool, "bad", json.RawMessage(spec))
		require.Equal(t, "22023", testkit.SQLState(err), spec)
		require.ErrorContains(t, err, want, spec)
		require.NotEmpty(t, testkit.PgError(t, err, spec).Hint, spec)
	}
	var n int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.workflows`).Scan(&n))
	require.Zero(t, n, "nothing stored")

	// The hint lists the known operators.
	_, err := pgrun.DefineWorkflow(b.Ctx, b.Pool, "bad", json.RawMessage(`{"nodes": [{"name": "a", "kind": "x", "args": {"u": {"$form": "input.u"}}}]}`))
	pe := testkit.PgError(t, err, "unknown operator")
	for _, op := range []string{"$from", "$value", "$filter", "$eq", "$ne", "$not", "$and", "$or", "$exists"} {
		require.Contains(t, pe.Hint, op)
	}

	// Accepted: item in a $filter condition of a plain node, literals in $value, and
	// references to an indirect upstream node inside a filter.
	for _, spec := range []string{
		`{"nodes": [{"name": "a", "kind": "x", "args": {"v": {"$filter": [{"$from": "input.xs"}, {"$eq": [{"$from": "item.k"}, 1]}]}}}]}`,
		`{"nodes": [{"name": "a", "kind": "x", "args": {"v": {"$value": {"$anything": [1, {"$from": "nowhere"}]}}}}]}`,
		`{"nodes": [{"name": "a", "kind": "x"}, {"name": "b", "kind": "x", "deps": ["a"]},
		  {"name": "c", "kind": "x", "deps": ["b"], "skip_if": {"$ne": [{"$filter": [{"$from": "a.output"}, {"$exists": "item.ok"}]}, []]}}]}`,
	} {
		_, err := pgrun.DefineWorkflow(b.Ctx, b.Pool, "good", json.RawMessage(spec))
		require.NoError(t, err, spec)
	}
}
