package pgrun_test

import (
	"context"
	"fmt"
	"log"

	"github.com/pgrun/pgrun"
)

// Enqueue a job in the caller's own transaction: the job exists, and wakes a runner,
// only if the transaction commits, together with the caller's own writes.
func ExampleClient_EnqueueTx() {
	ctx := context.Background()
	client := exampleClient()
	pool := client.Pool()
	if _, err := pool.Exec(ctx, `create table orders (id bigint primary key)`); err != nil {
		log.Fatal(err)
	}

	placeOrder := func(id int64, commit bool) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			log.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, `insert into orders (id) values ($1)`, id); err != nil {
			log.Fatal(err)
		}
		if _, err := client.EnqueueTx(ctx, tx, "invoice", map[string]int64{"order": id}, pgrun.Queue("billing")); err != nil {
			log.Fatal(err)
		}
		if commit {
			if err := tx.Commit(ctx); err != nil {
				log.Fatal(err)
			}
		}
	}
	placeOrder(41, false) // rolled back: no order, no job
	placeOrder(42, true)

	jobs, err := client.ListJobs(ctx, pgrun.JobFilter{Kind: "invoice"})
	if err != nil {
		log.Fatal(err)
	}
	for _, j := range jobs {
		fmt.Printf("%s job in queue %s: %s %s\n", j.Kind, j.Queue, j.Args, j.Status)
	}
	// Output:
	// invoice job in queue billing: {"order": 42} queued
}

// A unique key makes enqueueing idempotent: while a job holds the key, enqueueing
// the same key returns that job, marked Deduplicated, and writes nothing. Once the
// holder has finished, the key is free again.
func ExampleUniqueKey() {
	ctx := context.Background()
	client := exampleClient()
	enqueue := func() *pgrun.Job {
		j, err := client.Enqueue(ctx, "report", map[string]string{"day": "2030-01-01"}, pgrun.UniqueKey("report:2030-01-01"))
		if err != nil {
			log.Fatal(err)
		}
		return j
	}
	first := enqueue()
	again := enqueue()
	fmt.Printf("again: the same job %t, deduplicated %t\n", again.ID == first.ID, again.Deduplicated)
	if _, err := client.Cancel(ctx, first.ID, "wrong day"); err != nil {
		log.Fatal(err)
	}
	after := enqueue()
	fmt.Printf("after the holder was cancelled: a new job %t, deduplicated %t\n", after.ID != first.ID, after.Deduplicated)
	// Output:
	// again: the same job true, deduplicated true
	// after the holder was cancelled: a new job true, deduplicated false
}

// EmailArgs names its kind, so that the kind string is written once: on the type.
type EmailArgs struct {
	To string `json:"to"`
}

func (EmailArgs) Kind() string { return "email" }

// With a Kind method on the args type, enqueueing needs no kind string; a runner
// handler for the same type finds it with pgrun.KindOf.
func ExampleClient_EnqueueArgs() {
	ctx := context.Background()
	client := exampleClient()
	j, err := client.EnqueueArgs(ctx, EmailArgs{To: "ada@example.com"}, pgrun.Priority(1))
	if err != nil {
		log.Fatal(err)
	}
	jobs, err := client.EnqueueMany(ctx, []pgrun.JobSpec{
		pgrun.SpecFor(EmailArgs{To: "bob@example.com"}),
		{Args: EmailArgs{To: "eve@example.com"}, Queue: "bulk"},
	})
	if err != nil {
		log.Fatal(err)
	}
	kind, _ := pgrun.KindOf(EmailArgs{})
	fmt.Println(kind, j.Kind, j.Priority, jobs[0].Kind, jobs[1].Kind, jobs[1].Queue)
	// Output:
	// email email 1 email email bulk
}

// ListJobs pages by keyset: pass the last id of a page as After to get the next.
// A page shorter than the limit is the last.
func ExampleClient_ListJobs() {
	ctx := context.Background()
	client := exampleClient()
	specs := make([]pgrun.JobSpec, 25)
	for i := range specs {
		specs[i] = pgrun.JobSpec{Kind: "thumbnail", Args: map[string]int{"image": i}}
	}
	if _, err := client.EnqueueMany(ctx, specs); err != nil {
		log.Fatal(err)
	}
	filter := pgrun.JobFilter{Kind: "thumbnail", Status: []pgrun.JobStatus{pgrun.StatusQueued}, Limit: 10}
	for page := 1; ; page++ {
		jobs, err := client.ListJobs(ctx, filter)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("page %d: %d jobs\n", page, len(jobs))
		if len(jobs) < filter.Limit {
			break
		}
		filter.After = jobs[len(jobs)-1].ID
	}
	// Output:
	// page 1: 10 jobs
	// page 2: 10 jobs
	// page 3: 5 jobs
}
