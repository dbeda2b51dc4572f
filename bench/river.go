package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/pgrun/pgrun/bench/internal/riverbench"
)

// riverArgs is River's no-op job; its kind matches pgrun's.
type riverArgs struct{}

func (riverArgs) Kind() string { return benchKind }

// riverWorker counts what it ran, for waitDrained.
type riverWorker struct {
	river.WorkerDefaults[riverArgs]
	worked *counter
}

func (w *riverWorker) Work(context.Context, *river.Job[riverArgs]) error {
	w.worked.ran()
	return nil
}

// riverRound measures River in a fresh database: insert with InsertMany, then the
// burn-down by a client configured as `river bench` configures it.
func riverRound(ctx context.Context, admin *pgx.Conn, c config, round int) (*roundResult, error) {
	db, err := createDB(ctx, admin, c, fmt.Sprintf("river_bench_%d", round))
	if err != nil {
		return nil, err
	}
	defer db.drop()
	pool := db.Pool
	driver := riverpgxv5.New(pool)
	progress("river round %d: migrating %s", round, db.name)
	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Logger: quietLogger()})
	if err != nil {
		return nil, err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, fmt.Errorf("rivermigrate: %w", err)
	}

	worked := &counter{}
	workers := river.NewWorkers()
	river.AddWorker(workers, &riverWorker{worked: worked})
	client, err := river.NewClient(driver, riverbench.Config(c.RiverWorkers, workers, quietLogger()))
	if err != nil {
		return nil, err
	}
	res := &roundResult{Round: round, Engine: "river", Workers: c.RiverWorkers}

	// The client is not started yet: InsertMany works without it, and the burn-down
	// starts from a full backlog as pgrun's does.
	progress("river round %d: inserting %d jobs with InsertMany", round, c.Jobs)
	params := make([]river.InsertManyParams, c.Batch)
	for i := range params {
		params[i] = river.InsertManyParams{Args: riverArgs{}}
	}
	res.InsertPerSec, err = insertBatches(ctx, c.Jobs, c.Batch, func(ctx context.Context, n int) error {
		_, err := client.InsertMany(ctx, params[:n])
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("InsertMany: %w", err)
	}
	if err := vacuum(ctx, pool, "river_job"); err != nil {
		return nil, err
	}

	progress("river round %d: burning down with MaxWorkers %d", round, c.RiverWorkers)
	if res.BurnSeconds, err = riverBurnDown(ctx, pool, client, c, worked); err != nil {
		return nil, err
	}
	res.BurnPerSec = float64(c.Jobs) / res.BurnSeconds
	res.FirstJobMS, res.LastJobMS = worked.firstMS(), worked.lastMS()
	progress("river round %d: insert %.0f/s, burn-down %.0f/s", round, res.InsertPerSec, res.BurnPerSec)
	return res, nil
}

// riverBurnDown starts the client and times it from start until the database has
// no available or running job left, as pgrunBurnDown does for pgrun.
func riverBurnDown(ctx context.Context, pool *pgxpool.Pool, client *river.Client[pgx.Tx], c config, worked *counter) (float64, error) {
	worked.start = time.Now()
	if err := client.Start(ctx); err != nil {
		return 0, fmt.Errorf("start: %w", err)
	}
	err := waitDrained(ctx, int64(c.Jobs), worked, c.StallTimeout, func(ctx context.Context) (int64, error) {
		var left int64
		// Each part in the order of River's fetching index (state, queue, priority,
		// scheduled_at, id), so that it is read instead of the table.
		err := pool.QueryRow(ctx, `select
			(select count(*) from (select 1 from river_job where state = 'available'
			                       order by state, queue, priority, scheduled_at, id limit 1) a)
			+ (select count(*) from (select 1 from river_job where state = 'running'
			                         order by state, queue, priority, scheduled_at, id limit 100000) r)`).Scan(&left)
		return left, err
	})
	elapsed := time.Since(worked.start).Seconds()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if stopErr := client.Stop(sctx); err == nil && stopErr != nil {
		err = fmt.Errorf("stop: %w", stopErr)
	}
	return elapsed, err
}
