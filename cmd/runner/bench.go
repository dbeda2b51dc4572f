package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/runner"
)

func init() { commands = append(commands, newBenchCmd) }

// benchResult is what `runner bench` measures; --json prints it as is.
type benchResult struct {
	Jobs          int     `json:"jobs"`
	Workers       int     `json:"workers"`
	EnqueuePerSec float64 `json:"enqueue_per_sec"`
	BurnSeconds   float64 `json:"burn_seconds"`
	JobsPerSec    float64 `json:"jobs_per_sec"`
	LatencyJobs   int     `json:"latency_jobs"`
	LatencyP50MS  float64 `json:"latency_p50_ms"`
	LatencyP99MS  float64 `json:"latency_p99_ms"`
}

func newBenchCmd(g *globals) *cobra.Command {
	var (
		jobs, workers, latencyJobs int
		runs, children             int
		keep, asJSON, workflow     bool
		cpuProfile                 string
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure enqueue rate, burn-down throughput and enqueue-to-start latency",
		Long: `bench enqueues --jobs no-op jobs into a fresh queue, starts an in-process runner
with --workers slots and times the burn-down. It then enqueues --latency-jobs jobs
one at a time into the running runner and reports the enqueue-to-start latency
(started_at - created_at, both taken by the database) at p50 and p99.
The bench queue's rows are deleted afterwards unless --keep is given.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return err
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
			}
			if jobs < 1 || workers < 1 || latencyJobs < 0 {
				return fmt.Errorf("--jobs and --workers must be at least 1 and --latency-jobs 0 or more")
			}
			ctx := cmd.Context()
			pool, err := g.connect(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			if err := pgrun.Migrate(ctx, pool); err != nil {
				return err
			}
			if workflow {
				res, err := benchWorkflow(ctx, pool, cmd.ErrOrStderr(), runs, children, workers)
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				if asJSON {
					return json.NewEncoder(out).Encode(res)
				}
				fmt.Fprintf(out, "chain runs      %d runs of a->b->c, %.0f runs/s\n", res.Runs, res.RunsPerSec)
				fmt.Fprintf(out, "done->queued    p50 %.2f ms, p99 %.2f ms (one complete_jobs call that also queues the dependent; a plain one: p50 %.2f ms)\n",
					res.DoneToQueuedP50MS, res.DoneToQueuedP99MS, res.PlainCompleteP50MS)
				fmt.Fprintf(out, "done->started   p50 %.2f ms, p99 %.2f ms (runner picked the dependent up)\n", res.DoneToStartedP50MS, res.DoneToStartedP99MS)
				fmt.Fprintf(out, "fan-out         %d children: defer %.0f ms, all done and parent succeeded in %.2f s (%.0f children/s)\n",
					res.Children, res.FanOutDeferMS, res.FanOutTotalSeconds, res.ChildrenPerSec)
				return nil
			}
			res, err := bench(ctx, pool, cmd.ErrOrStderr(), jobs, workers, latencyJobs, keep)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			}
			fmt.Fprintf(out, "jobs            %d no-op jobs, %d workers\n", res.Jobs, res.Workers)
			fmt.Fprintf(out, "enqueue         %.0f jobs/s\n", res.EnqueuePerSec)
			fmt.Fprintf(out, "burn-down       %.2f s, %.0f jobs/s\n", res.BurnSeconds, res.JobsPerSec)
			if res.LatencyJobs > 0 {
				fmt.Fprintf(out, "start latency   p50 %.2f ms, p99 %.2f ms (%d jobs enqueued one by one)\n",
					res.LatencyP50MS, res.LatencyP99MS, res.LatencyJobs)
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&jobs, "jobs", 100000, "no-op jobs to burn down")
	cmd.Flags().IntVar(&workers, "workers", 500, "concurrent slots of the in-process runner")
	cmd.Flags().IntVar(&latencyJobs, "latency-jobs", 1000, "jobs enqueued one at a time to measure start latency")
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the bench queue's rows")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	cmd.Flags().BoolVar(&workflow, "workflow", false, "benchmark DAG dispatch and fan-out instead")
	cmd.Flags().StringVar(&cpuProfile, "cpuprofile", "", "write the runner's CPU profile to this file (go tool pprof)")
	cmd.Flags().IntVar(&runs, "runs", 500, "with --workflow: chain runs to time")
	cmd.Flags().IntVar(&children, "children", 10000, "with --workflow: children of the fan-out parent")
	return cmd
}

// benchEnqueueChunk is the batch size of the burn-down enqueue.
const benchEnqueueChunk = 5000

func bench(ctx context.Context, pool *pgxpool.Pool, progress io.Writer, jobs, workers, latencyJobs int, keep bool) (*benchResult, error) {
	queue := fmt.Sprintf("bench.%d", time.Now().UnixNano())
	res := &benchResult{Jobs: jobs, Workers: workers, LatencyJobs: latencyJobs}
	if !keep {
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			_, _ = pool.Exec(cctx, `delete from pgrun.job_events where job_id in (select id from pgrun.jobs where queue = $1)`, queue)
			_, _ = pool.Exec(cctx, `delete from pgrun.jobs where queue = $1`, queue)
			_, _ = pool.Exec(cctx, `delete from pgrun.queues where name = $1`, queue)
		}()
	}

	// Start from a vacuumed table so that runs are comparable: dead rows left by
	// earlier runs would otherwise slow this one's claims.
	if _, err := pool.Exec(ctx, `vacuum (analyze) pgrun.jobs`); err != nil {
		return nil, fmt.Errorf("vacuum before bench: %w", err)
	}
	fmt.Fprintf(progress, "bench: enqueueing %d jobs into %s\n", jobs, queue)
	start := time.Now()
	for done := 0; done < jobs; done += benchEnqueueChunk {
		n := min(benchEnqueueChunk, jobs-done)
		specs := make([]pgrun.JobSpec, n)
		for i := range specs {
			specs[i] = pgrun.JobSpec{Kind: runner.KindNoop, Queue: queue}
		}
		if _, err := pgrun.EnqueueMany(ctx, pool, specs); err != nil {
			return nil, err
		}
	}
	res.EnqueuePerSec = float64(jobs) / time.Since(start).Seconds()

	r, stop := startQuietRunner(ctx, pool, map[string]runner.QueueConfig{queue: {Workers: workers}})
	defer stop()

	fmt.Fprintf(progress, "bench: burning down with %d workers\n", workers)
	start = time.Now()
	if err := waitCompleted(ctx, r, int64(jobs)); err != nil {
		return nil, err
	}
	res.BurnSeconds = time.Since(start).Seconds()
	res.JobsPerSec = float64(jobs) / res.BurnSeconds

	if latencyJobs > 0 {
		fmt.Fprintf(progress, "bench: measuring start latency over %d jobs\n", latencyJobs)
		var first int64
		for i := 0; i < latencyJobs; i++ {
			j, err := pgrun.Enqueue(ctx, pool, runner.KindNoop, nil, pgrun.Queue(queue))
			if err != nil {
				return nil, err
			}
			if i == 0 {
				first = j.ID
			}
		}
		if err := waitCompleted(ctx, r, int64(jobs+latencyJobs)); err != nil {
			return nil, err
		}
		err := pool.QueryRow(ctx, `
			select 1000 * percentile_cont(0.5) within group (order by extract(epoch from started_at - created_at)),
			       1000 * percentile_cont(0.99) within group (order by extract(epoch from started_at - created_at))
			from pgrun.jobs where queue = $1 and id >= $2`, queue, first).Scan(&res.LatencyP50MS, &res.LatencyP99MS)
		if err != nil {
			return nil, fmt.Errorf("latency: %w", err)
		}
	}
	return res, nil
}

// waitQueueEmpty polls until queue has no queued or running job.
func waitQueueEmpty(ctx context.Context, pool *pgxpool.Pool, queue string) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		var left int
		if err := pool.QueryRow(ctx, `select count(*) from pgrun.jobs
			where queue = $1 and status in ('queued', 'running')`, queue).Scan(&left); err != nil {
			return err
		}
		if left == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// waitCompleted waits until r has recorded n completions. It asks the runner, not
// the database: counting a large backlog's rows every few milliseconds would cost the
// database a share of the throughput being measured.
func waitCompleted(ctx context.Context, r *runner.Runner, n int64) error {
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for r.Stats().Completed < n {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// startQuietRunner runs an in-process runner with the built-ins and no logs (bench
// and demo print their own progress); stop cancels it and waits for it to finish.
func startQuietRunner(ctx context.Context, pool *pgxpool.Pool, queues map[string]runner.QueueConfig) (*runner.Runner, func()) {
	r := runner.New(pool, runner.Config{Queues: queues, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	runner.HandleBuiltins(r)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	return r, func() { cancel(); <-done }
}
