package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/sqlapi"
	"github.com/pgrun/pgrun/runner"
)

// workflowBenchResult is what `runner bench --workflow` measures.
type workflowBenchResult struct {
	Runs               int     `json:"runs"`
	DoneToQueuedP50MS  float64 `json:"done_to_queued_p50_ms"`
	DoneToQueuedP99MS  float64 `json:"done_to_queued_p99_ms"`
	PlainCompleteP50MS float64 `json:"plain_complete_p50_ms"`
	DoneToStartedP50MS float64 `json:"done_to_started_p50_ms"`
	DoneToStartedP99MS float64 `json:"done_to_started_p99_ms"`
	RunsPerSec         float64 `json:"runs_per_sec"`
	Children           int     `json:"children"`
	FanOutDeferMS      float64 `json:"fan_out_defer_ms"`
	FanOutTotalSeconds float64 `json:"fan_out_total_seconds"`
	ChildrenPerSec     float64 `json:"children_per_sec"`
	FanInMS            float64 `json:"fan_in_ms"`
	FanInPerSec        float64 `json:"fan_in_children_per_sec"`
}

// benchWorkflow measures DAG dispatch and fan-out with an in-process runner:
//   - single completions of a chain node, timed from Go: the call returns once the
//     same transaction has queued the dependent (node-done to dependent-queued);
//   - runs of a three-node chain (a -> b -> c) through the runner: from a node's
//     completion to its dependent being started;
//   - one coordinator deferring to `children` no-op children: the defer itself; from
//     the defer's start to the parent's success (children/s over both); and the
//     fan-in alone, from the defer's commit to the parent's success (both instants
//     taken by the database), printed to progress as well.
func benchWorkflow(ctx context.Context, pool *pgxpool.Pool, progress io.Writer, runs, children, workers int) (*workflowBenchResult, error) {
	res := &workflowBenchResult{Runs: runs, Children: children}
	client, err := newClient(pool)
	if err != nil {
		return nil, err
	}
	queue := fmt.Sprintf("wfbench.%d", time.Now().UnixNano())
	spec := map[string]any{"nodes": []any{
		map[string]any{"name": "a", "kind": runner.KindNoop, "queue": queue},
		map[string]any{"name": "b", "kind": runner.KindNoop, "queue": queue, "deps": []string{"a"}},
		map[string]any{"name": "c", "kind": runner.KindNoop, "queue": queue, "deps": []string{"b"}},
	}}
	name := "bench-chain-" + queue[len("wfbench."):]
	if _, err := client.DefineWorkflow(ctx, name, spec); err != nil {
		return nil, err
	}
	if err := probeDispatch(ctx, client, name, queue, res); err != nil {
		return nil, err
	}
	_, stop, err := startQuietRunner(ctx, pool, map[string]runner.QueueConfig{queue: {Workers: workers}})
	if err != nil {
		return nil, err
	}
	defer stop()

	fmt.Fprintf(progress, "bench: %d runs of a 3-node chain\n", runs)
	start := time.Now()
	var first int64
	for i := 0; i < runs; i++ {
		r, err := client.StartRun(ctx, name, nil, "")
		if err != nil {
			return nil, err
		}
		if i == 0 {
			first = r.ID
		}
	}
	if err := waitRunsDone(ctx, pool, first); err != nil {
		return nil, err
	}
	res.RunsPerSec = float64(runs) / time.Since(start).Seconds()
	// run_at of a dependent is set when it is queued, in the transaction that
	// finished its predecessor; finished_at is that transaction's start.
	// finished_at of a node is the start of the transaction that finished it.
	if err := pool.QueryRow(ctx, sqlapi.BenchChainDoneToStarted, first).Scan(&res.DoneToStartedP50MS, &res.DoneToStartedP99MS); err != nil {
		return nil, err
	}

	fmt.Fprintf(progress, "bench: fan-out of %d children\n", children)
	specs := make([]pgrun.JobSpec, children)
	for i := range specs {
		specs[i] = pgrun.JobSpec{Kind: runner.KindNoop, Queue: queue}
	}
	childJSON, err := json.Marshal(specs)
	if err != nil {
		return nil, err
	}
	parent, err := client.Enqueue(ctx, "bench.coordinator", nil, pgrun.Queue(queue+".coord"))
	if err != nil {
		return nil, err
	}
	var id int64
	var attempt int
	if err := pool.QueryRow(ctx, sqlapi.BenchClaimOne, queue+".coord", "bench").Scan(&id, &attempt); err != nil {
		return nil, err
	}
	start = time.Now()
	if _, err := pool.Exec(ctx, sqlapi.BenchDeferJob, id, attempt, childJSON); err != nil {
		return nil, err
	}
	res.FanOutDeferMS = float64(time.Since(start).Microseconds()) / 1000
	var committed time.Time
	if err := pool.QueryRow(ctx, sqlapi.BenchClock).Scan(&committed); err != nil {
		return nil, err
	}
	if err := waitJobDone(ctx, client, parent.ID); err != nil {
		return nil, err
	}
	res.FanOutTotalSeconds = time.Since(start).Seconds()
	res.ChildrenPerSec = float64(children) / res.FanOutTotalSeconds
	if err := pool.QueryRow(ctx, sqlapi.BenchFinishedSinceMS, parent.ID, committed).Scan(&res.FanInMS); err != nil {
		return nil, err
	}
	res.FanInPerSec = float64(children) / (res.FanInMS / 1000)
	fmt.Fprintf(progress, "bench: fan-in of %d children: %.0f ms from the defer's commit to the parent's success (%.0f children/s)\n",
		children, res.FanInMS, res.FanInPerSec)
	return res, nil
}

