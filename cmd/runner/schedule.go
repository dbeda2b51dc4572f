package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
)

func init() { commands = append(commands, newScheduleCmd) }

func newScheduleCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "schedule", Short: "List, set, pause, resume and remove cron schedules (fired by maintain(), no pg_cron)"}
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List schedules with their next and last fire times",
		Args:  cobra.NoArgs,
		RunE: g.withPool(func(cmd *cobra.Command, _ []string, pool *pgxpool.Pool) error {
			rows, err := pool.Query(cmd.Context(), `select name, cron, kind, queue, timezone, enabled,
				next_fire_at, last_fire_at, last_job_id from pgrun.schedules order by name`)
			if err != nil {
				return err
			}
			defer rows.Close()
			tw := table(cmd.OutOrStdout())
			fmt.Fprintln(tw, "NAME\tCRON\tKIND\tQUEUE\tZONE\tENABLED\tNEXT\tLAST\tLAST JOB")
			n := 0
			for rows.Next() {
				var name, cron, kind, queue, tz string
				var enabled bool
				var next, last *time.Time
				var lastJob *int64
				if err := rows.Scan(&name, &cron, &kind, &queue, &tz, &enabled, &next, &last, &lastJob); err != nil {
					return err
				}
				n++
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%t\t%s\t%s\t%s\n", name, cron, kind, queue, tz, enabled,
					orDash(next), orDash(last), orDash(lastJob))
			}
			if n == 0 {
				fmt.Fprintln(tw, "(no schedules)")
			}
			if err := rows.Err(); err != nil {
				return err
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
		RunE: g.withPool(func(cmd *cobra.Command, args []string, pool *pgxpool.Pool) error {
			raw := "{}"
			if len(args) == 4 {
				raw = args[3]
			}
			if !json.Valid([]byte(raw)) {
				return fmt.Errorf("args %q are not valid JSON", raw)
			}
			var next time.Time
			err := pool.QueryRow(cmd.Context(), `select next_fire_at from pgrun.set_schedule($1, $2, $3, $4::jsonb, $5, $6, $7)`,
				args[0], args[1], args[2], raw, queue, tz, !disabled).Scan(&next)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "schedule %s set; next fire %s\n", args[0], next.Local().Format(time.RFC3339))
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
		RunE: g.withPool(func(cmd *cobra.Command, args []string, pool *pgxpool.Pool) error {
			if _, err := pool.Exec(cmd.Context(), `select pgrun.pause_schedule($1)`, args[0]); err != nil {
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
		RunE: g.withPool(func(cmd *cobra.Command, args []string, pool *pgxpool.Pool) error {
			var next time.Time
			err := pool.QueryRow(cmd.Context(), `select next_fire_at from pgrun.resume_schedule($1)`, args[0]).Scan(&next)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "schedule %s resumed; next fire %s\n", args[0], next.Local().Format(time.RFC3339))
			return nil
		}),
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "rm NAME",
		Short: "Remove a schedule",
		Args:  cobra.ExactArgs(1),
		RunE: g.withPool(func(cmd *cobra.Command, args []string, pool *pgxpool.Pool) error {
			if _, err := pool.Exec(cmd.Context(), `select pgrun.drop_schedule($1)`, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "schedule %s removed\n", args[0])
			return nil
		}),
	})
	return cmd
}
