package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/pgrun/pgrun/internal/queueview"
	"github.com/pgrun/pgrun/internal/sqlapi"
)

// The rows of `runner queue show` are the dashboard's queue page's
// (internal/queueview), read with its statements (internal/sqlapi/dashboard_queue.go).

// newQueueShowCmd prints one queue's flow control with its use now, as the
// dashboard's queue page shows it: `runner queue list` has every queue's settings on
// a line, and this says which keys are at their limit, which sequences hold jobs and
// why, and why the first due jobs are not being claimed.
func newQueueShowCmd(g *globals) *cobra.Command {
	var rows int
	cmd := &cobra.Command{
		Use:   "show QUEUE",
		Short: "Show a queue's limits and their use: keys at their limit, held sequences, why its due jobs wait",
		Long: `show prints a queue's limits and flow control with their use now (its rate
window, the keys running or with a rate window open), its counts (queue_stats), the
keys using its per-key limits (those at their limit first), the sequences holding
jobs (those a failure stopped first, with why their next job waits) and its first
due jobs with why each is not claimed (pgrun.job_blocker). Each list stops at
--rows and says how many it left out.`,
		Example: `  runner queue show api
  runner queue show api --rows 50`,
		Args: cobra.ExactArgs(1),
		RunE: g.withPool(func(cmd *cobra.Command, args []string, pool *pgxpool.Pool) error {
			if rows < 1 || rows > 1000 {
				return fmt.Errorf("--rows %d is not valid: use 1 to 1000", rows)
			}
			return showQueue(cmd.Context(), cmd.OutOrStdout(), pool, args[0], rows)
		}),
	}
	cmd.Flags().IntVar(&rows, "rows", 10, "at most this many keys, sequences and due jobs (1 to 1000)")
	return cmd
}

// readRows runs sql and reads every row into a T by column name.
func readRows[T any](ctx context.Context, pool *pgxpool.Pool, sql string, args ...any) ([]T, error) {
	r, err := pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(r, pgx.RowToStructByName[T])
}

