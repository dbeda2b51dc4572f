package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/metrics"
	"github.com/pgrun/pgrun/ui"
)

func init() { commands = append(commands, newUICmd) }

// uiShutdownGrace is how long `runner ui` lets requests in flight finish after a
// signal; open event streams are ended at once.
const uiShutdownGrace = 5 * time.Second

func newUICmd(g *globals) *cobra.Command {
	var addr, auth, token string
	var readOnly, insecure bool
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Serve the web dashboard (queues, jobs, runs, workers, schedules, dead letters)",
		Long: `Serve the web dashboard from this binary: queues, jobs, workflow runs as graphs,
workers and hosts, schedules and dead letters, updated live from the engine's
notifications; with actions (cancel, retry, pause, resume, worker control) unless
--read-only. It binds 127.0.0.1 by default and refuses any other address without
--auth or --auth-token. Connect as a role that can read pgrun (read-only) or as a
member of pgrun_admin (actions): see docs/ui.md.

It also serves Prometheus metrics at /metrics, behind the same authentication: the
queue gauges read from the database at each scrape (docs/metrics.md); the job
counters are a runner's, on runner work --metrics-addr.

The credentials may come from the environment instead of the command line (where
other users of the host can see them): PGRUN_UI_AUTH=basic:USER:PASSWORD and
PGRUN_UI_TOKEN=TOKEN.`,
		Example: "  runner ui\n  runner ui --read-only\n  PGRUN_UI_TOKEN=$(openssl rand -hex 16) runner ui --addr 0.0.0.0:8080",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if auth == "" {
				auth = os.Getenv("PGRUN_UI_AUTH")
			}
			if token == "" {
				token = os.Getenv("PGRUN_UI_TOKEN")
			}
			opts := ui.Options{ReadOnly: readOnly, Token: token,
				Logger: slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))}
			if auth != "" {
				var err error
				if opts.BasicUser, opts.BasicPassword, err = ui.ParseAuth(auth); err != nil {
					return err
				}
			}
			if err := ui.CheckListen(addr, opts.BasicUser != "" || token != "", insecure); err != nil {
				return err
			}
			if err := ui.CheckSecret(addr, "--auth-token", token); err != nil {
				return err
			}
			if err := ui.CheckSecret(addr, "the --auth password", opts.BasicPassword); err != nil {
				return err
			}
			pool, err := g.connect(cmd.Context())
			if err != nil {
				return err
			}
			if pool, err = tunedPool(cmd.Context(), pool); err != nil {
				return err
			}
			defer pool.Close()
			opts.Metrics = metrics.New(pool).Handler()
			h, err := ui.New(pool, opts)
			if err != nil {
				return err
			}
			defer h.Close()
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return err
			}
			srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: time.Minute,
				IdleTimeout: 2 * time.Minute}
			mode := "actions enabled"
			if readOnly {
				mode = "read-only"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "dashboard on http://%s (%s), metrics on /metrics; Ctrl-C stops it\n", ln.Addr(), mode)
			done := make(chan error, 1)
			go func() { done <- srv.Serve(ln) }()
			select {
			case err := <-done:
				return err
			case <-cmd.Context().Done():
			}
			h.Close() // ends the event streams, which Shutdown would wait for
			sctx, cancel := context.WithTimeout(context.Background(), uiShutdownGrace)
			defer cancel()
			if err := srv.Shutdown(sctx); err != nil {
				return err
			}
			if err := <-done; !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", "127.0.0.1:8080", "address to listen on (host:port)")
	f.BoolVar(&readOnly, "read-only", false, "disable every action (checked on the server)")
	f.StringVar(&auth, "auth", "", "require HTTP basic authentication: basic:USER:PASSWORD (default $PGRUN_UI_AUTH)")
	f.StringVar(&token, "auth-token", "", "require a bearer token (or the /login cookie) (default $PGRUN_UI_TOKEN)")
	f.BoolVar(&insecure, "insecure-no-auth", false, "allow a non-loopback --addr without authentication (something in front must authenticate)")
	return cmd
}

// tunedPool replaces pool with one whose connections run with the dashboard's
// settings (ui.TunePool: JIT and parallel query off) and closes pool; the first page
// on a new connection no longer pays for compiling its queries. Through a connection pooler it keeps
// pool as it is: PgBouncer refuses the startup parameter, and a SET would stay on a
// server connection that other clients get next.
func tunedPool(ctx context.Context, pool *pgxpool.Pool) (*pgxpool.Pool, error) {
	if pooled, err := pgrun.PoolThroughPooler(ctx, pool); err != nil || pooled {
		return pool, nil // a failing check is not a failing dashboard: the pages keep JIT
	}
	cfg := pool.Config()
	ui.TunePool(cfg)
	nojit, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect: %w", err)
	}
	pool.Close()
	return nojit, nil
}
