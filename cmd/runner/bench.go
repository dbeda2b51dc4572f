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
	"github.com/pgrun/pgrun/internal/sqlapi"
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
	// FirstTenthPerSec and LastTenthPerSec are the burn-down's rate over its first and
	// last 10% of jobs: a claim path that slows as the backlog is consumed shows here.
	FirstTenthPerSec float64 `json:"first_tenth_per_sec"`
	LastTenthPerSec  float64 `json:"last_tenth_per_sec"`
	Runners          int     `json:"runners"`
	// AvgClaim and AvgComplete are the jobs per claim_jobs and complete_jobs call
	// during the burn-down: how well the runner amortised its round trips.
	AvgClaim    float64 `json:"avg_claim"`
	AvgComplete float64 `json:"avg_complete"`
	// Checkpoints is how many checkpoints the server started during the enqueue and
	// the burn-down (-1: not known); the run starts from a fresh one.
	Checkpoints int64 `json:"checkpoints"`
}

// benchOptions are the knobs of a burn-down bench.
type benchOptions struct {
	Jobs, Workers, LatencyJobs int
	// Runners is how many runners share the queue, each with its own connection pool
	// and worker id (as separate processes would), Workers slots each.
	Runners int
	Keep    bool
	// Ephemeral makes the bench queue delete jobs as they succeed (set_queue).
	Ephemeral bool
	// NoProgress turns the progress bars off (--no-progress); they are drawn only
	// on a terminal anyway.
	NoProgress bool
}

