package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"
)

func init() { commands = append(commands, newStatusCmd) }

// queueRow is one row of pgrun.queue_stats.
type queueRow struct {
	Queue           string         `db:"queue" json:"queue"`
	Paused          bool           `db:"paused" json:"paused"`
	Queued          int64          `db:"queued" json:"queued"`
	Scheduled       int64          `db:"scheduled" json:"scheduled"`
	Running         int64          `db:"running" json:"running"`
	Pending         int64          `db:"pending" json:"pending"`
	Waiting         int64          `db:"waiting" json:"waiting"`
	OldestQueuedAge *time.Duration `db:"oldest_queued_age" json:"oldest_queued_age_seconds"`
	Succeeded1m     int64          `db:"succeeded_1m" json:"succeeded_1m"`
	Failed1m        int64          `db:"failed_1m" json:"failed_1m"`
	Cancelled1m     int64          `db:"cancelled_1m" json:"cancelled_1m"`
	// Unhandled counts the queue's due jobs of kinds no live worker handles: they
	// wait for a deploy, not for capacity.
	Unhandled int64 `db:"unhandled" json:"unhandled"`
	// Estimated is true when a number of the row is an estimate (over
	// pgrun.stats_exact_limit(), counts are sampled): they print with a "~".
	Estimated bool `db:"estimated" json:"estimated"`
}

// queueStatsQuery reads pgrun.queue_stats. unhandled is read by name through
// to_jsonb so that this build still reports on a schema from before the column
// existed (it reads 0 there) instead of failing.
const queueStatsQuery = `select queue, paused, queued, scheduled, running, pending, waiting,
	oldest_queued_age, succeeded_1m, failed_1m, cancelled_1m,
	coalesce((to_jsonb(s) ->> 'unhandled')::bigint, 0) as unhandled,
	coalesce((to_jsonb(s) ->> 'estimated')::boolean, false) as estimated
	from pgrun.queue_stats s order by queue`

// unhandledLines warns, one line per queue, about due jobs no live worker handles.
func unhandledLines(queues []queueRow) []string {
	var lines []string
	for _, q := range queues {
		switch {
		case q.Unhandled == 1:
			lines = append(lines, fmt.Sprintf("%s: 1 queued job of a kind no live worker handles", q.Queue))
		case q.Unhandled > 1:
			lines = append(lines, fmt.Sprintf("%s: %d queued jobs of kinds no live worker handles", q.Queue, q.Unhandled))
		}
	}
	return lines
}

// workerRow is one row of pgrun.worker_status.
type workerRow struct {
	ID       string    `db:"id" json:"id"`
	Host     string    `db:"host" json:"host"`
	PID      int32     `db:"pid" json:"pid"`
	State    string    `db:"state" json:"state"`
	Queues   []string  `db:"queues" json:"queues"`
	Models   []string  `db:"models" json:"models"`
	LastSeen time.Time `db:"last_seen" json:"last_seen"`
	Running  int64     `db:"running" json:"running"`
}

func newStatusCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show each queue (jobs by state, oldest wait, last minute's throughput) and the workers",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			pool, err := g.connect(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			rows, err := pool.Query(ctx, queueStatsQuery)
			if err != nil {
				return err
			}
			queues, err := pgx.CollectRows(rows, pgx.RowToStructByName[queueRow])
			if err != nil {
				return err
			}
			rows, err = pool.Query(ctx, `select id, host, pid, state, queues, models, last_seen, running
				from pgrun.worker_status order by id`)
			if err != nil {
				return err
			}
			workers, err := pgx.CollectRows(rows, pgx.RowToStructByName[workerRow])
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				for i := range queues {
					if d := queues[i].OldestQueuedAge; d != nil {
						s := time.Duration(d.Seconds()) // JSON carries seconds
						queues[i].OldestQueuedAge = &s
					}
				}
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(map[string]any{"queues": queues, "workers": workers})
			}
			tw := table(out)
			fmt.Fprintln(tw, "QUEUE\tQUEUED\tSCHEDULED\tRUNNING\tPENDING\tWAITING\tOLDEST\tDONE/1m\tFAILED/1m\tJOBS/s (1m avg)")
			estimated := false
			for _, q := range queues {
				// A large count is what gets estimated; the small ones beside it are exact.
				n := func(v int64) string {
					if q.Estimated && v > 10000 {
						estimated = true
						return fmt.Sprintf("~%d", v)
					}
					return fmt.Sprint(v)
				}
				name := q.Queue
				if q.Paused {
					name += " (paused)"
				}
				oldest := "-"
				if q.OldestQueuedAge != nil {
					oldest = age(*q.OldestQueuedAge)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f\n", name, n(q.Queued), n(q.Scheduled),
					n(q.Running), n(q.Pending), n(q.Waiting), oldest, n(q.Succeeded1m), n(q.Failed1m),
					float64(q.Succeeded1m+q.Failed1m)/60)
			}
			if estimated {
				fmt.Fprintln(tw, "(~: estimated; counts over 10,000 are sampled)")
			}
			if len(queues) == 0 {
				fmt.Fprintln(tw, "(no queues yet)")
			}
			if lines := unhandledLines(queues); len(lines) > 0 {
				fmt.Fprintln(tw)
				for _, l := range lines {
					fmt.Fprintln(tw, l)
				}
			}
			fmt.Fprintln(tw)
			fmt.Fprintln(tw, "WORKER\tSTATE\tQUEUES\tRUNNING\tLAST SEEN")
			for _, w := range workers {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s ago\n", w.ID, w.State, strings.Join(w.Queues, ","), w.Running, ago(w.LastSeen))
			}
			if len(workers) == 0 {
				fmt.Fprintln(tw, "(no workers registered)")
			}
			fmt.Fprintln(tw)
			fmt.Fprintln(tw, "HOST\tCPU\tMEMORY\tGPUS\tSAMPLED")
			hosts, err := pool.Query(ctx, `select host, at, coalesce(cpu_pct, 0), coalesce(mem_used, 0),
				coalesce(mem_total, 0), gpus from pgrun.host_status order by host`)
			if err != nil {
				return err
			}
			defer hosts.Close()
			n := 0
			for hosts.Next() {
				var host string
				var at time.Time
				var cpu float32
				var used, total int64
				var gpus []gpuSample
				if err := hosts.Scan(&host, &at, &cpu, &used, &total, &gpus); err != nil {
					return err
				}
				n++
				fmt.Fprintf(tw, "%s\t%.0f%%\t%.1f/%.1f GiB\t%s\t%s ago\n", host, cpu,
					float64(used)/(1<<30), float64(total)/(1<<30), describeGPUs(gpus), ago(at))
			}
			if n == 0 {
				fmt.Fprintln(tw, "(no hardware samples)")
			}
			if err := hosts.Err(); err != nil {
				return err
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// gpuSample is one GPU of a hardware sample.
type gpuSample struct {
	Index       int    `json:"index"`
	Name        string `json:"name"`
	MemoryTotal int64  `json:"memory_total"`
	MemoryUsed  int64  `json:"memory_used"`
	Utilization int    `json:"utilization"`
}

// describeGPUs renders "0:A100 37% 1.0/40.0 GiB" per GPU, or "none".
func describeGPUs(gpus []gpuSample) string {
	if len(gpus) == 0 {
		return "none (CPU)"
	}
	parts := make([]string, len(gpus))
	for i, g := range gpus {
		parts[i] = fmt.Sprintf("%d:%s %d%% %.1f/%.1f GiB", g.Index, g.Name, g.Utilization,
			float64(g.MemoryUsed)/(1<<30), float64(g.MemoryTotal)/(1<<30))
	}
	return strings.Join(parts, ", ")
}
