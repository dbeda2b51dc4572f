package runner

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgrun/pgrun"
)

// Behind a transaction-mode pooler (PgBouncer, a cloud provider's pooler) every
// statement the runner sends is its own transaction on whichever server connection
// is free, which is all claim_jobs, the reports and the renewals need: they keep no
// session state (given a pool in pgrun.PoolerExecMode). LISTEN is the exception: it
// registers on one server connection that the pooler lends to others a moment later,
// and the notifications never reach the runner, without any error. So the listener
// LISTENs on a direct connection (Config.ListenURL) when it has one, and otherwise
// does not LISTEN through a pool it finds to be pooled: the fetchers' poll
// (Config.PollInterval) finds new jobs, and lease renewal finds cancelled ones.

// validateListenURL checks that ListenURL, if set, is a connection string pgx reads.
func (cfg Config) validateListenURL() error {
	if cfg.ListenURL == "" {
		return nil
	}
	if _, err := pgx.ParseConfig(cfg.ListenURL); err != nil {
		return fmt.Errorf("runner: listen URL: %w", err)
	}
	return nil
}

// listenConnect returns how the listener connects: to ListenURL when it is set, else
// with the pool's configuration if the pool reaches PostgreSQL directly. It returns
// nil, after saying why in the log, when the pool goes through a pooler and no
// ListenURL is set. Until the pool answers the question it retries every
// listenReconnectDelay (the poll covers the wait); nil also when ctx is done.
func (r *Runner) listenConnect(ctx context.Context) func(context.Context) (*pgx.Conn, error) {
	if r.cfg.ListenURL != "" {
		cc, err := pgx.ParseConfig(r.cfg.ListenURL) // Validate checked it
		if err != nil {
			r.log.Error("not listening: bad listen URL; polling", "err", err, "poll_interval", r.cfg.PollInterval)
			return nil
		}
		var warnOnce sync.Once
		return func(ctx context.Context) (*pgx.Conn, error) {
			conn, err := pgx.ConnectConfig(ctx, cc.Copy())
			if err != nil {
				return nil, err
			}
			if pooled, _ := pgrun.ThroughPooler(ctx, conn); pooled {
				warnOnce.Do(func() {
					r.log.Warn("the listen URL goes through a connection pooler: LISTEN works only if it pools in session mode; give a direct URL",
						"host", cc.Host, "port", cc.Port)
				})
			}
			return conn, nil
		}
	}
	pooled, err := pgrun.PoolThroughPooler(ctx, r.pool)
	for warned := false; err != nil; pooled, err = pgrun.PoolThroughPooler(ctx, r.pool) {
		if !warned && ctx.Err() == nil {
			r.log.Warn("listener: cannot tell yet whether the pool goes through a pooler; retrying (polling meanwhile)", "err", err)
			warned = true
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(listenReconnectDelay):
		}
	}
	if pooled {
		r.log.Warn("not listening: the pool goes through a connection pooler, where LISTEN never hears a notification; "+
			"new jobs start within the poll interval, cancellations of running jobs reach handlers at the next lease renewal; "+
			"give a direct URL to listen on (runner.Config.ListenURL, runner work --listen-url) to be woken at once",
			"poll_interval", r.cfg.PollInterval, "lease_renewal", r.renewEvery())
		if mode := r.pool.Config().ConnConfig.DefaultQueryExecMode; mode != pgrun.PoolerExecMode {
			r.log.Warn("the pool's query exec mode fails through a transaction-mode pooler (named prepared statements) "+
				"or with pgrun's JSON arguments (exec, simple_protocol); add default_query_exec_mode=cache_describe to its URL",
				"mode", mode.String())
		}
		return nil
	}
	cc := r.pool.Config().ConnConfig
	return func(ctx context.Context) (*pgx.Conn, error) { return pgx.ConnectConfig(ctx, cc.Copy()) }
}
