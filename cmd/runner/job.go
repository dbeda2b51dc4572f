package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/pgrun/pgrun"
)

func init() { commands = append(commands, newJobCmd) }

func newJobCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "job ID",
		Short: "Show one job: its row, progress and timeline (transitions and audit log)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseID(args[0])
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			pool, err := g.connect(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			j, err := pgrun.GetJob(ctx, pool, id)
			if errors.Is(err, pgrun.ErrNotFound) {
				return fmt.Errorf("job %d does not exist", id)
			}
			if err != nil {
				return err
			}
			timeline, err := jobTimeline(ctx, pool, id)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			tw := table(out)
			fmt.Fprintf(tw, "job\t%d\n", j.ID)
			fmt.Fprintf(tw, "kind\t%s\n", j.Kind)
			fmt.Fprintf(tw, "queue\t%s\n", j.Queue)
			fmt.Fprintf(tw, "status\t%s\n", j.Status)
			fmt.Fprintf(tw, "attempt\t%d (failures %d of %d allowed, lease expiries %d)\n", j.Attempt, j.Failures, j.MaxAttempts, j.LeaseExpiries)
			fmt.Fprintf(tw, "priority\t%d\n", j.Priority)
			fmt.Fprintf(tw, "run at\t%s\n", orDash(&j.RunAt))
			fmt.Fprintf(tw, "created\t%s\n", orDash(&j.CreatedAt))
			fmt.Fprintf(tw, "started\t%s\n", orDash(j.StartedAt))
			fmt.Fprintf(tw, "finished\t%s\n", orDash(j.FinishedAt))
			fmt.Fprintf(tw, "worker\t%s\n", orDash(j.ClaimedBy))
			fmt.Fprintf(tw, "lease until\t%s\n", orDash(j.LeaseExpiresAt))
			fmt.Fprintf(tw, "timeout\t%s\n", orDash(j.Timeout))
			if j.UniqueKey != nil {
				fmt.Fprintf(tw, "unique key\t%s\n", *j.UniqueKey)
			}
			if j.ParentID != nil {
				fmt.Fprintf(tw, "parent\t%d\n", *j.ParentID)
			}
			fmt.Fprintf(tw, "args\t%s\n", compactJSON(j.Args))
			fmt.Fprintf(tw, "result\t%s\n", compactJSON(j.Result))
			fmt.Fprintf(tw, "error\t%s\n", compactJSON(j.Error))
			if j.ProgressTotal != nil {
				fmt.Fprintf(tw, "progress\t%s\n", progressBar(j.ProgressCurrent, *j.ProgressTotal))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintf(out, "\ntimeline (%d)\n", len(timeline))
			tw = table(out)
			fmt.Fprintf(tw, "at\tattempt\tlevel\tevent\tmessage\tfields\n")
			for _, e := range timeline {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.At.Local().Format("2006-01-02 15:04:05.000"), orDash(e.Attempt),
					e.Level, e.Event, orDash(e.Message), compactJSON(e.Fields))
			}
			return tw.Flush()
		},
	}
}

// timelineEntry is one row of pgrun.job_timeline.
type timelineEntry struct {
	At      time.Time       `db:"at"`
	Event   string          `db:"event"`
	Level   string          `db:"level"`
	Attempt *int32          `db:"attempt"`
	Message *string         `db:"message"`
	Fields  json.RawMessage `db:"fields"`
}

// jobTimeline reads job id's whole story: the stored events and the transitions the
// row records as timestamps (enqueued, started, the ending), oldest first.
func jobTimeline(ctx context.Context, pool *pgxpool.Pool, id int64) ([]timelineEntry, error) {
	rows, err := pool.Query(ctx, `select at, event, level, attempt, message, fields from pgrun.job_timeline($1)`, id)
	if err != nil {
		return nil, fmt.Errorf("timeline of job %d: %w", id, err)
	}
	entries, err := pgx.CollectRows(rows, pgx.RowToStructByName[timelineEntry])
	if err != nil {
		return nil, fmt.Errorf("timeline of job %d: %w", id, err)
	}
	return entries, nil
}

// progressBar renders "[#########-----------]  45% 450/1000".
func progressBar(cur, total int64) string {
	pct := 0.0
	if total > 0 {
		pct = 100 * float64(min(cur, total)) / float64(total)
	}
	return fmt.Sprintf("%s %3.0f%% %d/%d", bar(cur, total, 20), pct, cur, total)
}
