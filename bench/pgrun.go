package main

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/runner"
)

const (
	// pgrunQueue is the queue the burn-down runs in; pgrunLimitQueue gets the fresh
	// backlog of the bare loop, so that the two never mix.
	pgrunQueue      = "bench"
	pgrunLimitQueue = "bench.limit"
	// benchKind is the no-op job kind of both engines.
	benchKind = "bench_noop"
	// limitWorker is the worker id the bare loop claims and completes as.
	limitWorker = "bench"
)

// pgrunRound measures pgrun in a fresh database: insert, burn-down by an in-process
// runner at its defaults, then the bare claim/complete loop over a second backlog.
func pgrunRound(ctx context.Context, admin *pgx.Conn, c config, round int) (*roundResult, error) {
	defer debug.SetGCPercent(debug.SetGCPercent(c.PgrunGOGC))
	db, err := createDB(ctx, admin, c, fmt.Sprintf("pgrun_bench_%d", round))
	if err != nil {
		return nil, err
	}
	defer db.drop()
	pool := db.Pool
	if c.PgrunStats {
		if err := trackFunctions(ctx, admin, db.name); err != nil {
			return nil, err
		}
	}
	progress("pgrun round %d: migrating %s", round, db.name)
	if err := pgrun.Migrate(ctx, pool); err != nil {
		return nil, err
	}
	res := &roundResult{Round: round, Engine: "pgrun", Workers: c.PgrunWorkers}

	progress("pgrun round %d: inserting %d jobs with EnqueueMany", round, c.Jobs)
	if res.InsertPerSec, err = pgrunInsert(ctx, pool, c, pgrunQueue); err != nil {
		return nil, err
	}
	if err := vacuum(ctx, pool, "pgrun.jobs"); err != nil {
		return nil, err
	}
	if c.PgrunStats {
		if err := resetStats(ctx, pool); err != nil {
			return nil, err
		}
	}

	progress("pgrun round %d: burning down with %d runner slots", round, c.PgrunWorkers)
	var worked *counter
	if res.BurnSeconds, worked, err = pgrunBurnDown(ctx, pool, c); err != nil {
		return nil, err
	}
	res.FirstJobMS, res.LastJobMS = worked.firstMS(), worked.lastMS()
	res.BurnPerSec = float64(c.Jobs) / res.BurnSeconds
	if c.PgrunStats {
		if res.Stats, err = readStats(ctx, pool); err != nil {
			return nil, err
		}
		progress("pgrun round %d: %s", round, res.Stats.describe(c.Jobs, res.BurnSeconds))
	}

	if !c.SkipLimit {
		progress("pgrun round %d: inserting a fresh backlog of %d for the bare loop", round, c.Jobs)
		if _, err := pgrunInsert(ctx, pool, c, pgrunLimitQueue); err != nil {
			return nil, err
		}
		if err := vacuum(ctx, pool, "pgrun.jobs"); err != nil {
			return nil, err
		}
		progress("pgrun round %d: bare claim_jobs/complete_jobs loop on %d connections", round, c.LimitConns)
		if res.LimitPerSec, err = pgrunLimit(ctx, pool, c); err != nil {
			return nil, err
		}
	}
	progress("pgrun round %d: insert %.0f/s, burn-down %.0f/s, bare loop %.0f/s",
		round, res.InsertPerSec, res.BurnPerSec, res.LimitPerSec)
	return res, nil
}

// pgrunInsert enqueues c.Jobs no-op jobs into queue with EnqueueMany.
func pgrunInsert(ctx context.Context, pool *pgxpool.Pool, c config, queue string) (float64, error) {
	return insertBatches(ctx, c.Jobs, c.Batch, func(ctx context.Context, n int) error {
		specs := make([]pgrun.JobSpec, n)
		for i := range specs {
			specs[i] = pgrun.JobSpec{Kind: benchKind, Queue: queue}
		}
		_, err := pgrun.EnqueueMany(ctx, pool, specs)
		return err
	})
}

