// Command riverwork is River's side of scripts/bench-processes.sh: the same burn-down
// by separate processes sharing one queue, so that what a second, third and fourth
// process add (or cost) on this machine can be compared between the engines. It has
// two modes:
//
//	riverwork -database-url URL -seed 400000   # migrate River, insert the no-op jobs
//	riverwork -database-url URL                # work the default queue until killed
//
// A worker process runs a River client at the settings bench/ gives River (its own
// `river bench` fetch settings, 2,000 workers unless -workers says otherwise). The
// script reads the rate from the jobs themselves (attempted_at to finalized_at), as
// it does for pgrun's.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/pgrun/pgrun/bench/internal/riverbench"
)

type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

func main() {
	url := flag.String("database-url", os.Getenv("PGRUN_DATABASE_URL"), "PostgreSQL URL")
	seed := flag.Int("seed", 0, "migrate and insert this many no-op jobs, then exit")
	workers := flag.Int("workers", 2000, "River MaxWorkers (the setting of River's own `river bench`)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, *url, *seed, *workers); err != nil {
		fmt.Fprintln(os.Stderr, "riverwork:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url string, seed, maxWorkers int) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	driver := riverpgxv5.New(pool)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{})
	// bench's settings for River; inserting needs no queue, so the seed's client runs none.
	cfg := riverbench.Config(maxWorkers, workers, quiet)
	if seed > 0 {
		cfg.Queues = nil
		migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Logger: quiet})
		if err != nil {
			return err
		}
		if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
			return fmt.Errorf("rivermigrate: %w", err)
		}
		client, err := river.NewClient(driver, cfg)
		if err != nil {
			return err
		}
		params := make([]river.InsertManyParams, 1000)
		for i := range params {
			params[i] = river.InsertManyParams{Args: noopArgs{}}
		}
		for done := 0; done < seed; done += len(params) {
			if _, err := client.InsertMany(ctx, params[:min(len(params), seed-done)]); err != nil {
				return fmt.Errorf("InsertMany: %w", err)
			}
		}
		return nil
	}
	client, err := river.NewClient(driver, cfg)
	if err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return client.Stop(sctx)
}
