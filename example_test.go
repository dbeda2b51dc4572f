package pgrun_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/runner"
)

// Enqueue a job as part of the caller's own transaction: if the transaction rolls
// back, the job never existed and no runner was woken.
func ExampleEnqueue() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx)
	// ... the caller's own writes on tx ...
	job, err := pgrun.Enqueue(ctx, tx, "resize", map[string]any{"w": 64},
		pgrun.Queue("images"), pgrun.UniqueKey("resize:img-42"), pgrun.Timeout(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("enqueued", job.ID)
}

// EnqueueMany answers one job per spec, in order; Deduplicated marks a spec whose
// unique key was already held, so nothing was inserted for it.
func ExampleEnqueueMany() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	jobs, err := pgrun.EnqueueMany(ctx, pool, []pgrun.JobSpec{
		{Kind: "invoice", Args: map[string]int{"order": 41}, UniqueKey: "invoice:41"},
		{Kind: "invoice", Args: map[string]int{"order": 42}, UniqueKey: "invoice:42"},
		{Kind: "embed", Queue: "gpu", Model: "bge-small", ModelRequired: true},
	})
	if err != nil {
		log.Fatal(err)
	}
	for i, j := range jobs {
		if j.Deduplicated {
			fmt.Printf("spec %d: already enqueued as job %d (%s)\n", i, j.ID, j.Status)
			continue
		}
		fmt.Printf("spec %d: job %d\n", i, j.ID)
	}
}

// ResizeArgs are the typed args of a resize job.
type ResizeArgs struct {
	Image string `json:"image"`
	W     int    `json:"w"`
}

// Run Go handlers for two queues until the context is cancelled.
func Example_runner() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	if err := pgrun.Migrate(ctx, pool); err != nil {
		log.Fatal(err)
	}
	r, err := runner.New(pool, runner.Config{Queues: map[string]runner.QueueConfig{
		"default": {Workers: 16},
		"images":  {Workers: 4},
	}})
	if err != nil {
		log.Fatal(err)
	}
	err = runner.Handle(r, "resize", func(ctx context.Context, j *runner.Job[ResizeArgs]) (any, error) {
		if j.Args.W <= 0 {
			return nil, runner.Permanent(fmt.Errorf("width %d is not positive", j.Args.W))
		}
		_ = j.Progress(ctx, 1, 2)
		return map[string]any{"thumb": j.Args.Image + ".thumb"}, nil
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := r.Run(ctx); err != nil { // until ctx is done; then a graceful stop
		log.Fatal(err)
	}
}
