package main

import (
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
)

func init() { commands = append(commands, newControlCmd, newQueueCmd) }

// newControlCmd is the operator's switch for a host's runners.
func newControlCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "control HOST QUEUE on|drain|off",
		Short: "Switch a host's runners for a queue ('*' for all): drain lets jobs finish, off requeues them",
		Args:  cobra.ExactArgs(3),
		RunE: g.withPool(func(cmd *cobra.Command, args []string, pool *pgxpool.Pool) error {
			var mode string
			if err := pool.QueryRow(cmd.Context(), `select pgrun.set_worker_control($1, $2, $3)`, args[0], args[1], args[2]).Scan(&mode); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "host %s queue %s: %s\n", args[0], args[1], mode)
			return nil
		}),
	}
}

// newQueueCmd pauses and resumes queues; finer policy is pgrun.set_queue in SQL.
func newQueueCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "queue", Short: "Pause or resume a queue (limits: SELECT pgrun.set_queue(...))"}
	for _, verb := range []string{"pause", "resume"} {
		cmd.AddCommand(&cobra.Command{
			Use:   verb + " QUEUE",
			Short: verb + " claims from a queue",
			Args:  cobra.ExactArgs(1),
			RunE: g.withPool(func(cmd *cobra.Command, args []string, pool *pgxpool.Pool) error {
				var paused bool
				if err := pool.QueryRow(cmd.Context(), `select paused from pgrun.`+verb+`_queue($1)`, args[0]).Scan(&paused); err != nil {
					return err
				}
				state := "running"
				if paused {
					state = "paused"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "queue %s %s\n", args[0], state)
				return nil
			}),
		})
	}
	return cmd
}
