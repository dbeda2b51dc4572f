package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pgrun/pgrun"
)

func init() { commands = append(commands, newWorkerCmd) }

// newWorkerCmd shows the registered runners and the operator's switches for them.
func newWorkerCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "worker", Short: "List workers and switch a host's runners on, to drain or off"}
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List registered workers (alive, draining, stopped, dead) and the switches an operator set",
		Args:  cobra.NoArgs,
		RunE: g.withClient(func(cmd *cobra.Command, _ []string, c *pgrun.Client) error {
			ws, err := c.Workers(cmd.Context())
			if err != nil {
				return err
			}
			controls, err := c.WorkerControls(cmd.Context())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			tw := table(out)
			fmt.Fprintln(tw, "WORKER\tHOST\tSTATE\tLIVENESS\tQUEUES\tRUNNING\tMODELS\tVERSION\tLAST SEEN")
			for _, w := range ws {
				state := w.State
				if w.FlaggedDeadAt != nil {
					state += " (flagged dead)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s ago\n", w.ID, w.Host, state, w.Liveness,
					strings.Join(w.Queues, ","), w.Running, orDash(nonEmpty(strings.Join(w.Models, ","))),
					orDash(w.Version), age(w.SinceSeen))
			}
			if len(ws) == 0 {
				fmt.Fprintln(tw, "(no workers registered)")
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if len(controls) == 0 {
				return nil
			}
			fmt.Fprintln(out)
			tw = table(out)
			fmt.Fprintln(tw, "HOST\tQUEUE\tMODE\tSET")
			for _, wc := range controls {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s ago\n", wc.Host, wc.Queue, wc.Mode, ago(wc.UpdatedAt))
			}
			return tw.Flush()
		}),
	})
	cmd.AddCommand(newWorkerControlCmd(g))
	return cmd
}

// newWorkerControlCmd is the operator's switch for a host's runners
// (pgrun.set_worker_control).
func newWorkerControlCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "control HOST QUEUE on|drain|off",
		Short:   "Switch a host's runners for a queue ('*' for all): drain lets jobs finish, off requeues them",
		Example: "  runner worker control box-1 '*' drain\n  runner worker control box-1 images on",
		Args:    cobra.ExactArgs(3),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *pgrun.Client) error {
			if err := c.SetWorkerControl(cmd.Context(), args[0], args[1], pgrun.WorkerMode(args[2])); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "host %s queue %s: %s\n", args[0], args[1], args[2])
			return nil
		}),
	}
}

// nonEmpty is &s, or nil for "" (printed "-").
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
