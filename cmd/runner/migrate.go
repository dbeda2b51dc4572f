package main

import (
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/pgrun/pgrun"
)

func init() { commands = append(commands, newMigrateCmd) }

// newMigrateCmd installs, removes and reports schema pgrun.
func newMigrateCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "migrate", Short: "Install, remove or inspect schema pgrun"}
	cmd.AddCommand(&cobra.Command{
		Use:   "up",
		Short: "Apply pending migrations and the function set (a no-op when current)",
		Args:  cobra.NoArgs,
		RunE: g.withPool(func(cmd *cobra.Command, _ []string, pool *pgxpool.Pool) error {
			before, _, err := pgrun.SchemaVersion(cmd.Context(), pool)
			if err != nil {
				return err
			}
			if err := pgrun.Migrate(cmd.Context(), pool); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "schema pgrun at version %d (was %d); functions %s\n",
				pgrun.LatestVersion(), before, pgrun.FunctionsChecksum()[:12])
			return nil
		}),
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "down",
		Short: "Reverse every migration: drops schema pgrun and all its jobs",
		Args:  cobra.NoArgs,
		RunE: g.withPool(func(cmd *cobra.Command, _ []string, pool *pgxpool.Pool) error {
			if err := pgrun.MigrateDown(cmd.Context(), pool); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "schema pgrun removed")
			return nil
		}),
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the applied schema version and the newest this build has",
		Args:  cobra.NoArgs,
		RunE: g.withPool(func(cmd *cobra.Command, _ []string, pool *pgxpool.Pool) error {
			v, dirty, err := pgrun.SchemaVersion(cmd.Context(), pool)
			if err != nil {
				return err
			}
			state := ""
			if dirty {
				state = " DIRTY (a migration failed half-way)"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "schema version %d (latest %d)%s\n", v, pgrun.LatestVersion(), state)
			return nil
		}),
	})
	return cmd
}
