package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/pgrun/pgrun/internal/sqlapi"
	"github.com/pgrun/pgrun/internal/top"
)

func init() { commands = append(commands, newStatusCmd) }

// queueRow is one queue's line of the report (internal/top reads it).
type queueRow = top.Queue

// unhandledLines flags, one line per queue, due jobs that no live worker serves or
// whose kinds none handles.
func unhandledLines(queues []queueRow) []string { return top.Warnings(queues) }

// healthRow is one warning about the database under the queue (pgrun.health, read
// with sqlapi.Health): what is wrong and what to do about it.
type healthRow struct {
	Check    string         `db:"check_name" json:"check"`
	Severity string         `db:"severity" json:"severity"`
	Message  string         `db:"message" json:"message"`
	Hint     string         `db:"hint" json:"hint"`
	Fields   map[string]any `db:"fields" json:"fields"`
}

// readHealth reads pgrun.health. A role that may not call it (only pgrun_admin
// members and the dashboard's reader are granted it) gets no rows and a note
// saying so, not a failed report: the rest of status is still worth printing.
func readHealth(ctx context.Context, pool *pgxpool.Pool) ([]healthRow, string) {
	rows, err := pool.Query(ctx, sqlapi.Health)
	if err == nil {
		var list []healthRow
		if list, err = pgx.CollectRows(rows, pgx.RowToStructByName[healthRow]); err == nil {
			return list, ""
		}
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42501" {
		return nil, "(health not checked: this role lacks EXECUTE on pgrun.health; connect as a member of pgrun_admin)"
	}
	return nil, fmt.Sprintf("(health not checked: %v)", err)
}

// hostRow is one host's latest hardware sample (pgrun.host_status).
type hostRow struct {
	Host     string      `db:"host" json:"host"`
	At       time.Time   `db:"at" json:"at"`
	CPUPct   float32     `db:"cpu_pct" json:"cpu_pct"`
	MemUsed  int64       `db:"mem_used" json:"mem_used"`
	MemTotal int64       `db:"mem_total" json:"mem_total"`
	GPUs     []gpuSample `db:"gpus" json:"gpus"`
}

func newStatusCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show each queue (jobs by state, oldest wait, throughput over 10 s and 1 min, live workers), the workers and the hosts",
		Long: `status prints one line per queue: jobs by state, the age of the oldest due job,
the live workers serving it, and the jobs finished per second over the last 10
seconds and over the last minute (each column says which). A queue whose due jobs
no live worker serves, or whose kinds no live worker handles, is flagged below the
table, and so is what needs a person in the database under the queue (pgrun.health:
autovacuum off, dead rows over live, a snapshot held for minutes, no maintenance
lately), each with what to do on the line after it. Workers follow, live first; a
worker silent for three heartbeat cadences is listed as dead (whether or not it held
jobs) and one that shut down as stopped.
runner top shows the same, live.`,
		Args: cobra.NoArgs,
		RunE: g.withPool(func(cmd *cobra.Command, _ []string, pool *pgxpool.Pool) error {
			ctx := cmd.Context()
			queues, err := top.ReadQueues(ctx, pool)
			if err != nil {
				return err
			}
			workers, err := top.ReadWorkers(ctx, pool)
			if err != nil {
				return err
			}
			rows, err := pool.Query(ctx, sqlapi.StatusHosts)
			if err != nil {
				return err
			}
			hosts, err := pgx.CollectRows(rows, pgx.RowToStructByName[hostRow])
			if err != nil {
				return err
			}
			health, note := readHealth(ctx, pool)
			out := cmd.OutOrStdout()
			if asJSON {
				if health == nil {
					health = []healthRow{}
				}
				doc := map[string]any{"queues": queues, "workers": workers,
					"warnings": nonNil(top.Warnings(queues)), "health": health, "hosts": hosts}
				if note != "" {
					doc["health_error"] = note
				}
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(doc)
			}
			return printStatus(out, queues, workers, hosts, health, note)
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// printStatus writes the report for a person. Below the queue table come the
// queues' own flags, then health's warnings, each with its hint on the next line; a
// flag that health repeats word for word (a queue no live worker serves) is printed
// once, with the hint.
func printStatus(out io.Writer, queues []queueRow, workers []top.Worker, hosts []hostRow, health []healthRow, healthNote string) error {
	tw := table(out)
	fmt.Fprintln(tw, "QUEUE\tQUEUED\tSCHEDULED\tRUNNING\tPENDING\tWAITING\tOLDEST\tWORKERS\tDONE/FAILED last 10s\tJOBS/s last 10s\tDONE/FAILED last 1m\tJOBS/s last 1m")
	estimated := false
	for _, q := range queues {
		n := func(v int64) string {
			s := top.Count(q, v)
			estimated = estimated || strings.HasPrefix(s, "~")
			return s
		}
		name := q.Queue
		if q.Paused {
			name += " (paused)"
		}
		oldest := "-"
		if q.OldestQueuedAge != nil {
			oldest = age(*q.OldestQueuedAge)
		}
		mark := func(est bool) string {
			if est {
				estimated = true
				return "~"
			}
			return ""
		}
		m10, m1 := mark(q.Estimated10s), mark(q.Estimated && q.Succeeded1m+q.Failed1m > 10000)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s%d/%d\t%s%.1f\t%s%d/%d\t%s%.1f\n", name, n(q.Queued), n(q.Scheduled),
			n(q.Running), n(q.Pending), n(q.Waiting), oldest, q.LiveWorkers,
			m10, q.Succeeded10s, q.Failed10s, m10, q.JobsPerSec10s, m1, q.Succeeded1m, q.Failed1m, m1, q.JobsPerSec1m)
	}
	if estimated {
		fmt.Fprintln(tw, "(~: estimated; counts over 10,000 are sampled)")
	}
	if len(queues) == 0 {
		fmt.Fprintln(tw, "(no queues yet)")
	}
	said := map[string]bool{}
	for _, h := range health {
		said[h.Message] = true
	}
	var lines []string
	for _, l := range top.Warnings(queues) {
		if !said[l] {
			lines = append(lines, l)
		}
	}
	for _, h := range health {
		lines = append(lines, h.Message, "  hint: "+h.Hint)
	}
	if healthNote != "" {
		lines = append(lines, healthNote)
	}
	if len(lines) > 0 {
		fmt.Fprintln(tw)
		for _, l := range lines {
			fmt.Fprintln(tw, l)
		}
	}

	// Workers: the live in one table, the dead and the stopped apart.
	var live, dead, stopped []top.Worker
	for _, w := range workers {
		switch w.Liveness {
		case "live":
			live = append(live, w)
		case "dead":
			dead = append(dead, w)
		default:
			stopped = append(stopped, w)
		}
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "WORKER\tSTATE\tQUEUES\tRUNNING\tLAST SEEN")
	for _, w := range live {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s ago\n", w.ID, w.State, strings.Join(w.Queues, ","), w.Running, age(w.SinceSeen))
	}
	switch {
	case len(workers) == 0:
		fmt.Fprintln(tw, "(no workers registered)")
	case len(live) == 0:
		fmt.Fprintln(tw, "(no live workers)")
	}
	if len(dead) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "DEAD WORKER\tHOST\tQUEUES\tHELD JOBS\tLAST SEEN")
		for _, w := range dead {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s ago\n", w.ID, w.Host, strings.Join(w.Queues, ","), w.Running, age(w.SinceSeen))
		}
		fmt.Fprintln(tw, "(dead: silent for three heartbeat cadences, or flagged; the jobs it held come back when their leases expire)")
	}
	if len(stopped) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "STOPPED WORKER\tHOST\tQUEUES\tSTOPPED")
		for _, w := range stopped {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s ago\n", w.ID, w.Host, strings.Join(w.Queues, ","), age(w.SinceSeen))
		}
	}

	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "HOST\tCPU\tMEMORY\tGPUS\tSAMPLED")
	for _, h := range hosts {
		fmt.Fprintf(tw, "%s\t%.0f%%\t%.1f/%.1f GiB\t%s\t%s ago\n", h.Host, h.CPUPct,
			float64(h.MemUsed)/(1<<30), float64(h.MemTotal)/(1<<30), describeGPUs(h.GPUs), ago(h.At))
	}
	if len(hosts) == 0 {
		fmt.Fprintln(tw, "(no hardware samples)")
	}
	return tw.Flush()
}

// nonNil makes an empty list print as [] in JSON, not null.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
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
