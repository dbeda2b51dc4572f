package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
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
		return nil, fmt.Errorf("connect to %s: %w", cfg.ConnConfig.Host, err)
	}
	return pool, nil
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
	}
	root.PersistentFlags().StringVar(&g.databaseURL, "database-url", "",
		"PostgreSQL URL (default $PGRUN_DATABASE_URL, then $DATABASE_URL)")
	for _, newCmd := range commands {
		root.AddCommand(newCmd(g))
	}
	return root
}

// commands lists the subcommand constructors; each command file adds its own in
// an init function, so the files stay independent.
var commands []func(*globals) *cobra.Command