// dispatchProbes is how many single completions probeDispatch times.
const dispatchProbes = 300

// probeDispatch times, from Go, single complete_jobs calls that finish node a of a
// chain run: the call returns after the same transaction has queued node b, so its
// duration bounds node-done to dependent-queued. The same call on a plain job gives
// the baseline.
func probeDispatch(ctx context.Context, client *pgrun.Client, workflow, queue string, res *workflowBenchResult) error {
	pool := client.Pool()
	probeQueue := queue + ".probe"
	spec := map[string]any{"nodes": []any{
		map[string]any{"name": "a", "kind": runner.KindNoop, "queue": probeQueue},
		map[string]any{"name": "b", "kind": runner.KindNoop, "queue": probeQueue + ".next", "deps": []string{"a"}},
	}}
	if _, err := client.DefineWorkflow(ctx, workflow+"-probe", spec); err != nil {
		return err
	}
	timeOne := func() (time.Duration, error) {
		var id int64
		var attempt int32
		if err := pool.QueryRow(ctx, sqlapi.BenchClaimOne, probeQueue, "probe").Scan(&id, &attempt); err != nil {
			return 0, err
		}
		start := time.Now()
		_, err := pool.Exec(ctx, sqlapi.BenchCompleteJobs, []int64{id}, []int32{attempt})
		return time.Since(start), err
	}
	dispatch := make([]time.Duration, 0, dispatchProbes)
	plain := make([]time.Duration, 0, dispatchProbes)
	for i := 0; i < dispatchProbes; i++ {
		if _, err := client.StartRun(ctx, workflow+"-probe", nil, ""); err != nil {
			return err
		}
		d, err := timeOne()
		if err != nil {
			return err
		}
		dispatch = append(dispatch, d)
		if _, err := client.Enqueue(ctx, runner.KindNoop, nil, pgrun.Queue(probeQueue)); err != nil {
			return err
		}
		if d, err = timeOne(); err != nil {
			return err
		}
		plain = append(plain, d)
	}
	res.DoneToQueuedP50MS, res.DoneToQueuedP99MS = percentileMS(dispatch, 0.5), percentileMS(dispatch, 0.99)
	res.PlainCompleteP50MS = percentileMS(plain, 0.5)
	return nil
}

// percentileMS is the p-th percentile of ds in milliseconds.
func percentileMS(ds []time.Duration, p float64) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[min(len(s)-1, int(p*float64(len(s))))].Microseconds()) / 1000
}

func waitRunsDone(ctx context.Context, pool *pgxpool.Pool, first int64) error {
	return poll(ctx, func() (bool, error) {
		var left int
		err := pool.QueryRow(ctx, sqlapi.BenchRunsRunning, first).Scan(&left)
		return left == 0, err
	})
}

func waitJobDone(ctx context.Context, client *pgrun.Client, id int64) error {
	return poll(ctx, func() (bool, error) {
		j, err := client.GetJob(ctx, id)
		if err != nil {
			return false, err
		}
		if j.Status.Finished() && j.Status != pgrun.StatusSucceeded {
			return false, fmt.Errorf("job %d ended %s", id, j.Status)
		}
		return j.Status == pgrun.StatusSucceeded, nil
	})
}

// poll calls done every 20 ms until it reports true, fails, or ctx ends.
func poll(ctx context.Context, done func() (bool, error)) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		ok, err := done()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
