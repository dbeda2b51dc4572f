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

// genNode is one node of a random graph and what it will do.
type genNode struct {
	name     string
	deps     []int
	optional bool
	skip     bool // skip_if always holds
	fails    bool // its job fails for good
}

// randomDAG makes an acyclic graph of up to 50 nodes: each node depends on up to three
// earlier ones, and some are optional, skipped or doomed to fail.
func randomDAG(rng *rand.Rand) []genNode {
	n := 1 + rng.IntN(50)
	nodes := make([]genNode, n)
	for i := range nodes {
		nodes[i] = genNode{name: fmt.Sprintf("n%d", i), optional: rng.IntN(10) == 0, skip: rng.IntN(10) == 0, fails: rng.IntN(12) == 0}
		for d := 0; d < 3 && i > 0; d++ {
			if rng.IntN(2) == 0 {
				dep := rng.IntN(i)
				dup := false
				for _, x := range nodes[i].deps {
					dup = dup || x == dep
				}
				if !dup {
					nodes[i].deps = append(nodes[i].deps, dep)
				}
			}
		}
	}
	return nodes
}

func (g genNode) spec(nodes []genNode) map[string]any {
	kind := "ok"
	if g.fails {
		kind = "doomed"
	}
	s := map[string]any{"name": g.name, "kind": kind}
	deps := []string{}
	args := map[string]any{"self": map[string]any{"$value": g.name}}
	for _, d := range g.deps {
		deps = append(deps, nodes[d].name)
		args[nodes[d].name] = map[string]any{"$from": nodes[d].name + ".output"}
	}
	s["deps"], s["args"] = deps, args
	if g.optional {
		s["optional"] = true
	}
	if g.skip {
		s["skip_if"] = map[string]any{"$eq": []any{map[string]any{"$value": 1}, 1}}
	}
	return s
}

// expect computes each node's final status and the run's when no required node
// fails; ok is false when a required node that fails is reached (the run fails).
func expect(nodes []genNode) (want map[string]pgrun.JobStatus, ok bool) {
	want = map[string]pgrun.JobStatus{}
	passed := make([]bool, len(nodes))
	for i, g := range nodes {
		reached := true
		for _, d := range g.deps {
			reached = reached && passed[d]
		}
		if !reached {
			return want, false // only a required failure upstream blocks a node
		}
		switch {
		case g.skip:
			want[g.name], passed[i] = pgrun.StatusSkipped, true
		case g.fails:
			want[g.name], passed[i] = pgrun.StatusFailed, g.optional
			if !g.optional {
				return want, false
			}
		default:
			want[g.name], passed[i] = pgrun.StatusSucceeded, true
		}
	}
	return want, true
}

// Random DAGs (up to 50 nodes, random failures, skips and optional nodes): each node
// runs at most once, never before its dependencies are done, and the run ends as the
// graph implies.
func TestRandomDAGsEndAsTheGraphImplies(t *testing.T) {
	b := testkit.Setup(t)
	graphs := 40
	if testing.Short() {
		graphs = 10
	}
	rng := rand.New(rand.NewPCG(42, uint64(time.Now().UnixNano())))
	for gi := range graphs {
		nodes := randomDAG(rng)
		specNodes := make([]any, len(nodes))
		for i, g := range nodes {
			specNodes[i] = g.spec(nodes)
		}
		spec, _ := json.Marshal(map[string]any{"nodes": specNodes})
		name := fmt.Sprintf("g%d", gi)
		testkit.DefineWorkflow(t, b, name, string(spec))
		run, err := pgrun.StartRun(b.Ctx, b.Pool, name, nil, "")
		require.NoError(t, err)
		testkit.Drive(t, b, func(c testkit.Claimed) testkit.Outcome {
			if c.Kind == "doomed" {
				return testkit.Outcome{Fail: "doomed " + *c.Node, Permanent: true}
			}
			return testkit.Outcome{Result: *c.Node}
		})

		r, err := pgrun.GetRun(b.Ctx, b.Pool, run.ID)
		require.NoError(t, err)
		got := testkit.NodeStates(t, b, run.ID)
		want, ok := expect(nodes)
		msg := fmt.Sprintf("graph %d: %s", gi, spec)
		if ok {
			require.Equal(t, "succeeded", r.Status, msg)
			require.Equal(t, want, got, msg)
		} else {
			require.Equal(t, "failed", r.Status, msg)
			for node, st := range got {
				require.True(t, st.Finished(), "%s: node %s left %s", msg, node, st)
			}
		}

		// Never before its dependencies, and at most once.
		var bad []string
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `
			select coalesce(array_agg(distinct j.node), '{}') from pgrun.jobs j
			join pgrun.runs r on r.id = j.run_id
			join pgrun.workflows w on w.name = r.workflow and w.version = r.version
			cross join lateral jsonb_array_elements(w.spec -> 'nodes') n
			cross join lateral jsonb_array_elements_text(n -> 'deps') d(dep)
			join pgrun.jobs dj on dj.run_id = j.run_id and dj.node = d.dep
			where j.run_id = $1 and n ->> 'name' = j.node and j.started_at is not null and j.attempt > 0
			  and (dj.finished_at is null or dj.finished_at > j.started_at)`, run.ID).Scan(&bad))
		require.Empty(t, bad, "%s: nodes started before their deps finished", msg)
		var maxAttempt int
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select coalesce(max(attempt), 0) from pgrun.jobs where run_id = $1`, run.ID).Scan(&maxAttempt))
		require.LessOrEqual(t, maxAttempt, 1, msg)
	}
}
