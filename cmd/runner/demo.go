package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/runner"
)

func init() { commands = append(commands, newDemoCmd) }

func newDemoCmd(g *globals) *cobra.Command {
	var scale int
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a mixed workload through the engine and show it working",
		Long: `demo installs the schema if needed, enqueues a mixed workload into queues
"default" and "images" (echo jobs, short sleeps, jobs that fail once and are retried
with backoff, jobs that fail for good, jobs scheduled a few seconds ahead), runs it
with an in-process runner while drawing progress, and prints a summary. The jobs stay
in the database to inspect with psql afterwards.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if scale < 1 {
				return fmt.Errorf("--scale must be at least 1, got %d", scale)
			}
			ctx := cmd.Context()
			pool, err := g.connect(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			if err := pgrun.Migrate(ctx, pool); err != nil {
				return err
			}
			return demo(ctx, pool, cmd.OutOrStdout(), scale)
		},
	}
	cmd.Flags().IntVar(&scale, "scale", 1, "multiply the workload")
	return cmd
}

// demoWorkload builds the mixed workload: what a small service might enqueue.
func demoWorkload(scale int) []pgrun.JobSpec {
	var specs []pgrun.JobSpec
	for i := 0; i < 1500*scale; i++ {
		specs = append(specs, pgrun.JobSpec{Kind: runner.KindEcho, Queue: "images",
			Args: map[string]any{"image": fmt.Sprintf("img-%05d.png", i), "w": 64 << (i % 3)}})
	}
	for i := 0; i < 300*scale; i++ {
		specs = append(specs, pgrun.JobSpec{Kind: runner.KindSleep,
			Args: runner.SleepArgs{MS: 5 + rand.Int64N(40)}, Priority: i % 3})
	}
	for i := 0; i < 100*scale; i++ {
		specs = append(specs, pgrun.JobSpec{Kind: runner.KindFail,
			Args: runner.FailArgs{Message: "flaky upstream", Times: 1}})
	}
	for i := 0; i < 10*scale; i++ {
		specs = append(specs, pgrun.JobSpec{Kind: runner.KindFail,
			Args: runner.FailArgs{Message: "corrupt input", Permanent: true}})
	}
	at := time.Now().Add(2 * time.Second)
	for i := 0; i < 20*scale; i++ {
		specs = append(specs, pgrun.JobSpec{Kind: runner.KindEcho, RunAt: &at,
			Args: map[string]any{"scheduled": i}})
	}
	rand.Shuffle(len(specs), func(i, j int) { specs[i], specs[j] = specs[j], specs[i] })
	return specs
}

func demo(ctx context.Context, pool *pgxpool.Pool, out io.Writer, scale int) error {
	specs := demoWorkload(scale)
	start := time.Now()
	jobs, err := pgrun.EnqueueMany(ctx, pool, specs)
	if err != nil {
		return err
	}
	first, last := jobs[0].ID, jobs[0].ID
	for _, j := range jobs {
		first, last = min(first, j.ID), max(last, j.ID)
	}
	fmt.Fprintf(out, "enqueued %d jobs (ids %d..%d) in %s\n", len(jobs), first, last, time.Since(start).Round(time.Millisecond))

	stop := startQuietRunner(ctx, pool, map[string]runner.QueueConfig{"default": {Workers: 16}, "images": {Workers: 8}})
	defer stop()

	runStart := time.Now()
	tty := isTerminal(out)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	lastPrint := time.Time{}
	for {
		p, err := demoProgress(ctx, pool, first, last)
		if err != nil {
			return err
		}
		if tty {
			fmt.Fprintf(out, "\r%s", p.line())
		} else if time.Since(lastPrint) >= time.Second || p.finished() {
			fmt.Fprintln(out, p.line())
			lastPrint = time.Now()
		}
		if p.finished() {
			break
		}
		select {
		case <-ctx.Done():
			fmt.Fprintln(out)
			return ctx.Err()
		case <-tick.C:
		}
	}
	if tty {
		fmt.Fprintln(out)
	}
	return demoSummary(ctx, pool, out, first, last, time.Since(runStart))
}

// demoCounts is the workload's state at one moment.
type demoCounts struct {
	total, done, running, succeeded, failed, retried int
}

func demoProgress(ctx context.Context, pool *pgxpool.Pool, first, last int64) (demoCounts, error) {
	var c demoCounts
	err := pool.QueryRow(ctx, `
		select count(*),
		       count(*) filter (where status in ('succeeded', 'failed', 'cancelled', 'skipped')),
		       count(*) filter (where status = 'running'),
		       count(*) filter (where status = 'succeeded'),
		       count(*) filter (where status = 'failed'),
		       count(*) filter (where failures > 0 and status = 'succeeded')
		from pgrun.jobs where id between $1 and $2`, first, last).
		Scan(&c.total, &c.done, &c.running, &c.succeeded, &c.failed, &c.retried)
	return c, err
}

func (c demoCounts) finished() bool { return c.total > 0 && c.done == c.total }

func (c demoCounts) line() string {
	return fmt.Sprintf("%s %5d/%d done, %3d running, %4d succeeded, %3d failed, %3d retried",
		bar(int64(c.done), int64(c.total), 30), c.done, c.total, c.running, c.succeeded, c.failed, c.retried)
}

// bar draws a text progress bar of width cells.
func bar(cur, total int64, width int) string {
	if total <= 0 {
		return "[" + strings.Repeat("-", width) + "]"
	}
	n := int(int64(width) * min(cur, total) / total)
	return "[" + strings.Repeat("#", n) + strings.Repeat("-", width-n) + "]"
}

func demoSummary(ctx context.Context, pool *pgxpool.Pool, out io.Writer, first, last int64, took time.Duration) error {
	rows, err := pool.Query(ctx, `
		select queue, kind, status::text, count(*), sum(failures)
		from pgrun.jobs where id between $1 and $2
		group by 1, 2, 3 order by 1, 2, 3`, first, last)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "\nqueue    kind   status     jobs  failed attempts")
	var total int
	for rows.Next() {
		var queue, kind, status string
		var n, failures int
		if err := rows.Scan(&queue, &kind, &status, &n, &failures); err != nil {
			return err
		}
		total += n
		fmt.Fprintf(out, "%-8s %-6s %-9s %5d  %5d\n", queue, kind, status, n, failures)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	var p50, p99 float64
	if err := pool.QueryRow(ctx, `
		select 1000 * percentile_cont(0.5) within group (order by extract(epoch from started_at - run_at)),
		       1000 * percentile_cont(0.99) within group (order by extract(epoch from started_at - run_at))
		from pgrun.jobs where id between $1 and $2 and attempt = 1 and failures = 0`, first, last).Scan(&p50, &p99); err != nil {
		return err
	}
	fmt.Fprintf(out, "\n%d jobs in %s (%.0f jobs/s); time from due to started p50 %.1f ms, p99 %.1f ms\n",
		total, took.Round(time.Millisecond), float64(total)/took.Seconds(), p50, p99)
	fmt.Fprintf(out, "The failed jobs are dead letters by design (\"corrupt input\"); the retried ones failed once and succeeded after backoff.\n")
	fmt.Fprintf(out, "Inspect: psql \"$PGRUN_DATABASE_URL\" -c 'select * from pgrun.queue_stats'   or   runner job %d\n", last)
	return nil
}

// isTerminal reports whether w is a terminal, where progress redraws in place.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