func newBenchCmd(g *globals) *cobra.Command {
	var (
		jobs, workers, latencyJobs int
		runs, children, runners    int
		rate                       int
		duration, warmup           time.Duration
		keep, asJSON, workflow     bool
		ephemeral, noBar           bool
		cpuProfile                 string
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure enqueue rate, burn-down throughput and enqueue-to-start latency",
		Long: `bench enqueues --jobs no-op jobs into a fresh queue, starts an in-process runner
with --workers slots and times the burn-down. It then enqueues --latency-jobs jobs
one at a time into the running runner and reports the enqueue-to-start latency
(started_at - created_at, both taken by the database) at p50 and p99. The
burn-down's rate over its first and last 10% of jobs is printed too: a claim path
that slows as the backlog is consumed shows there. --runners N shares the queue
between N runners, each with its own pool and worker id, as N processes would.

With --rate, bench measures a steady state instead: it enqueues --rate jobs/s for
--duration while the runner works, and reports the rates achieved and the
enqueue-to-start latency at p50, p99 and p999. It enqueues at the same rate for
--warmup first and leaves those jobs out: a runner's first calls, in new sessions,
wait for connections, compiled functions and plans, as a runner in service does not.

Both start from a vacuumed jobs table and, when the role may (superuser or
pg_checkpoint), a fresh checkpoint, and report how many checkpoints started while
they were timed: a checkpoint inside a run stretches its latency tail. Run bench on
a server you may load this way, not on a production one.
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
			if jobs < 1 || workers < 1 || latencyJobs < 0 || runners < 1 || runners > 64 {
				return fmt.Errorf("--jobs and --workers must be at least 1, --latency-jobs 0 or more, --runners 1 to 64")
			}
			if rate < 0 || rate > 1_000_000 || duration <= 0 || warmup < 0 || warmup > time.Hour {
				return fmt.Errorf("--rate must be 0 to 1000000 jobs/s, --duration positive and --warmup 0 to 1h")
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
			if rate > 0 {
				res, err := benchSteady(ctx, pool, g.connect, cmd.ErrOrStderr(),
					steadyOptions{Rate: rate, Duration: duration, Warmup: warmup, Workers: workers})
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				if asJSON {
					return json.NewEncoder(out).Encode(res)
				}
				fmt.Fprintf(out, "steady state    %d jobs/s asked for %s, %.0f jobs/s enqueued, %.0f jobs/s started, %d workers\n",
					res.Rate, duration, res.EnqueuedPerSec, res.StartedPerSec, res.Workers)
				fmt.Fprintf(out, "start latency   p50 %.2f ms, p99 %.2f ms, p999 %.2f ms (%d jobs)\n",
					res.P50MS, res.P99MS, res.P999MS, res.Jobs)
				fmt.Fprintf(out, "warm-up         %s not counted above (p99 over the whole run, warm-up included: %.2f ms)\n",
					warmup, res.WholeRunP99MS)
				fmt.Fprintf(out, "enqueue calls   p50 %.2f ms, p99 %.2f ms (the bench's own statements, commit included: part of the latency above)\n",
					res.EnqueueP50MS, res.EnqueueP99MS)
				fmt.Fprintf(out, "commit to start p50 %.2f ms, p99 %.2f ms, p999 %.2f ms (from each enqueue's acknowledged commit: the runner's part)\n",
					res.CommitP50MS, res.CommitP99MS, res.CommitP999MS)
				fmt.Fprintf(out, "round trips     %.0f jobs per claim, %.0f per completion call\n", res.AvgClaim, res.AvgComplete)
				if res.HostCPUBusy >= 0 {
					fmt.Fprintf(out, "host CPU        %.0f%% busy while measured (the enqueuer and the runner, and the server if it runs here)\n",
						100*res.HostCPUBusy)
				}
				fmt.Fprintln(out, checkpointNote(res.Checkpoints))
				return nil
			}
			res, err := bench(ctx, pool, cmd.ErrOrStderr(), benchOptions{Jobs: jobs, Workers: workers,
				LatencyJobs: latencyJobs, Runners: runners, Keep: keep, Ephemeral: ephemeral, NoProgress: noBar}, g.connect)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			}
			fmt.Fprintf(out, "jobs            %d no-op jobs, %d runner(s) of %d workers\n", res.Jobs, res.Runners, res.Workers)
			fmt.Fprintf(out, "enqueue         %.0f jobs/s\n", res.EnqueuePerSec)
			fmt.Fprintf(out, "burn-down       %.2f s, %.0f jobs/s (first 10%%: %.0f jobs/s, last 10%%: %.0f jobs/s)\n",
				res.BurnSeconds, res.JobsPerSec, res.FirstTenthPerSec, res.LastTenthPerSec)
			fmt.Fprintf(out, "round trips     %.0f jobs per claim, %.0f per completion call\n", res.AvgClaim, res.AvgComplete)
			if res.LatencyJobs > 0 {
				fmt.Fprintf(out, "start latency   p50 %.2f ms, p99 %.2f ms (%d jobs enqueued one by one)\n",
					res.LatencyP50MS, res.LatencyP99MS, res.LatencyJobs)
			}
			fmt.Fprintln(out, checkpointNote(res.Checkpoints))
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
	cmd.Flags().BoolVar(&ephemeral, "ephemeral", false, "make the bench queue ephemeral: jobs are deleted as they succeed")
	cmd.Flags().IntVar(&runners, "runners", 1, "runners sharing the queue, each with its own pool and worker id")
	cmd.Flags().IntVar(&rate, "rate", 0, "steady state: enqueue this many jobs/s while the runner works, instead of a burn-down")
	cmd.Flags().DurationVar(&duration, "duration", 10*time.Second, "with --rate: how long to enqueue and measure")
	cmd.Flags().DurationVar(&warmup, "warmup", 2*time.Second, "with --rate: how long to enqueue first without measuring (a new runner's first calls)")
	addNoProgressFlag(cmd, &noBar)
	return cmd
}

// benchEnqueueChunk is the batch size of the burn-down enqueue.
const benchEnqueueChunk = 5000

func bench(ctx context.Context, pool *pgxpool.Pool, progress io.Writer, o benchOptions,
	connect func(context.Context) (*pgxpool.Pool, error)) (*benchResult, error) {
	jobs, workers, latencyJobs := o.Jobs, o.Workers, o.LatencyJobs
	if o.Ephemeral {
		latencyJobs = 0 // measured from the rows, which an ephemeral queue deletes
	}
	queue := fmt.Sprintf("bench.%d", time.Now().UnixNano())
	res := &benchResult{Jobs: jobs, Workers: workers, LatencyJobs: latencyJobs, Runners: max(o.Runners, 1)}
	client, err := newClient(pool)
	if err != nil {
		return nil, err
	}
	if !o.Keep {
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			_, _ = pool.Exec(cctx, sqlapi.BenchDeleteQueueEvents, queue)
			_, _ = pool.Exec(cctx, sqlapi.BenchDeleteQueueJobs, queue)
			_, _ = pool.Exec(cctx, sqlapi.BenchDeleteQueue, queue)
		}()
	}

	// Start from a vacuumed table so that runs are comparable: dead rows left by
	// earlier runs would otherwise slow this one's claims. And from a fresh
	// checkpoint (bench_checkpoint.go).
	if _, err := pool.Exec(ctx, sqlapi.BenchVacuumJobs); err != nil {
		return nil, fmt.Errorf("vacuum before bench: %w", err)
	}
	checkpoints, err := freshCheckpoint(ctx, pool, progress)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(progress, "bench: enqueueing %d jobs into %s\n", jobs, queue)
	start := time.Now()
	bar := newBar(progress, "enqueue", jobs, o.NoProgress)
	for done := 0; done < jobs; done += benchEnqueueChunk {
		n := min(benchEnqueueChunk, jobs-done)
		specs := make([]pgrun.JobSpec, n)
		for i := range specs {
			specs[i] = pgrun.JobSpec{Kind: runner.KindNoop, Queue: queue}
		}
		if _, err := client.EnqueueMany(ctx, specs); err != nil {
			return nil, err
		}
		bar.Set(int64(done + n))
	}
	bar.Done()
	res.EnqueuePerSec = float64(jobs) / time.Since(start).Seconds()
	if o.Ephemeral {
		if _, err := client.SetQueue(ctx, queue, pgrun.QueueSettings{Ephemeral: new(true)}); err != nil {
			return nil, err
		}
	}

	var fleet []*runner.Runner
	for i := range res.Runners {
		p := pool
		if i > 0 { // the first runner shares the bench's pool; the others get their own
			var err error
			if p, err = connect(ctx); err != nil {
				return nil, err
			}
			defer p.Close()
		}
		r, stop, err := startQuietRunner(ctx, p, map[string]runner.QueueConfig{queue: {Workers: workers}})
		if err != nil {
			return nil, err
		}
		defer stop()
		fleet = append(fleet, r)
	}
	completed := func() int64 {
		var n int64
		for _, r := range fleet {
			n += r.Stats().Completed
		}
		return n
	}

	fmt.Fprintf(progress, "bench: burning down with %d runner(s) of %d workers\n", res.Runners, workers)
	start = time.Now()
	tenth := int64(max(jobs/10, 1))
	bar = newBar(progress, "burn-down", jobs, o.NoProgress)
	marks, err := waitCompleted(ctx, barred(completed, bar), int64(jobs), tenth, int64(jobs)-tenth)
	if err != nil {
		return nil, err
	}
	bar.Done()
	res.BurnSeconds = time.Since(start).Seconds()
	res.JobsPerSec = float64(jobs) / res.BurnSeconds
	end := start.Add(time.Duration(res.BurnSeconds * float64(time.Second)))
	var st runner.Stats
	for _, r := range fleet {
		s := r.Stats()
		st.Claimed, st.ClaimCalls = st.Claimed+s.Claimed, st.ClaimCalls+s.ClaimCalls
		st.Completed, st.CompleteCalls = st.Completed+s.Completed, st.CompleteCalls+s.CompleteCalls
	}
	res.AvgClaim = float64(st.Claimed) / float64(max(st.ClaimCalls, 1))
	res.AvgComplete = float64(st.Completed) / float64(max(st.CompleteCalls, 1))
	res.FirstTenthPerSec = float64(tenth) / marks[0].Sub(start).Seconds()
	res.LastTenthPerSec = float64(tenth) / end.Sub(marks[1]).Seconds()
	if res.Checkpoints, err = checkpoints.since(ctx); err != nil {
		return nil, err
	}

	if latencyJobs > 0 {
		fmt.Fprintf(progress, "bench: measuring start latency over %d jobs\n", latencyJobs)
		bar = newBar(progress, "latency", latencyJobs, o.NoProgress)
		var first int64
		for i := 0; i < latencyJobs; i++ {
			j, err := client.Enqueue(ctx, runner.KindNoop, nil, pgrun.Queue(queue))
			if err != nil {
				return nil, err
			}
			if i == 0 {
				first = j.ID
			}
			bar.Set(int64(i + 1))
		}
		if _, err := waitCompleted(ctx, completed, int64(jobs+latencyJobs)); err != nil {
			return nil, err
		}
		bar.Done()
		l, err := startLatency(ctx, pool, queue, first)
		if err != nil {
			return nil, err
		}
		res.LatencyP50MS, res.LatencyP99MS = l.P50MS, l.P99MS
	}
	return res, nil
}

// latency is the enqueue-to-start latency (started_at - created_at, both the
// database's clock) of a bench's jobs, and the rate at which they started.
type latency struct {
	P50MS, P99MS, P999MS float64
	StartedPerSec        float64
}

// startLatency reads the latency of queue's jobs from id fromID on.
func startLatency(ctx context.Context, pool *pgxpool.Pool, queue string, fromID int64) (latency, error) {
	var l latency
	err := pool.QueryRow(ctx, sqlapi.BenchStartLatency, queue, fromID).Scan(&l.P50MS, &l.P99MS, &l.P999MS, &l.StartedPerSec)
	if err != nil {
		return l, fmt.Errorf("latency: %w", err)
	}
	return l, nil
}

// waitCompleted waits until completed() reaches n and returns when it passed each
// of marks. It asks the runners, not the database: counting a large backlog's rows
// every few milliseconds would cost the database a share of the throughput being
// measured.
func waitCompleted(ctx context.Context, completed func() int64, n int64, marks ...int64) ([]time.Time, error) {
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	passed := make([]time.Time, len(marks))
	for {
		c := completed()
		for i, m := range marks {
			if passed[i].IsZero() && c >= m {
				passed[i] = time.Now()
			}
		}
		if c >= n {
			return passed, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// startQuietRunner runs an in-process runner with the example handlers and no logs
// (bench and demo print their own progress); stop cancels it and waits for it to
// finish.
func startQuietRunner(ctx context.Context, pool *pgxpool.Pool, queues map[string]runner.QueueConfig) (*runner.Runner, func(), error) {
	r, err := runner.New(pool, runner.Config{Queues: queues, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, nil, err
	}
	if err := runner.RegisterExamples(r); err != nil {
		return nil, nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	return r, func() { cancel(); <-done }, nil
}
