package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgrun/pgrun"
)

func init() { commands = append(commands, newMaintainCmd) }

// newMaintainCmd runs and tunes pgrun.maintain(), the engine's periodic work (every
// runner calls it each second; sql/functions/62_maintain.sql lists its steps).
func newMaintainCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "maintain", Short: "Run one round of maintenance, or set how often a step runs"}
	cmd.AddCommand(&cobra.Command{
		Use:   "run",
		Short: "Run one round of maintain() now and print its report as JSON (where no runner runs: cron, a test)",
		Args:  cobra.NoArgs,
		RunE: g.withClient(func(cmd *cobra.Command, _ []string, c *pgrun.Client) error {
			r, err := c.Maintain(cmd.Context())
			if err != nil {
				return err
			}
			var v any
			if err := json.Unmarshal(r.Raw, &v); err != nil {
				return err
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(v)
		}),
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "step STEP EVERY",
		Short: "Set how often maintain() runs a step: 0 every round, else at most once per EVERY (up to 24h)",
		Long: `step sets a maintenance step's cadence (pgrun.set_maintenance_step). The steps are
reap_expired_leases, fail_overdue, flag_dead_workers, forget_workers, drain_outbox,
fire_schedules, prune_history and refresh_job_stats. By default forget_workers and
prune_history run once a minute and the others every round; reaping leases and the
timeout rule should stay at every round.`,
		Example: "  runner maintain step prune_history 5m\n  runner maintain step forget_workers 0",
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			every, err := time.ParseDuration(args[1])
			if err != nil {
				return fmt.Errorf("cadence %q is not a duration such as 0, 30s or 5m", args[1])
			}
			return g.withClient(func(cmd *cobra.Command, args []string, c *pgrun.Client) error {
				s, err := c.SetMaintenanceStep(cmd.Context(), args[0], every)
				if err != nil {
					return err
				}
				when := "every round"
				if s.Every > 0 {
					when = "at most once per " + s.Every.String()
				}
				fmt.Fprintf(cmd.OutOrStdout(), "maintenance step %s runs %s\n", s.Step, when)
				return nil
			})(cmd, args)
		},
	})
	return cmd
}
