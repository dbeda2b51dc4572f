package main

import (
	"fmt"
	"slices"

	"github.com/spf13/cobra"

	"github.com/pgrun/pgrun"
)

func init() { commands = append(commands, newJobsCmd) }

var statuses = []pgrun.JobStatus{pgrun.StatusPending, pgrun.StatusQueued, pgrun.StatusRunning,
	pgrun.StatusWaiting, pgrun.StatusSucceeded, pgrun.StatusFailed, pgrun.StatusCancelled, pgrun.StatusSkipped}

func newJobsCmd(g *globals) *cobra.Command {
	var (
		state, queue, kind string
		limit              int
	)
	cmd := &cobra.Command{
		Use:     "jobs",
		Short:   "List jobs, newest first (dead letters: --state failed)",
		Example: "  runner jobs --state failed --queue images --limit 20",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if state != "" && !slices.Contains(statuses, pgrun.JobStatus(state)) {
				return fmt.Errorf("--state %q is not one of %v", state, statuses)
			}
			if limit < 1 || limit > 10000 {
				return fmt.Errorf("--limit must be 1 to 10000, got %d", limit)
			}
			ctx := cmd.Context()
			pool, err := g.connect(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			rows, err := pool.Query(ctx, `select `+pgrun.JobColumns+` from pgrun.jobs
				where ($1 = '' or status::text = $1)
				  and ($2 = '' or queue = $2) and ($3 = '' or kind = $3)
				order by id desc limit $4`, state, queue, kind, limit)
			if err != nil {
				return err
			}
			jobs, err := pgrun.ScanJobs(rows)
			if err != nil {
				return err
			}
			tw := table(cmd.OutOrStdout())
			fmt.Fprintln(tw, "ID\tQUEUE\tKIND\tSTATUS\tATTEMPT\tFAILURES\tAGE\tERROR")
			for _, j := range jobs {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", j.ID, j.Queue, j.Kind, j.Status,
					j.Attempt, j.Failures, ago(j.CreatedAt), errorMessage(j.Error))
			}
			if len(jobs) == 0 {
				fmt.Fprintln(tw, "(no jobs match)")
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&state, "state", "", "only jobs in this status")
	cmd.Flags().StringVar(&queue, "queue", "", "only jobs of this queue")
	cmd.Flags().StringVar(&kind, "kind", "", "only jobs of this kind")
	cmd.Flags().IntVar(&limit, "limit", 50, "at most this many")
	return cmd
}
