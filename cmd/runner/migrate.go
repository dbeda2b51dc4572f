package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/progress"
)

func init() { commands = append(commands, newMigrateCmd) }

// newMigrateCmd installs, removes and reports schema pgrun.
func newMigrateCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "migrate", Short: "Install, remove or inspect schema pgrun"}
	var opts pgrun.MigrateOptions
	up := &cobra.Command{
		Use:   "up",
		Short: "Apply pending migrations, the function set and the roles' grants (a no-op when current)",
		Long: `up applies pending migrations and the function set, then creates (if missing) and
grants the roles pgrun_enqueuer, pgrun_worker and pgrun_admin (see docs/security.md).
Where the migrating role may not create roles, pass --no-create-roles and have a DBA
run the statements of "runner migrate grants".`,
		Args:    cobra.NoArgs,
		PreRunE: func(*cobra.Command, []string) error { return checkRolePrefix(opts.RolePrefix) },
		RunE: g.withPool(func(cmd *cobra.Command, _ []string, pool *pgxpool.Pool) error {
			before, _, err := pgrun.SchemaVersion(cmd.Context(), pool)
			if err != nil {
				return err
			}
			if err := pgrun.MigrateWith(cmd.Context(), pool, opts); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "schema pgrun at version %d (was %d); functions %s\n",
				pgrun.LatestVersion(), before, pgrun.FunctionsChecksum()[:12])
			if opts.NoCreateRoles {
				fmt.Fprintln(cmd.OutOrStdout(), "roles not created: a DBA runs the statements of `runner migrate grants` (then run migrate up again)")
			}
			return nil
		}),
	}
	up.Flags().StringVar(&opts.RolePrefix, "role-prefix", pgrun.DefaultRolePrefix, "prefix of the role names (PREFIXenqueuer, PREFIXworker, PREFIXadmin)")
	up.Flags().BoolVar(&opts.NoCreateRoles, "no-create-roles", false, "do not create missing roles (managed databases): grant those that exist")
	cmd.AddCommand(up)
	var grantsPrefix string
	grants := &cobra.Command{
		Use:     "grants",
		Short:   "Print the SQL that creates the roles and grants them, for a DBA",
		Args:    cobra.NoArgs,
		PreRunE: func(*cobra.Command, []string) error { return checkRolePrefix(grantsPrefix) },
		RunE: g.withPool(func(cmd *cobra.Command, _ []string, pool *pgxpool.Pool) error {
			sql, err := pgrun.GrantsSQL(cmd.Context(), pool, grantsPrefix)
			if err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), sql)
			return nil
		}),
	}
	grants.Flags().StringVar(&grantsPrefix, "role-prefix", pgrun.DefaultRolePrefix, "prefix of the role names")
	cmd.AddCommand(grants)
	var yes bool
	down := &cobra.Command{
		Use:   "down",
		Short: "Reverse every migration: drops schema pgrun and all its jobs (asks first, or --yes)",
		Args:  cobra.NoArgs,
		RunE: g.withPool(func(cmd *cobra.Command, _ []string, pool *pgxpool.Pool) error {
			if !yes {
				if err := confirmDown(cmd); err != nil {
					return err
				}
			}
			if err := pgrun.MigrateDown(cmd.Context(), pool); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "schema pgrun removed")
			return nil
		}),
	}
	down.Flags().BoolVar(&yes, "yes", false, "do not ask: drop schema pgrun and every job")
	cmd.AddCommand(down)
	var sqlOpts pgrun.MigrateOptions
	sqlCmd := &cobra.Command{
		Use:   "sql",
		Short: "Print the complete installation as one SQL script (tables, functions, roles), for your own schema tool",
		Long: `sql prints, without connecting, what migrate up does to a database without schema
pgrun: the migrations, the function set, the roles and their grants, and the version
records that make a later "runner migrate up" of this build a no-op. It runs in one
transaction:

  runner migrate sql > pgrun.sql && psql -v ON_ERROR_STOP=1 -f pgrun.sql "$DATABASE_URL"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkRolePrefix(sqlOpts.RolePrefix); err != nil {
				return err
			}
			script, err := pgrun.InstallSQL(sqlOpts)
			if err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), script)
			return nil
		},
	}
	sqlCmd.Flags().StringVar(&sqlOpts.RolePrefix, "role-prefix", pgrun.DefaultRolePrefix, "prefix of the role names")
	cmd.AddCommand(sqlCmd)
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

// checkRolePrefix refuses, before anything connects, a --role-prefix that
// pgrun.MigrateWith would refuse (pgrun.CheckRolePrefix: role names PostgreSQL would
// cut), so that migrate up, grants and sql accept the same prefixes. An empty prefix
// is refused too: the library reads it as the default, pgrun_, which nobody typing
// --role-prefix "" means.
func checkRolePrefix(prefix string) error {
	if prefix == "" {
		return fmt.Errorf(`--role-prefix "" is empty: give a prefix such as acme_, or leave the flag out for %s`, pgrun.DefaultRolePrefix)
	}
	if pgrun.CheckRolePrefix(prefix) != nil {
		n := pgrun.RolesFor(prefix).Enqueuer // the longest name
		return fmt.Errorf("--role-prefix %q is %d bytes, too long: role PREFIX%s would be %d bytes, over PostgreSQL's limit of %d; give a prefix of at most %d bytes",
			prefix, len(prefix), n[len(prefix):], len(n), pgrun.MaxRoleNameBytes, pgrun.MaxRoleNameBytes-(len(n)-len(prefix)))
	}
	return nil
}

// confirmDown asks on the terminal before migrate down drops every job; without a
// terminal it refuses, since nobody can answer.
func confirmDown(cmd *cobra.Command) error {
	in, ok := cmd.InOrStdin().(*os.File)
	if !ok || !progress.IsTerminal(in) {
		return errors.New("migrate down drops schema pgrun and every job in it; pass --yes to confirm")
	}
	fmt.Fprint(cmd.ErrOrStderr(), "migrate down drops schema pgrun and every job in it. Type yes to go on: ")
	answer, _ := bufio.NewReader(in).ReadString('\n')
	if strings.TrimSpace(answer) != "yes" {
		return errors.New("migrate down: not confirmed; nothing changed")
	}
	return nil
}
