package main

import (
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgrun/pgrun"
)

func init() { commands = append(commands, newQueueCmd) }

// newQueueCmd lists queues, pauses and resumes them and sets their policy
// (pgrun.set_queue, sql/functions/50_queues.sql).
func newQueueCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "queue", Short: "List queues, pause or resume them, set their limits and defaults"}
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List every queue with its settings (counts: runner status)",
		Args:  cobra.NoArgs,
		RunE: g.withClient(func(cmd *cobra.Command, _ []string, c *pgrun.Client) error {
			qs, err := c.QueuePolicies(cmd.Context())
			if err != nil {
				return err
			}
			stats, err := c.Queues(cmd.Context())
			if err != nil {
				return err
			}
			use := make(map[string]pgrun.QueueStats, len(stats))
			for _, s := range stats {
				use[s.Queue] = s
			}
			tw := table(cmd.OutOrStdout())
			fmt.Fprintln(tw, "QUEUE\tPAUSED\tMAX RUNNING\tRATE\tPER KEY\tKEY RATE\tFAIR BY\tAGING\tON FAILURE\tHELD\tKEYS AT LIMIT\tLEASE\tTIMEOUT\tATTEMPTS\tRETENTION\tEPHEMERAL")
			for _, q := range qs {
				u := use[q.Name]
				fmt.Fprintf(tw, "%s\t%t\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%t\n", q.Name, q.Paused,
					orDash(q.MaxRunning), perPeriod(q.RateLimit, q.RatePeriod), perKeyUse(q.ConcurrencyLimit, u.KeysRunning),
					perKeyUse(q.KeyRateLimit, u.KeyWindows, q.KeyRatePeriod), orDash(q.FairBy), orDash(q.PriorityAging),
					q.SequenceOnFailure, u.Held, orDash(u.KeysAtLimit), orDash(q.DefaultLease), orDash(q.DefaultTimeout),
					orDash(q.DefaultMaxAttempts), orDash(q.Retention), q.Ephemeral)
			}
			if len(qs) == 0 {
				fmt.Fprintln(tw, "(no queues yet)")
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			// Which keys and sequences those numbers are, and why due jobs wait, is a
			// queue's own report.
			for _, s := range stats {
				if s.Held > 0 || (s.KeysAtLimit != nil && *s.KeysAtLimit > 0) {
					fmt.Fprintln(cmd.OutOrStdout(), "Held sequences, keys at their limit and why due jobs wait: runner queue show QUEUE")
					break
				}
			}
			return nil
		}),
	})
	for _, verb := range []string{"pause", "resume"} {
		cmd.AddCommand(&cobra.Command{
			Use:   verb + " QUEUE",
			Short: verb + " claims from a queue",
			Args:  cobra.ExactArgs(1),
			RunE: g.withClient(func(cmd *cobra.Command, args []string, c *pgrun.Client) error {
				do := c.PauseQueue
				if verb == "resume" {
					do = c.ResumeQueue
				}
				q, err := do(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				state := "running"
				if q.Paused {
					state = "paused"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "queue %s %s\n", args[0], state)
				return nil
			}),
		})
	}
	cmd.AddCommand(newQueueSetCmd(g), newQueueShowCmd(g))
	return cmd
}

// perPeriod shows a limit per period ("100/1m0s"), "-" for none; a nil period is
// the engine's default, a second.
func perPeriod(limit *int, period *time.Duration) string {
	if limit == nil {
		return "-"
	}
	p := time.Second
	if period != nil {
		p = *period
	}
	return fmt.Sprintf("%d/%s", *limit, p)
}

// perKeyUse shows a per-key limit with how many keys use it now ("2 (5 keys)"): keys
// running for a concurrency limit, keys with an open window for a rate (period
// given), "-" for none.
func perKeyUse(limit *int, keys *int64, period ...*time.Duration) string {
	if limit == nil {
		return "-"
	}
	s := fmt.Sprint(*limit)
	if len(period) > 0 {
		s = perPeriod(limit, period[0])
	}
	if keys != nil {
		s += fmt.Sprintf(" (%d key%s)", *keys, map[bool]string{true: "", false: "s"}[*keys == 1])
	}
	return s
}

