package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/pgrun/pgrun"
)

func init() { commands = append(commands, newJobCmd) }

func newJobCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "job ID",
		Short: "Show one job: its row, progress and audit log",
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
			events, err := pgrun.Events(ctx, pool, id)
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
			fmt.Fprintf(out, "\nevents (%d)\n", len(events))
			tw = table(out)
			for _, e := range events {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.At.Local().Format("2006-01-02 15:04:05.000"), e.Level, e.Event,
					orDash(e.Message), compactJSON(e.Fields))
			}
			return tw.Flush()
		},
	}
}

// progressBar renders "[#########-----------]  45% 450/1000".
func progressBar(cur, total int64) string {
	pct := 0.0
	if total > 0 {
		pct = 100 * float64(min(cur, total)) / float64(total)
	}
	return fmt.Sprintf("%s %3.0f%% %d/%d", bar(cur, total, 20), pct, cur, total)
}
