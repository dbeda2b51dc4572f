package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgrun/pgrun"
)

func init() { commands = append(commands, newScheduleCmd) }

func newScheduleCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "schedule", Short: "List, set, pause, resume and remove cron schedules (fired by maintain(), no pg_cron)"}
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List schedules with their next and last fire times",
		Args:  cobra.NoArgs,
		RunE: g.withClient(func(cmd *cobra.Command, _ []string, c *pgrun.Client) error {
			ss, err := c.Schedules(cmd.Context())
			if err != nil {
				return err
			}
			tw := table(cmd.OutOrStdout())
			fmt.Fprintln(tw, "NAME\tCRON\tKIND\tQUEUE\tZONE\tENABLED\tNEXT\tLAST\tLAST JOB")
			for _, s := range ss {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%t\t%s\t%s\t%s\n", s.Name, s.Cron, s.Kind, s.Queue, s.Timezone, s.Enabled,
					orDash(s.NextFireAt), orDash(s.LastFireAt), orDash(s.LastJobID))
			}
			if len(ss) == 0 {
				fmt.Fprintln(tw, "(no schedules)")
			}
			return tw.Flush()
		}),
	})
	var (
		queue, tz string
		disabled  bool
	)
	set := &cobra.Command{
		Use:     "set NAME CRON KIND [ARGS_JSON]",
		Short:   "Create or replace a schedule",
		Example: "  runner schedule set nightly-report '0 2 * * *' report '{\"kind\": \"daily\"}' --timezone Europe/Berlin\n  runner schedule set heartbeat '@every 30s' noop",
		Args:    cobra.RangeArgs(3, 4),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *pgrun.Client) error {
			raw := "{}"
			if len(args) == 4 {
				raw = args[3]
			}
			if !json.Valid([]byte(raw)) {
				return fmt.Errorf("args %q are not valid JSON", raw)
			}
			sc, err := c.SetSchedule(cmd.Context(), pgrun.ScheduleSpec{Name: args[0], Cron: args[1], Kind: args[2],
				Args: json.RawMessage(raw), Queue: queue, Timezone: tz, Disabled: disabled})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "schedule %s set; next fire %s\n", args[0], fireTime(sc.NextFireAt))
			return nil
		}),
	}
	set.Flags().StringVar(&queue, "queue", "default", "queue the jobs go to")
	set.Flags().StringVar(&tz, "timezone", "UTC", "time zone the cron fields are read in")
	set.Flags().BoolVar(&disabled, "disabled", false, "store it disabled")
	cmd.AddCommand(set)
	cmd.AddCommand(&cobra.Command{
		Use:   "pause NAME",
		Short: "Stop a schedule firing; its cron, kind, args, queue and time zone are kept",
		Args:  cobra.ExactArgs(1),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *pgrun.Client) error {
			if _, err := c.PauseSchedule(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "schedule %s paused\n", args[0])
			return nil
		}),
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "resume NAME",
		Short: "Let a paused schedule fire again from its next slot (missed slots are skipped)",
		Args:  cobra.ExactArgs(1),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *pgrun.Client) error {
			sc, err := c.ResumeSchedule(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "schedule %s resumed; next fire %s\n", args[0], fireTime(sc.NextFireAt))
			return nil
		}),
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "rm NAME",
		Short: "Remove a schedule",
		Args:  cobra.ExactArgs(1),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *pgrun.Client) error {
			if err := c.DropSchedule(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "schedule %s removed\n", args[0])
			return nil
		}),
	})
	return cmd
}

// fireTime renders a schedule's next fire time, "-" when it has none (disabled).
func fireTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Local().Format(time.RFC3339)
}