// queueSettingFlags are the flags of `queue set` that change something.
var queueSettingFlags = []string{"max-running", "rate-limit", "rate-period", "concurrency-limit", "default-lease",
	"default-timeout", "default-max-attempts", "backoff-base", "backoff-max", "retention", "archive", "warm-wait",
	"ephemeral", "sequence-on-failure", "fair-by", "key-rate-limit", "key-rate-period", "priority-aging", "reset"}

// newQueueSetCmd is pgrun.set_queue: a flag left out keeps the queue's value,
// --reset clears settings back to no limit or the engine's default, and the engine
// checks every value (22023 with a hint).
func newQueueSetCmd(g *globals) *cobra.Command {
	var (
		s                                               pgrun.QueueSettings
		maxRunning, rateLimit, concurrency, maxAttempts int
		ratePeriod, lease, timeout                      time.Duration
		backoffBase, backoffMax, retention, warmWait    time.Duration
		archive, ephemeral                              bool
		onFailure, fairBy                               string
		keyRateLimit                                    int
		keyRatePeriod, aging                            time.Duration
	)
	cmd := &cobra.Command{
		Use:   "set QUEUE",
		Short: "Set a queue's limits and defaults (creating it); flags left out keep their value",
		Long: `set changes a queue's policy with pgrun.set_queue and prints it. Only the flags
given change; --reset names settings to clear (back to no limit or the engine's
default), by their column names. The queue is created if no job used it yet.
sql/functions/50_queues.sql says what each setting means.`,
		Example: `  runner queue set images --max-running 4 --rate-limit 100 --rate-period 1m
  runner queue set tenants --concurrency-limit 2 --default-timeout 10m
  runner queue set logs --ephemeral --retention 1h
  runner queue set tenants --fair-by tenant --priority-aging 1m
  runner queue set api --key-rate-limit 10 --key-rate-period 1s
  runner queue set images --reset max_running,rate_limit`,
		Args: cobra.ExactArgs(1),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *pgrun.Client) error {
			set := cmd.Flags().Changed
			pick := func(name string, v int) *int {
				if !set(name) {
					return nil
				}
				return &v
			}
			pickD := func(name string, v time.Duration) *time.Duration {
				if !set(name) {
					return nil
				}
				return &v
			}
			pickB := func(name string, v bool) *bool {
				if !set(name) {
					return nil
				}
				return &v
			}
			s.MaxRunning, s.RateLimit = pick("max-running", maxRunning), pick("rate-limit", rateLimit)
			s.ConcurrencyLimit, s.DefaultMaxAttempts = pick("concurrency-limit", concurrency), pick("default-max-attempts", maxAttempts)
			s.RatePeriod, s.DefaultLease, s.DefaultTimeout = pickD("rate-period", ratePeriod), pickD("default-lease", lease), pickD("default-timeout", timeout)
			s.BackoffBase, s.BackoffMax = pickD("backoff-base", backoffBase), pickD("backoff-max", backoffMax)
			s.Retention, s.WarmWait = pickD("retention", retention), pickD("warm-wait", warmWait)
			s.Archive, s.Ephemeral = pickB("archive", archive), pickB("ephemeral", ephemeral)
			pickS := func(name string, v string) *string {
				if !set(name) {
					return nil
				}
				return &v
			}
			s.SequenceOnFailure, s.FairBy = pickS("sequence-on-failure", onFailure), pickS("fair-by", fairBy)
			s.KeyRateLimit, s.KeyRatePeriod = pick("key-rate-limit", keyRateLimit), pickD("key-rate-period", keyRatePeriod)
			s.PriorityAging = pickD("priority-aging", aging)
			if !slices.ContainsFunc(queueSettingFlags, set) {
				return fmt.Errorf("give at least one setting to change, or --reset (see runner queue set --help)")
			}
			q, err := c.SetQueue(cmd.Context(), args[0], s)
			if err != nil {
				return err
			}
			tw := table(cmd.OutOrStdout())
			fmt.Fprintf(tw, "queue\t%s\n", q.Name)
			fmt.Fprintf(tw, "paused\t%t\n", q.Paused)
			fmt.Fprintf(tw, "max running\t%s\n", orDash(q.MaxRunning))
			fmt.Fprintf(tw, "rate limit\t%s per %s\n", orDash(q.RateLimit), orDash(q.RatePeriod))
			fmt.Fprintf(tw, "concurrency limit\t%s\n", orDash(q.ConcurrencyLimit))
			fmt.Fprintf(tw, "default lease\t%s\n", orDash(q.DefaultLease))
			fmt.Fprintf(tw, "default timeout\t%s\n", orDash(q.DefaultTimeout))
			fmt.Fprintf(tw, "default max attempts\t%s\n", orDash(q.DefaultMaxAttempts))
			fmt.Fprintf(tw, "backoff\t%s to %s\n", orDash(q.BackoffBase), orDash(q.BackoffMax))
			fmt.Fprintf(tw, "retention\t%s (archive %t)\n", orDash(q.Retention), q.Archive)
			fmt.Fprintf(tw, "warm wait\t%s\n", orDash(q.WarmWait))
			fmt.Fprintf(tw, "ephemeral\t%t\n", q.Ephemeral)
			fmt.Fprintf(tw, "sequence on failure\t%s\n", q.SequenceOnFailure)
			fmt.Fprintf(tw, "fair by\t%s\n", orDash(q.FairBy))
			fmt.Fprintf(tw, "key rate limit\t%s\n", perPeriod(q.KeyRateLimit, q.KeyRatePeriod))
			fmt.Fprintf(tw, "priority aging\t%s\n", orDash(q.PriorityAging))
			return tw.Flush()
		}),
	}
	f := cmd.Flags()
	f.IntVar(&maxRunning, "max-running", 0, "at most this many of the queue's jobs run at once, across runners")
	f.IntVar(&rateLimit, "rate-limit", 0, "at most this many starts per --rate-period")
	f.DurationVar(&ratePeriod, "rate-period", 0, "the period of --rate-limit (default 1s)")
	f.IntVar(&concurrency, "concurrency-limit", 0, "at most this many running jobs per concurrency key")
	f.DurationVar(&lease, "default-lease", 0, "claim lease when the claimer passes none (at least 15s)")
	f.DurationVar(&timeout, "default-timeout", 0, "time limit of jobs enqueued without one (0: none)")
	f.IntVar(&maxAttempts, "default-max-attempts", 0, "max attempts of jobs enqueued without their own")
	f.DurationVar(&backoffBase, "backoff-base", 0, "first retry delay (default 1s)")
	f.DurationVar(&backoffMax, "backoff-max", 0, "longest retry delay (default 1h)")
	f.DurationVar(&retention, "retention", 0, "how long finished jobs are kept")
	f.BoolVar(&archive, "archive", false, "move pruned jobs to pgrun.jobs_archive instead of deleting them")
	f.DurationVar(&warmWait, "warm-wait", 0, "how long a job is left for a worker with its model warm (default 5s)")
	f.BoolVar(&ephemeral, "ephemeral", false, "delete jobs as they succeed (no history kept)")
	f.StringVar(&onFailure, "sequence-on-failure", "", "hold (a sequence waits for its failed job) or continue")
	f.StringVar(&fairBy, "fair-by", "", "claim round-robin across concurrency_key or tenant values")
	f.IntVar(&keyRateLimit, "key-rate-limit", 0, "at most this many starts per concurrency key per --key-rate-period")
	f.DurationVar(&keyRatePeriod, "key-rate-period", 0, "the period of --key-rate-limit (default 1s)")
	f.DurationVar(&aging, "priority-aging", 0, "a due job gains one priority level per this much waiting (at least 1s)")
	f.StringSliceVar(&s.Reset, "reset", nil, "settings to clear, by column name (max_running,rate_limit,fair_by,...)")
	return cmd
}
