package main

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/pgrun/pgrun"
)

func init() { commands = append(commands, newCancelCmd, newRetryCmd) }

func newCancelCmd(g *globals) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a job; a running one has its handler's context cancelled within a second",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return control(cmd, g, args[0], "cancelled", func(pool pgrun.DB, id int64) (*pgrun.Job, error) {
				before, err := pgrun.GetJob(cmd.Context(), pool, id)
				if err != nil {
					return nil, err
				}
				j, err := pgrun.Cancel(cmd.Context(), pool, id, reason)
				if err == nil {
					fmt.Fprintf(cmd.OutOrStdout(), "job %d cancelled (was %s)\n", id, before.Status)
				}
				return j, err
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the job's events")
	return cmd
}

func newRetryCmd(g *globals) *cobra.Command {
	var queue, kind string
	var limit int
	cmd := &cobra.Command{
		Use:     "retry [ID]",
		Short:   "Redrive a failed or cancelled job, or failed jobs in bulk with --kind/--queue",
		Example: "  runner retry 42\n  runner retry --kind resize --queue images --limit 500",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				if queue == "" && kind == "" {
					return fmt.Errorf("give a job ID, or --kind and/or --queue to redrive failed jobs in bulk")
				}
				return g.withPool(func(cmd *cobra.Command, _ []string, pool *pgxpool.Pool) error {
					var n int
					if err := pool.QueryRow(cmd.Context(), `select pgrun.retry_jobs(nullif($1, ''), nullif($2, ''), null, $3)`,
						queue, kind, limit).Scan(&n); err != nil {
						return err
					}
					fmt.Fprintf(cmd.OutOrStdout(), "%d failed jobs queued again\n", n)
					return nil
				})(cmd, args)
			}
			return control(cmd, g, args[0], "queued again", func(pool pgrun.DB, id int64) (*pgrun.Job, error) {
				j, err := pgrun.Retry(cmd.Context(), pool, id)
				if err == nil {
					fmt.Fprintf(cmd.OutOrStdout(), "job %d queued again\n", id)
				}
				return j, err
			})
		},
	}
	cmd.Flags().StringVar(&queue, "queue", "", "bulk: failed jobs of this queue")
	cmd.Flags().StringVar(&kind, "kind", "", "bulk: failed jobs of this kind")
	cmd.Flags().IntVar(&limit, "limit", 1000, "bulk: at most this many")
	return cmd
}

// control runs an operator transition on job idArg and turns the client's sentinel
// errors into one readable line.
func control(cmd *cobra.Command, g *globals, idArg, what string, do func(pgrun.DB, int64) (*pgrun.Job, error)) error {
	id, err := parseID(idArg)
	if err != nil {
		return err
	}
	pool, err := g.connect(cmd.Context())
	if err != nil {
		return err
	}
	defer pool.Close()
	j, err := do(pool, id)
	switch {
	case errors.Is(err, pgrun.ErrNotFound):
		return fmt.Errorf("job %d does not exist", id)
	case errors.Is(err, pgrun.ErrFinished), errors.Is(err, pgrun.ErrNotRetryable):
		return fmt.Errorf("job %d is %s, so it cannot be %s", id, j.Status, what)
	}
	return err
}
