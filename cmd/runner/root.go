package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/pgrun/pgrun"
)

// globals are the flags every command shares.
type globals struct {
	databaseURL string
}

// url resolves the database URL: flag, then PGRUN_DATABASE_URL, then DATABASE_URL.
func (g *globals) url() (string, error) {
	for _, u := range []string{g.databaseURL, os.Getenv("PGRUN_DATABASE_URL"), os.Getenv("DATABASE_URL")} {
		if u != "" {
			return u, nil
		}
	}
	return "", errors.New("no database: pass --database-url or set PGRUN_DATABASE_URL (scripts/ensure-postgres.sh prints one)")
}

// connect opens a pool on the database and checks that it answers.
func (g *globals) connect(ctx context.Context) (*pgxpool.Pool, error) {
	u, err := g.url()
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		return nil, fmt.Errorf("database URL: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to %s: %w", addresses(&cfg.ConnConfig.Config), err)
	}
	if strings.Contains(u, "default_query_exec_mode") {
		return pool, nil // the URL chose; a runner warns if it cannot work
	}
	// Through a pooler, pgx's default statement cache fails at the second
	// transaction: switch to the mode that works there (pgrun.PoolerExecMode).
	pooled, err := pgrun.PoolThroughPooler(pctx, pool)
	if err != nil || !pooled {
		return pool, nil // a failing check is not a failing connection: leave it to the command
	}
	pool.Close()
	cfg.ConnConfig.DefaultQueryExecMode = pgrun.PoolerExecMode
	if pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return pool, nil
}

// addresses names where c connects, for messages: host:port, or the socket's path
// for a Unix socket; a URL with several hosts gives each once, comma-separated.
func addresses(c *pgconn.Config) string {
	var out []string
	add := func(host string, port uint16) {
		a := net.JoinHostPort(host, strconv.Itoa(int(port)))
		if strings.HasPrefix(host, "/") {
			a = filepath.Join(host, ".s.PGSQL."+strconv.Itoa(int(port)))
		}
		out = appendNew(out, a)
	}
	add(c.Host, c.Port)
	for _, f := range c.Fallbacks {
		add(f.Host, f.Port)
	}
	return strings.Join(out, ", ")
}

// withClient adapts fn into a cobra RunE that connects, binds a pgrun.Client to the
// pool and closes the pool after: every statement a command sends goes through the
// client.
func (g *globals) withClient(fn func(cmd *cobra.Command, args []string, c *pgrun.Client) error) func(*cobra.Command, []string) error {
	return g.withPool(func(cmd *cobra.Command, args []string, pool *pgxpool.Pool) error {
		c, err := newClient(pool)
		if err != nil {
			return err
		}
		return fn(cmd, args, c)
	})
}

// newClient binds pool with the engine's defaults (queue "default", pages of
// pgrun.DefaultPageSize): the CLI passes every choice explicitly.
func newClient(pool *pgxpool.Pool) (*pgrun.Client, error) {
	return pgrun.NewClient(pool, pgrun.Config{})
}

// withPool adapts fn into a cobra RunE that connects first and closes the pool
// after: the shape of nearly every command.
func (g *globals) withPool(fn func(cmd *cobra.Command, args []string, pool *pgxpool.Pool) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		pool, err := g.connect(cmd.Context())
		if err != nil {
			return err
		}
		defer pool.Close()
		return fn(cmd, args, pool)
	}
}

func newRootCmd() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:           "runner",
		Short:         "pgrun: a job and workflow engine inside PostgreSQL",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       buildVersion(),
	}
	root.SetVersionTemplate("runner {{.Version}}\n")
	root.PersistentFlags().StringVar(&g.databaseURL, "database-url", "",
		"PostgreSQL URL (default $PGRUN_DATABASE_URL, then $DATABASE_URL)")
	for _, newCmd := range commands {
		root.AddCommand(newCmd(g))
	}
	for _, c := range root.Commands() {
		requireSubcommand(c)
	}
	return root
}

// requireSubcommand makes a command that only groups others (migrate, schedule,
// queue, ...) fail when its subcommand is unknown or missing. Without it cobra
// prints help and exits 0, so `runner migrate bogus` in a script looks like success.
func requireSubcommand(c *cobra.Command) {
	for _, sub := range c.Commands() {
		requireSubcommand(sub)
	}
	if !c.HasSubCommands() || c.Runnable() {
		return
	}
	c.Args = cobra.ArbitraryArgs
	if c.SuggestionsMinimumDistance <= 0 {
		c.SuggestionsMinimumDistance = 2 // cobra's own default, which SuggestionsFor does not apply
	}
	c.RunE = func(cmd *cobra.Command, args []string) error {
		choose := subcommandNames(cmd)
		if len(args) == 0 {
			return fmt.Errorf("%q needs a subcommand: one of %s", cmd.CommandPath(), choose)
		}
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			return fmt.Errorf("unknown command %q for %q: did you mean %s?", args[0], cmd.CommandPath(), strings.Join(s, " or "))
		}
		return fmt.Errorf("unknown command %q for %q: use one of %s", args[0], cmd.CommandPath(), choose)
	}
}

// subcommandNames lists cmd's subcommands that help shows, as "a, b, c".
func subcommandNames(cmd *cobra.Command) string {
	var names []string
	for _, sub := range cmd.Commands() {
		if sub.IsAvailableCommand() {
			names = append(names, sub.Name())
		}
	}
	return strings.Join(names, ", ")
}

// commands lists the subcommand constructors; each command file adds its own in
// an init function, so the files stay independent.
var commands []func(*globals) *cobra.Command

// version is this build's version, set at link time:
//
//	go build -ldflags "-X main.version=v1.2.0" ./cmd/runner
//
// Empty, buildVersion falls back to the module version the Go toolchain recorded.
var version string

// buildVersion is what `runner --version` prints and what a runner records in
// pgrun.workers: the version of the build, then the SQL API version it installs
// and calls (docs/upgrading.md), as "v1.2.0 (SQL API 3)".
func buildVersion() string {
	return fmt.Sprintf("%s (SQL API %d)", moduleVersion(), pgrun.APIVersion())
}

// moduleVersion is version, else the main module's version from the build info (a
// tagged `go install` records v1.2.0, a build in a checkout a pseudo-version or
// "(devel)"), else "devel".
func moduleVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}
