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
  runner enqueue resize '{"w": 64}' --queue images --delay 30s --unique-key img-42`,
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
				fmt.Fprintf(out, "job %d %s (%s, queue %s)\n", jobs[0].ID, jobs[0].Status, jobs[0].Kind, jobs[0].Queue)
				return nil
			}
			lo, hi := jobs[0].ID, jobs[0].ID
			for _, j := range jobs {
				lo, hi = min(lo, j.ID), max(hi, j.ID)
			}
			fmt.Fprintf(out, "%d jobs enqueued (ids %d..%d, queue %s)\n", len(jobs), lo, hi, jobs[0].Queue)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&spec.Queue, "queue", "default", "queue name")
	f.IntVar(&spec.Priority, "priority", 0, "priority: lower runs first, 0 (most urgent) to 32767")
	f.StringVar(&runAt, "run-at", "", "run at this RFC 3339 time")
	f.DurationVar(&delay, "delay", 0, "run after this delay")
	f.IntVar(&spec.MaxAttempts, "max-attempts", 0, "failed attempts before the job fails for good (default 25)")
	f.StringVar(&spec.UniqueKey, "unique-key", "", "deduplicate: while an active job holds the key, return it instead")
	f.DurationVar(&timeout, "timeout", 0, "time limit for one attempt")
	f.StringVar(&spec.Model, "model", "", "model the job needs (warm-model routing)")
	f.StringVar(&spec.ConcurrencyKey, "concurrency-key", "", "key the queue's concurrency_limit counts by (a tenant, say)")
	f.IntVar(&count, "count", 1, "enqueue this many identical jobs in one statement")
	return cmd
}
