package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgrun/pgrun"
)

func init() { commands = append(commands, newEnqueueCmd) }

func newEnqueueCmd(g *globals) *cobra.Command {
	var (
		spec    pgrun.JobSpec
		runAt   string
		delay   time.Duration
		count   int
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "enqueue KIND [JSON]",
		Short: "Enqueue a job (or --count of them) with JSON args",
		Example: `  runner enqueue echo '{"hello": "world"}'
  runner enqueue sleep '{"ms": 2000}' --queue default --count 10
  runner enqueue resize '{"w": 64}' --queue images --delay 30s --unique-key img-42
  runner enqueue embed '{"doc": 7}' --queue gpu --model bge-small --model-required`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			spec.Kind = args[0]
			raw := "{}"
			if len(args) == 2 {
				raw = args[1]
			}
			var obj map[string]any
			if err := json.Unmarshal([]byte(raw), &obj); err != nil || obj == nil {
				return fmt.Errorf("args %q are not a JSON object", raw)
			}
			spec.Args = obj
			if count < 1 {
				return fmt.Errorf("--count must be at least 1, got %d", count)
			}
			if runAt != "" && delay != 0 {
				return fmt.Errorf("give --run-at or --delay, not both")
			}
			if runAt != "" {
				t, err := time.Parse(time.RFC3339, runAt)
				if err != nil {
					return fmt.Errorf("--run-at %q is not an RFC 3339 time such as 2030-01-02T15:04:05Z", runAt)
				}
				spec.RunAt = &t
			}
			if delay < 0 {
				return fmt.Errorf("--delay %s is negative", delay)
			}
			if delay > 0 {
				t := time.Now().Add(delay)
				spec.RunAt = &t
			}
			if timeout < 0 {
				return fmt.Errorf("--timeout %s is negative", timeout)
			}
			spec.Timeout = timeout
			if count > 1 && spec.UniqueKey != "" {
				return fmt.Errorf("--unique-key with --count %d would enqueue one job; drop one of them", count)
			}
			pool, err := g.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer pool.Close()
			specs := make([]pgrun.JobSpec, count)
			for i := range specs {
				specs[i] = spec
			}
			jobs, err := pgrun.EnqueueMany(cmd.Context(), pool, specs)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if len(jobs) == 1 {
				j := jobs[0]
				if j.Deduplicated {
					// Nothing was inserted: say so, and which job holds the key.
					fmt.Fprintf(out, "job %d %s (%s, queue %s): duplicate, unique key %q is held by this job; nothing enqueued",
						j.ID, j.Status, j.Kind, j.Queue, spec.UniqueKey)
					if spec.ReplaceDuplicate && j.Status == pgrun.StatusQueued {
						fmt.Fprint(out, " (it took these args, priority and run time)")
					}
					fmt.Fprintln(out)
					return nil
				}
				fmt.Fprintf(out, "job %d %s (%s, queue %s)\n", j.ID, j.Status, j.Kind, j.Queue)
				return nil
			}
			var fresh []*pgrun.Job
			for _, j := range jobs {
				if !j.Deduplicated {
					fresh = append(fresh, j)
				}
			}
			if len(fresh) == 0 {
				fmt.Fprintf(out, "0 jobs enqueued, %d duplicates\n", len(jobs))
				return nil
			}
			lo, hi := fresh[0].ID, fresh[0].ID
			for _, j := range fresh {
				lo, hi = min(lo, j.ID), max(hi, j.ID)
			}
			fmt.Fprintf(out, "%d jobs enqueued (ids %d..%d, queue %s)", len(fresh), lo, hi, fresh[0].Queue)
			if d := len(jobs) - len(fresh); d > 0 {
				fmt.Fprintf(out, ", %d duplicates", d)
			}
			fmt.Fprintln(out)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&spec.Queue, "queue", "default", "queue name")
	f.IntVar(&spec.Priority, "priority", 0, fmt.Sprintf("priority: lower runs first, %d (most urgent) to %d", pgrun.MinPriority, pgrun.MaxPriority))
	f.StringVar(&runAt, "run-at", "", "run at this RFC 3339 time")
	f.DurationVar(&delay, "delay", 0, "run after this delay")
	f.IntVar(&spec.MaxAttempts, "max-attempts", 0, "failed attempts before the job fails for good (default 25)")
	f.StringVar(&spec.UniqueKey, "unique-key", "", "deduplicate: while an active job holds the key, return it instead")
	f.DurationVar(&timeout, "timeout", 0, "time limit for one attempt")
	f.StringVar(&spec.Model, "model", "", "model the job needs (warm-model routing)")
	f.BoolVar(&spec.ModelRequired, "model-required", false, "only a worker with --model warm or declared may claim the job")
	f.DurationVar(&spec.UniqueWindow, "unique-window", 0, "with --unique-key: also return a job that finished with the key within this window")
	f.BoolVar(&spec.ReplaceDuplicate, "replace", false, "with --unique-key: a queued holder of the key takes these args, priority and run time")
	f.StringVar(&spec.ConcurrencyKey, "concurrency-key", "", "key the queue's concurrency_limit counts by (a tenant, say)")
	f.IntVar(&count, "count", 1, "enqueue this many identical jobs in one statement")
	return cmd
}