func showQueue(ctx context.Context, out io.Writer, pool *pgxpool.Pool, name string, rows int) error {
	settings, err := readRows[queueview.Settings](ctx, pool, sqlapi.DashboardQueue, name)
	if err != nil {
		return fmt.Errorf("queue %s: %w", name, err)
	}
	if len(settings) == 0 {
		return fmt.Errorf("queue %q not found (hint: list queues with `runner queue list`)", name)
	}
	q := settings[0]
	counts, err := readRows[queueview.Counts](ctx, pool, sqlapi.DashboardQueueStats, name)
	if err != nil {
		return fmt.Errorf("queue %s counts: %w", name, err)
	}
	var c queueview.Counts
	if len(counts) == 1 {
		c = counts[0]
	}
	var keys []queueview.Key
	if q.ConcurrencyLimit != nil || q.KeyRateLimit != nil {
		if keys, err = readRows[queueview.Key](ctx, pool, sqlapi.DashboardQueueKeys, name, rows); err != nil {
			return fmt.Errorf("queue %s keys: %w", name, err)
		}
	}
	seqs, err := readRows[queueview.Sequence](ctx, pool, sqlapi.DashboardQueueSequences, name, rows+1)
	if err != nil {
		return fmt.Errorf("queue %s sequences: %w", name, err)
	}
	due, err := readRows[queueview.Due](ctx, pool, sqlapi.DashboardQueueDue, name, rows)
	if err != nil {
		return fmt.Errorf("queue %s due jobs: %w", name, err)
	}

	tw := table(out)
	fmt.Fprintf(tw, "queue\t%s\n", q.Queue)
	fmt.Fprintf(tw, "paused\t%t\n", q.Paused)
	est := map[bool]string{true: "~", false: ""}[c.Estimated]
	held := fmt.Sprint(c.Held)
	if c.HeldPast() {
		held = fmt.Sprintf("%d+", queueview.StatsExactLimit)
	}
	fmt.Fprintf(tw, "jobs\t%s%d due, %d scheduled, %d running, %d pending (%s held by sequences), %d waiting; %d live workers\n",
		est, c.Queued, c.Scheduled, c.Running, c.Pending, held, c.Waiting, c.LiveWorkers)
	maxRunning := "-"
	if q.MaxRunning != nil {
		maxRunning = fmt.Sprintf("%d (%d running)", *q.MaxRunning, c.Running)
	}
	fmt.Fprintf(tw, "max running\t%s\n", maxRunning)
	fmt.Fprintf(tw, "rate limit\t%s\n", rateUse(q.RateLimit, q.RatePeriodSecs, q.RateWindowCount, q.RateWindowEnds))
	fmt.Fprintf(tw, "per key, running\t%s\n", perKeyUse(q.ConcurrencyLimit, c.KeysRunning))
	period := secsDuration(q.KeyRatePeriodSecs)
	fmt.Fprintf(tw, "per key, rate\t%s\n", perKeyUse(q.KeyRateLimit, c.KeyWindows, &period))
	fmt.Fprintf(tw, "keys at limit\t%s\n", orDash(c.KeysAtLimit))
	fmt.Fprintf(tw, "fair by\t%s\n", orDash(q.FairBy))
	aging := "-"
	if q.PriorityAgingSecs != nil {
		aging = secsDuration(*q.PriorityAgingSecs).String()
	}
	fmt.Fprintf(tw, "priority aging\t%s\n", aging)
	fmt.Fprintf(tw, "sequence on failure\t%s\n", q.SequenceOnFailure)
	if err := tw.Flush(); err != nil {
		return err
	}

	if q.ConcurrencyLimit != nil || q.KeyRateLimit != nil {
		fmt.Fprintln(out)
		tw = table(out)
		fmt.Fprintln(tw, "KEY\tRUNNING\tRATE WINDOW\tWINDOW ENDS\tMAY START\tQUEUED")
		for _, k := range keys {
			queued := fmt.Sprint(k.Queued)
			if k.QueuedMore {
				queued += "+"
			}
			ends := "-"
			if k.WindowEnds != nil {
				ends = "in " + age(time.Until(*k.WindowEnds))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", k.Key, ofLimit(&k.Running, k.ConcurrencyLimit),
				ofLimit(intPtr64(k.WindowCount), k.KeyRateLimit), ends, orDash(k.Room), queued)
		}
		if len(keys) == 0 {
			fmt.Fprintln(tw, "(no key is running or has a rate window open)")
		} else if more := keys[0].KeysInUse - int64(len(keys)); more > 0 {
			fmt.Fprintf(tw, "(%d more keys in use: --rows)\n", more)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	fmt.Fprintln(out)
	tw = table(out)
	fmt.Fprintln(tw, "SEQUENCE\tHEAD\tHELD\tFIRST HELD\tWHY IT WAITS")
	for i, s := range seqs {
		if i == rows {
			fmt.Fprintln(tw, "(more sequences hold jobs: --rows)")
			break
		}
		head := "-"
		if s.HeadID != nil {
			head = fmt.Sprintf("%d (%s)", *s.HeadID, orDash(s.HeadStatus))
		}
		held := fmt.Sprint(s.Held)
		if s.HeldMore {
			held += "+"
		}
		key := s.Key
		if s.Tenant != nil {
			key += " (tenant " + *s.Tenant + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", key, head, held, s.FirstHeld, orDash(s.Reason))
	}
	if len(seqs) == 0 {
		fmt.Fprintln(tw, "(no sequence holds jobs)")
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintln(out)
	tw = table(out)
	fmt.Fprintln(tw, "DUE JOB\tKIND\tPRIORITY\tDUE\tKEY\tWHY NOT CLAIMED")
	for _, d := range due {
		why := "nothing holds it: it waits for a worker to claim it"
		if d.Blocker != nil {
			why = *d.Blocker
		}
		key := orDash(d.ConcurrencyKey)
		if d.SequenceKey != nil {
			key = "sequence " + *d.SequenceKey
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s ago\t%s\t%s\n", d.ID, d.Kind, d.Priority, ago(d.RunAt), key, why)
	}
	if len(due) == 0 {
		fmt.Fprintln(tw, "(no job is due)")
	} else if more := c.Queued - int64(len(due)); more > 0 {
		fmt.Fprintf(tw, "(%s%d more due: runner job list --queue %s --state queued)\n", est, more, q.Queue)
	}
	return tw.Flush()
}

// rateUse shows a queue's rate with its open window ("100/1s, 40 in the window until
// 12:00:01"), "-" for none.
func rateUse(limit *int, periodSecs float64, count *int, ends *time.Time) string {
	if limit == nil {
		return "-"
	}
	p := secsDuration(periodSecs)
	s := perPeriod(limit, &p)
	if count != nil && ends != nil {
		s += fmt.Sprintf(", %d in the window for %s more", *count, age(time.Until(*ends)))
	}
	return s
}

// ofLimit shows a use beside its limit ("2/3"), the use alone without a limit, "-"
// for neither.
func ofLimit(use *int64, limit *int) string {
	switch {
	case use == nil && limit == nil:
		return "-"
	case use == nil:
		return fmt.Sprintf("0/%d", *limit)
	case limit == nil:
		return fmt.Sprint(*use)
	}
	return fmt.Sprintf("%d/%d", *use, *limit)
}

func intPtr64(p *int) *int64 {
	if p == nil {
		return nil
	}
	v := int64(*p)
	return &v
}

// secsDuration turns seconds read from an interval into a duration.
func secsDuration(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
