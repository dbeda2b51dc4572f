package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/sqlapi"
	"github.com/pgrun/pgrun/runner"
)

// steadyResult is what `runner bench --rate` measures.
type steadyResult struct {
	Rate    int `json:"rate"`
	Workers int `json:"workers"`
	// WarmupS is how long the bench enqueued at the rate before it began to count
	// (steadyOptions.Warmup); Jobs and every figure below but WholeRunP99MS leave the
	// warm-up's jobs out.
	WarmupS        float64 `json:"warmup_s"`
	Jobs           int     `json:"jobs"`
	EnqueuedPerSec float64 `json:"enqueued_per_sec"`
	StartedPerSec  float64 `json:"started_per_sec"`
	P50MS          float64 `json:"p50_ms"`
	P99MS          float64 `json:"p99_ms"`
	P999MS         float64 `json:"p999_ms"`
	// WholeRunP99MS is the start latency's p99 over every job, the warm-up's included.
	WholeRunP99MS float64 `json:"whole_run_p99_ms"`
	// EnqueueP50MS and EnqueueP99MS time the bench's own enqueue statements, commit
	// included. A job's created_at is its statement's start and it is invisible until
	// the commit, so this is a part of the start latency no runner can remove.
	EnqueueP50MS float64 `json:"enqueue_p50_ms"`
	EnqueueP99MS float64 `json:"enqueue_p99_ms"`
	// CommitP50MS, CommitP99MS and CommitP999MS are commit-to-start latency: from the
	// moment the bench's enqueue statement returned (its commit acknowledged, the
	// jobs visible) to started_at, both on this host's clock, 0 for a job the runner
	// started before the acknowledgement arrived. It is the part of the start latency
	// that is the runner's and the claim's, without the enqueuer's own commit.
	CommitP50MS  float64 `json:"commit_p50_ms"`
	CommitP99MS  float64 `json:"commit_p99_ms"`
	CommitP999MS float64 `json:"commit_p999_ms"`
	// AvgClaim and AvgComplete are the jobs per claim_jobs and complete_jobs call:
	// in a steady state each notification brings a claim of what one enqueue
	// statement added, so they are far below a burn-down's, and so is the work the
	// calls share.
	AvgClaim    float64 `json:"avg_claim"`
	AvgComplete float64 `json:"avg_complete"`
	// HostCPUBusy is the fraction of this host's processor time that was busy while
	// the measured part enqueued (bench_cpu.go), -1 where it is not known.
	HostCPUBusy float64 `json:"host_cpu_busy"`
	// Checkpoints is how many checkpoints the server started during the run (-1: not
	// known); the run starts from a fresh one (bench_checkpoint.go).
	Checkpoints int64 `json:"checkpoints"`
}

// steadyTick is how often the steady-state bench enqueues: every tick, one statement
// with the jobs due by then, as a service taking requests would.
const steadyTick = 5 * time.Millisecond

// steadyOptions is what `runner bench --rate` is asked for.
type steadyOptions struct {
	Rate     int           // jobs enqueued per second
	Duration time.Duration // how long the measured part enqueues
	// Warmup is how long the bench enqueues at Rate before it begins to count. A
	// runner that has just started makes its connections, and each new session
	// compiles the PL/pgSQL functions and plans their statements on its first calls:
	// the jobs of the first quarter second here waited 90–150 ms, a p99 of their own
	// that a runner in service pays once, not at every rate.
	Warmup  time.Duration
	Workers int
}

