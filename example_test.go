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

// Connect, install the engine, and make a client. NewClient sends nothing; every
// method is one or two statements of the SQL API.
func ExampleNewClient() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	if err := pgrun.Migrate(ctx, pool); err != nil {
		log.Fatal(err)
	}
	client, err := pgrun.NewClient(pool, pgrun.Config{Queue: "app"})
	if err != nil {
		log.Fatal(err)
	}
	job, err := client.Enqueue(ctx, "resize", map[string]any{"w": 64},
		pgrun.UniqueKey("resize:img-42"), pgrun.Timeout(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("enqueued", job.ID, "in", job.Queue)
}

// EnqueueMany answers one job per spec, in order; Deduplicated marks a spec whose
// unique key was already held, so nothing was inserted for it.
func ExampleClient_EnqueueMany() {
	ctx := context.Background()
	client := exampleClient()
	jobs, err := client.EnqueueMany(ctx, []pgrun.JobSpec{
		{Kind: "invoice", Args: map[string]int{"order": 41}, UniqueKey: "invoice:41"},
		{Kind: "invoice", Args: map[string]int{"order": 41}, UniqueKey: "invoice:41"},
		{Kind: "embed", Queue: "gpu", Model: "bge-small", ModelRequired: true},
	})
	if err != nil {
		log.Fatal(err)
	}
	for i, j := range jobs {
		if j.Deduplicated {
			fmt.Printf("spec %d: already enqueued by spec 0 (%t), %s\n", i, j.ID == jobs[0].ID, j.Status)
			continue
		}
		fmt.Printf("spec %d: %s job in queue %s\n", i, j.Kind, j.Queue)
	}
	// Output:
	// spec 0: invoice job in queue default
	// spec 1: already enqueued by spec 0 (true), queued
	// spec 2: embed job in queue gpu
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
