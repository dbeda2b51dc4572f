package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/pgrun/pgrun"
)

// newJobWhyCmd prints why a queued or pending job is not being claimed now
// (pgrun.job_blocker, sql/functions/70_stats.sql): held by its sequence, not due yet,
// its queue paused, no live worker for its queue or kind, a queue or per-key limit
// reached. `runner job get` shows the same on its "not claimed" line.
func newJobWhyCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "why ID",
		Short: "Say why a queued or pending job is not being claimed now",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseID(args[0])
			if err != nil {
				return err
			}
			return g.withClient(func(cmd *cobra.Command, _ []string, c *pgrun.Client) error {
				why, err := c.JobBlocker(cmd.Context(), id)
				if err != nil {
					return err
				}
				if why == "" {
					why = "nothing holds it: it is not queued or pending, or it waits only for the jobs ahead of it"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "job %d: %s\n", id, why)
				return nil
			})(cmd, args)
		},
	}
}

// jobBlocker is job j's blocker for `runner job get`, "" when nothing holds it or when
// it cannot be read (a role without EXECUTE on pgrun.job_blocker still sees the rest).
func jobBlocker(ctx context.Context, c *pgrun.Client, j *pgrun.Job) string {
	if j.Status != pgrun.StatusQueued && j.Status != pgrun.StatusPending {
		return ""
	}
	why, err := c.JobBlocker(ctx, j.ID)
	if err != nil {
		return ""
	}
	return why
}