// pgrunBurnDown runs an in-process runner at its defaults (only the queue's slots
// are set, as `runner bench` does) with a no-op handler, and times it from start
// until the database has no queued or running job left.
func pgrunBurnDown(ctx context.Context, pool *pgxpool.Pool, c config) (seconds float64, worked *counter, err error) {
	worked = &counter{}
	r, err := runner.New(pool, runner.Config{
		Queues: map[string]runner.QueueConfig{pgrunQueue: {Workers: c.PgrunWorkers}},
		Logger: quietLogger(),
	})
	if err != nil {
		return 0, nil, err
	}
	err = runner.Handle(r, benchKind, func(context.Context, *runner.Job[struct{}]) (any, error) {
		worked.ran()
		return nil, nil
	})
	if err != nil {
		return 0, nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	worked.start = time.Now()
	go func() { done <- r.Run(rctx) }()
	err = waitDrained(ctx, int64(c.Jobs), worked, c.StallTimeout, func(ctx context.Context) (int64, error) {
		var left int64
		// Each part in its index's order, so that it reads the claim index and the
		// running index, never the table, whatever the statistics of the backlog say.
		err := pool.QueryRow(ctx, `select
			(select count(*) from (select 1 from pgrun.jobs where queue = $1 and status = 'queued'
			                       order by priority, run_at, id limit 1) q)
			+ (select count(*) from (select 1 from pgrun.jobs where status = 'running' and queue = $1
			                         order by least(lease_expires_at, deadline_at) limit 100000) r)`,
			pgrunQueue).Scan(&left)
		return left, err
	})
	seconds = time.Since(worked.start).Seconds()
	cancel()
	if runErr := <-done; err == nil && runErr != nil {
		err = fmt.Errorf("runner: %w", runErr)
	}
	return seconds, worked, err
}

// pgrunLimit is the database-side limit: c.LimitConns loops that each claim up to
// c.LimitClaim jobs and complete them at once, with no handler, no slots and no
// batching between them, until the backlog is gone. What the runner reaches
// against this is the share of the limit it keeps.
func pgrunLimit(ctx context.Context, pool *pgxpool.Pool, c config) (float64, error) {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		total    atomic.Int64
	)
	start := time.Now()
	for range c.LimitConns {
		wg.Go(func() {
			if err := pgrunLimitLoop(ctx, pool, c.LimitClaim, &total); err != nil {
				mu.Lock()
				firstErr = cmpErr(firstErr, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	if firstErr != nil {
		return 0, firstErr
	}
	if got := total.Load(); got != int64(c.Jobs) {
		return 0, fmt.Errorf("bare loop completed %d jobs, want %d", got, c.Jobs)
	}
	return float64(c.Jobs) / elapsed, nil
}

// pgrunLimitLoop holds one connection and claims and completes until a claim comes
// back empty.
func pgrunLimitLoop(ctx context.Context, pool *pgxpool.Pool, claim int, total *atomic.Int64) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	ids := make([]int64, 0, claim)
	attempts := make([]int32, 0, claim)
	for {
		ids, attempts = ids[:0], attempts[:0]
		rows, err := conn.Query(ctx, `select id, attempt from pgrun.claim_jobs($1, $2, $3)`,
			pgrunLimitQueue, limitWorker, claim)
		if err != nil {
			return fmt.Errorf("claim_jobs: %w", err)
		}
		var id int64
		var attempt int32
		_, err = pgx.ForEachRow(rows, []any{&id, &attempt}, func() error {
			ids, attempts = append(ids, id), append(attempts, attempt)
			return nil
		})
		if err != nil {
			return fmt.Errorf("claim_jobs: %w", err)
		}
		if len(ids) == 0 {
			return nil
		}
		var done int64
		err = conn.QueryRow(ctx, `select count(*) from pgrun.complete_jobs($1::bigint[], $2::int[], null, $3)`,
			ids, attempts, limitWorker).Scan(&done)
		if err != nil {
			return fmt.Errorf("complete_jobs: %w", err)
		}
		if done != int64(len(ids)) {
			return fmt.Errorf("complete_jobs finished %d of %d claimed jobs", done, len(ids))
		}
		total.Add(done)
	}
}

// cmpErr keeps the first error.
func cmpErr(first, next error) error {
	if first != nil {
		return first
	}
	return next
}
