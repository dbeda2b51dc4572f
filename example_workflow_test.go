package pgrun_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"time"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/runner"
)

// A coordinator defers to children and waits: the children are enqueued and the
// parent moves to waiting in one statement, and the parent succeeds in the
// transaction that finishes its last child (fan-in, decided by the database).
func Example_deferAndFanIn() {
	ctx := context.Background()
	client := exampleClient()
	stop := startRunner(client.Pool(), func(r *runner.Runner) {
		runner.Handle(r, "resize-batch", func(ctx context.Context, j *runner.Job[struct{ Images []string }]) (any, error) {
			children := make([]pgrun.JobSpec, len(j.Args.Images))
			for i, img := range j.Args.Images {
				children[i] = pgrun.JobSpec{Kind: "resize", Args: map[string]string{"image": img}}
			}
			return nil, runner.Defer(children...)
		})
		runner.Handle(r, "resize", func(ctx context.Context, j *runner.Job[struct{ Image string }]) (any, error) {
			return map[string]string{"thumb": j.Args.Image + ".thumb"}, nil
		})
	})
	defer stop()

	parent, err := client.Enqueue(ctx, "resize-batch", map[string]any{"images": []string{"a.png", "b.png", "c.png"}})
	if err != nil {
		log.Fatal(err)
	}
	done := waitFinished(client, parent.ID)
	children, err := client.ListJobs(ctx, pgrun.JobFilter{ParentID: parent.ID})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("parent %s with %s\n", done.Status, done.Result)
	for _, c := range children {
		fmt.Printf("child %s: %s\n", c.Status, c.Result)
	}
	// Output:
	// parent succeeded with {"children": 3, "children_failed": 0}
	// child succeeded: {"thumb": "a.png.thumb"}
	// child succeeded: {"thumb": "b.png.thumb"}
	// child succeeded: {"thumb": "c.png.thumb"}
}

// A DAG workflow: fetch, then wait for a person's approval, then publish what was
// approved. The database expands the graph as nodes finish; a node's args refer to
// the run's input and to earlier nodes' outputs.
func ExampleClient_StartRun() {
	ctx := context.Background()
	client := exampleClient()
	stop := startRunner(client.Pool(), func(r *runner.Runner) {
		runner.Handle(r, "fetch", func(ctx context.Context, j *runner.Job[struct{ URL string }]) (any, error) {
			return map[string]any{"title": "Docs at " + j.Args.URL}, nil
		})
		runner.Handle(r, "publish", func(ctx context.Context, j *runner.Job[struct{ Title, By string }]) (any, error) {
			return map[string]string{"published": j.Args.Title + ", approved by " + j.Args.By}, nil
		})
	})
	defer stop()

	_, err := client.DefineWorkflow(ctx, "publish-docs", json.RawMessage(`{"nodes": [
		{"name": "fetch", "kind": "fetch", "args": {"url": {"$from": "input.url"}}},
		{"name": "approve", "input": true, "deps": ["fetch"]},
		{"name": "publish", "kind": "publish", "deps": ["approve"],
		 "args": {"title": {"$from": "fetch.output.title"}, "by": {"$from": "approve.output.by"}}}
	]}`))
	if err != nil {
		log.Fatal(err)
	}
	run, err := client.StartRun(ctx, "publish-docs", map[string]string{"url": "example.com"}, "")
	if err != nil {
		log.Fatal(err)
	}
	if _, err := client.SubmitInput(ctx, run.ID, "approve", map[string]string{"by": "ada"}); err != nil {
		log.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); run.Status == "running" && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		if run, err = client.GetRun(ctx, run.ID); err != nil {
			log.Fatal(err)
		}
	}
	nodes, err := client.RunNodes(ctx, run.ID)
	if err != nil {
		log.Fatal(err)
	}
	for _, n := range nodes {
		fmt.Println(n.Node, n.Status)
	}
	fmt.Println("run", run.Status, string(run.Output))
	// Output:
	// fetch succeeded
	// approve succeeded
	// publish succeeded
	// run succeeded {"publish": {"published": "Docs at example.com, approved by ada"}}
}

// A handler that cannot work now (a rate limit, a busy device) asks to run again
// later without spending an attempt: the job goes back to its queue, due after the
// delay, and the next claim runs it.
func Example_retryLater() {
	ctx := context.Background()
	client := exampleClient()
	stop := startRunner(client.Pool(), func(r *runner.Runner) {
		runner.Handle(r, "quote", func(ctx context.Context, j *runner.Job[struct{}]) (any, error) {
			if j.Attempt == 1 {
				return nil, runner.RetryLater(100*time.Millisecond, "rate limited")
			}
			return map[string]int{"price": 42}, nil
		})
	})
	defer stop()

	job, err := client.Enqueue(ctx, "quote", nil, pgrun.MaxAttempts(1))
	if err != nil {
		log.Fatal(err)
	}
	done := waitFinished(client, job.ID)
	fmt.Printf("%s on attempt %d with %d failures (max attempts %d): %s\n",
		done.Status, done.Attempt, done.Failures, done.MaxAttempts, done.Result)
	timeline, err := client.Timeline(ctx, job.ID)
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range timeline {
		fmt.Println(e.Event)
	}
	// Output:
	// succeeded on attempt 2 with 0 failures (max attempts 1): {"price": 42}
	// job.enqueued
	// job.retry_later
	// job.started
	// job.succeeded
}