// benchSteady enqueues o.Rate jobs/s for o.Warmup and then o.Duration while a runner
// works the queue, and reports, over the jobs of o.Duration, the rates achieved and
// the enqueue-to-start latency (started_at - created_at, both the database's clock)
// at p50, p99 and p999. Jobs are enqueued in small statements every steadyTick, so a
// job waits for the runner, never for the bench. The bench enqueues on pool and the
// runner works on a pool of its own (connect), as a service and a runner process do:
// sharing one pool of four connections (pgx's default on two cores) made the
// enqueues and the claims wait for each other's connections.
func benchSteady(ctx context.Context, pool *pgxpool.Pool, connect func(context.Context) (*pgxpool.Pool, error),
	progress io.Writer, o steadyOptions) (*steadyResult, error) {
	queue := fmt.Sprintf("bench.steady.%d", time.Now().UnixNano())
	client, err := newClient(pool)
	if err != nil {
		return nil, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_, _ = pool.Exec(cctx, sqlapi.BenchDeleteQueueJobs, queue)
		_, _ = pool.Exec(cctx, sqlapi.BenchDeleteQueue, queue)
	}()
	// From a vacuumed table, as the burn-down: dead rows of earlier runs (on a server
	// without autovacuum, a million of them here) would slow every claim of this one.
	if _, err := pool.Exec(ctx, sqlapi.BenchVacuumJobs); err != nil {
		return nil, fmt.Errorf("vacuum: %w", err)
	}
	checkpoints, err := freshCheckpoint(ctx, pool, progress)
	if err != nil {
		return nil, err
	}
	rpool, err := connect(ctx)
	if err != nil {
		return nil, err
	}
	defer rpool.Close()
	r, stop, err := startQuietRunner(ctx, rpool, map[string]runner.QueueConfig{queue: {Workers: o.Workers}})
	if err != nil {
		return nil, err
	}
	defer stop()

	fmt.Fprintf(progress, "bench: enqueueing %d jobs/s for %s (%s of it a warm-up, not counted)\n",
		o.Rate, o.Warmup+o.Duration, o.Warmup)
	res := &steadyResult{Rate: o.Rate, Workers: o.Workers, WarmupS: o.Warmup.Seconds()}
	start := time.Now()
	var (
		took []time.Duration
		// When each measured job's enqueue statement returned, in id order. A slice,
		// not a map: the bench shares the machine's cores with the runner and the
		// server, and hashing every job id into a map of a few hundred thousand was
		// 7% of its CPU.
		committed []committedAt
		sent      int       // jobs enqueued, the warm-up's included
		measured  time.Time // when the measured part began (zero: still warming up)
		firstID   int64     // the first measured job
		before    runner.Stats
		cpu       cpuSample
	)
	tick := time.NewTicker(steadyTick)
	defer tick.Stop()
	for now := start; now.Sub(start) < o.Warmup+o.Duration; now = <-tick.C {
		due := int(float64(o.Rate)*time.Since(start).Seconds()) - sent
		if due <= 0 {
			continue
		}
		specs := make([]pgrun.JobSpec, due)
		for i := range specs {
			specs[i] = pgrun.JobSpec{Kind: runner.KindNoop, Queue: queue}
		}
		began := time.Now()
		jobs, err := client.EnqueueMany(ctx, specs)
		if err != nil {
			return nil, err
		}
		done := time.Now()
		sent += due
		if measured.IsZero() {
			if began.Sub(start) < o.Warmup {
				continue
			}
			measured, firstID, before, cpu = began, jobs[0].ID, r.Stats(), readCPU()
		}
		took = append(took, done.Sub(began))
		for _, j := range jobs {
			committed = append(committed, committedAt{id: j.ID, at: done})
		}
		res.Jobs += due
	}
	if measured.IsZero() {
		return nil, fmt.Errorf("nothing was enqueued after the warm-up: raise --rate or --duration")
	}
	res.EnqueuedPerSec = float64(res.Jobs) / time.Since(measured).Seconds()
	res.HostCPUBusy = busyBetween(cpu, readCPU())
	slices.Sort(took)
	res.EnqueueP50MS, res.EnqueueP99MS = quantileMS(took, 0.50), quantileMS(took, 0.99)
	if _, err := waitCompleted(ctx, func() int64 { return r.Stats().Completed }, int64(sent)); err != nil {
		return nil, err
	}
	if res.Checkpoints, err = checkpoints.since(ctx); err != nil {
		return nil, err
	}
	st := r.Stats()
	res.AvgClaim = float64(st.Claimed-before.Claimed) / float64(max(st.ClaimCalls-before.ClaimCalls, 1))
	res.AvgComplete = float64(st.Completed-before.Completed) / float64(max(st.CompleteCalls-before.CompleteCalls, 1))
	l, err := startLatency(ctx, pool, queue, firstID)
	if err != nil {
		return nil, err
	}
	res.P50MS, res.P99MS, res.P999MS, res.StartedPerSec = l.P50MS, l.P99MS, l.P999MS, l.StartedPerSec
	if l, err = startLatency(ctx, pool, queue, 0); err != nil {
		return nil, err
	}
	res.WholeRunP99MS = l.P99MS
	if res.CommitP50MS, res.CommitP99MS, res.CommitP999MS, err = commitToStart(ctx, pool, queue, committed); err != nil {
		return nil, err
	}
	return res, nil
}

// commitToStart reads when each job of queue started and returns, at p50, p99 and
// p999, how long after its enqueue statement returned (committed) that was (0 when
// it started before).
func commitToStart(ctx context.Context, pool *pgxpool.Pool, queue string, committed []committedAt) (p50, p99, p999 float64, err error) {
	// Ids come back in the order the statements ran, so this is about sorted already.
	slices.SortFunc(committed, func(a, b committedAt) int { return cmp.Compare(a.id, b.id) })
	rows, err := pool.Query(ctx, sqlapi.BenchStartedAt, queue)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("commit-to-start: %w", err)
	}
	var waits []time.Duration
	var id int64
	var started time.Time
	_, err = pgx.ForEachRow(rows, []any{&id, &started}, func() error {
		if i, ok := slices.BinarySearchFunc(committed, id, func(c committedAt, id int64) int { return cmp.Compare(c.id, id) }); ok {
			waits = append(waits, max(0, started.Sub(committed[i].at)))
		}
		return nil
	})
	if err != nil {
		return 0, 0, 0, fmt.Errorf("commit-to-start: %w", err)
	}
	slices.Sort(waits)
	return quantileMS(waits, 0.50), quantileMS(waits, 0.99), quantileMS(waits, 0.999), nil
}

// committedAt is when the enqueue statement of job id returned.
type committedAt struct {
	id int64
	at time.Time
}

// quantileMS is the q-quantile of sorted durations, in milliseconds (0 if empty).
func quantileMS(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return float64(sorted[int(q*float64(len(sorted)-1))].Microseconds()) / 1000
}
