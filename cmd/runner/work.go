package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/examples/embeddings"
	"github.com/pgrun/pgrun/gpu"
	"github.com/pgrun/pgrun/metrics"
	"github.com/pgrun/pgrun/runner"
)

func init() { commands = append(commands, newWorkCmd) }

// workFlags are the flags of `runner work`, checked by config before anything
// connects.
type workFlags struct {
	queues, workerID, logLevel string
	grace, lease, poll         time.Duration
	linger                     time.Duration // --complete-linger
	listenURL                  string
	// examples registers the example handlers (runner.RegisterExamples and the
	// embeddings example); telemetry is the host sampling interval (0: none).
	examples               bool
	telemetry              time.Duration
	logFormat, metricsAddr string
	jobLog                 bool
}

// Bounds on the flags of `runner work`: the runner's own (runner.Config.Validate
// checks the same), named here for the flag messages.
const (
	minLease         = runner.MinLease
	minPollInterval  = runner.MinPollInterval
	maxQueueWorkers  = runner.MaxWorkers
	maxWorkerIDChars = runner.MaxWorkerIDLen
)

// config checks every flag and returns the runner configuration they describe;
// changed reports whether a flag was given on the command line. Errors are one line
// naming the flag and the bad value.
func (f *workFlags) config(changed func(string) bool) (runner.Config, slog.Level, error) {
	var level slog.Level
	qs, err := parseQueues(f.queues)
	if err != nil {
		return runner.Config{}, level, err
	}
	if err := checkWorkerID(f.workerID, changed("worker-id")); err != nil {
		return runner.Config{}, level, err
	}
	switch {
	case f.lease < 0:
		return runner.Config{}, level, fmt.Errorf("--lease %s is negative: give 1s or more, or 0 for each queue's default_lease", f.lease)
	case f.lease > 0 && f.lease < minLease:
		return runner.Config{}, level, fmt.Errorf("--lease %s is too short: give %s or more (leases renew every lease/3), or 0 for each queue's default_lease", f.lease, minLease)
	}
	if f.grace < 0 {
		return runner.Config{}, level, fmt.Errorf("--grace %s is negative: give 0 (cancel in-flight jobs at once) or more", f.grace)
	}
	if f.poll < minPollInterval {
		return runner.Config{}, level, fmt.Errorf("--poll-interval %s is too short: give %s or more", f.poll, minPollInterval)
	}
	if f.linger < 0 || f.linger > runner.MaxCompleteLinger {
		return runner.Config{}, level, fmt.Errorf("--complete-linger %s is not valid: give 0 (record every success with the next call) to %s", f.linger, runner.MaxCompleteLinger)
	}
	if f.telemetry < 0 || (f.telemetry > 0 && f.telemetry < minPollInterval) {
		return runner.Config{}, level, fmt.Errorf("--telemetry-interval %s is not valid: give 0 (no host samples) or %s or more", f.telemetry, minPollInterval)
	}
	if f.listenURL != "" {
		if _, err := pgx.ParseConfig(f.listenURL); err != nil {
			return runner.Config{}, level, fmt.Errorf("--listen-url is not a PostgreSQL URL: %v", err)
		}
	}
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return runner.Config{}, level, fmt.Errorf("--log-level %q is not one of debug, info, warn, error", f.logLevel)
	}
	if err := checkLogFormat(f.logFormat); err != nil {
		return runner.Config{}, level, err
	}
	if err := checkMetricsAddr(f.metricsAddr); err != nil {
		return runner.Config{}, level, err
	}
	grace := f.grace
	if grace == 0 {
		// runner.Config reads a zero ShutdownGrace as "the default" (25 s); the flag's 0
		// means no grace, so pass the shortest non-zero wait instead.
		grace = time.Nanosecond
	}
	cfg := runner.Config{
		Queues:        qs,
		WorkerID:      f.workerID,
		Lease:         f.lease,
		PollInterval:  f.poll,
		ShutdownGrace: grace,
		Version:       moduleVersion(),
		ListenURL:     f.listenURL,

		TelemetryInterval: f.telemetry,
		CompleteLinger:    f.linger,
	}
	if f.linger == 0 {
		cfg.CompleteLinger = -1 // the flag's 0 means none; the runner reads 0 as its default
	}
	if cfg.ListenURL == "" {
		cfg.ListenURL = os.Getenv("PGRUN_LISTEN_URL")
	}
	// The flags are checked above with messages that name them; the runner's own
	// check is the last word, so the CLI and a Go caller accept the same.
	return cfg, level, cfg.Validate()
}

// checkWorkerID accepts an empty id when the flag was not given (the runner picks
// host:pid:random), else 1 to maxWorkerIDChars printable characters.
func checkWorkerID(id string, given bool) error {
	n := utf8.RuneCountInString(id)
	switch {
	case n == 0 && given:
		return errors.New(`--worker-id "" is empty: give 1 to 200 characters, or leave the flag out for host:pid:random`)
	case n > maxWorkerIDChars:
		return fmt.Errorf("--worker-id %s is %d characters, over the limit of %d", clip(id), n, maxWorkerIDChars)
	case !utf8.ValidString(id):
		return fmt.Errorf("--worker-id %s is not valid UTF-8", clip(id))
	}
	for _, c := range id {
		if unicode.IsControl(c) {
			return fmt.Errorf("--worker-id %s contains a control character: give printable characters", clip(id))
		}
	}
	return nil
}

// clip quotes s for an error message, cut to its first 32 characters.
func clip(s string) string {
	const max = 32
	if utf8.RuneCountInString(s) <= max {
		return strconv.Quote(s)
	}
	return strconv.Quote(string([]rune(s)[:max])) + "..."
}

func newWorkCmd(g *globals) *cobra.Command {
	f := &workFlags{}
	cmd := &cobra.Command{
		Use:   "work",
		Short: "Run jobs: claim from the given queues and run their handlers until SIGTERM",
		Long: `work runs a runner until SIGTERM or SIGINT. Then it stops claiming, waits --grace
for in-flight jobs, cancels and requeues the rest without spending an attempt, and
exits 0. A second signal exits at once (status 130); leases bring back what was left.

With --examples it serves the example operations (noop, sleep, echo, fail, later,
fanout, the durable ones (durable_steps, durable_flaky, durable_sleep, durable_event,
durable_spawn, durable_mismatch), and the embeddings example's ingest, embed, knn and
report); without it, the
handlers a program registers (see the runner package) are the only ones.

Every flag is checked before connecting: --queues takes name=N with N from 1 to
10000 (or gpu), and name=N:M to cap the queue's claims at M jobs a call (1 to
10000; a fair queue's default is 250, docs/operations.md, Fairness), --lease 0 or
at least 1s, --grace 0 or more, --poll-interval at least 10ms, --complete-linger 0
to 1s, --worker-id 1 to 200 characters.

Through a transaction-mode pooler (PgBouncer, a cloud pooler), --database-url is the
pooled URL and --listen-url (default $PGRUN_LISTEN_URL) a direct one to the same
database, for the one connection that LISTENs; without it the runner does not
LISTEN and new jobs wait up to --poll-interval. See docs/poolers.md.

Logs go to standard error as text, or as JSON with --log-format json, with one
line per finished job at info (--job-log=false to leave it out). --metrics-addr
serves Prometheus metrics (docs/metrics.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, level, err := f.config(cmd.Flags().Changed)
			if err != nil {
				return err
			}
			pool, err := g.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer pool.Close()
			if f.examples {
				// The example embedder is servable: a gpu queue can run its jobs.
				cfg.Models = gpu.NewCache(gpu.CacheConfig{Load: embeddings.Load, IdleUnload: 10 * time.Minute})
				cfg.Servable = []string{embeddings.ModelName}
			}
			cfg.Logger = newLogger(os.Stderr, f.logFormat, level)
			slog.SetDefault(cfg.Logger)
			if f.jobLog {
				cfg.Hooks = append(cfg.Hooks, runner.LogOutcomes(cfg.Logger, slog.LevelInfo))
			}
			if f.metricsAddr != "" {
				exp := metrics.New(pool)
				cfg.Hooks = append(cfg.Hooks, exp.Hooks())
				stop, err := serveMetrics(f.metricsAddr, exp.Handler(), cfg.Logger)
				if err != nil {
					return err
				}
				defer stop()
			}
			r, err := runner.New(pool, cfg)
			if err != nil {
				return err
			}
			if f.examples {
				if err := errors.Join(runner.RegisterExamples(r), embeddings.Register(r, pool)); err != nil {
					return err
				}
			} else {
				cfg.Logger.Warn("no handlers: this runner claims no jobs; --examples serves the example operations, " +
					"and a program of your own registers its handlers with the runner package")
			}
			return r.Run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&f.queues, "queues", "default=8", "queues to serve and their worker counts: name=N,name=N (N from 1 to 10000, or gpu: one per device; name=N:M caps its claims at M jobs)")
	cmd.Flags().StringVar(&f.workerID, "worker-id", "", "worker id, 1 to 200 characters (default host:pid:random)")
	cmd.Flags().DurationVar(&f.grace, "grace", runner.DefaultShutdownGrace, "how long in-flight jobs may finish after SIGTERM (0: cancel them at once)")
	cmd.Flags().DurationVar(&f.lease, "lease", 0, "claim lease, at least 1s, renewed every lease/3 (0: each queue's default_lease, else "+pgrun.DefaultLease.String()+")")
	cmd.Flags().DurationVar(&f.poll, "poll-interval", runner.DefaultPollInterval, "how often each queue is polled without a notification (at least 10ms)")
	cmd.Flags().DurationVar(&f.linger, "complete-linger", runner.DefaultCompleteLinger, "under load, how long a plain job's success may wait to share a completion call (0: none; at most 1s)")
	cmd.Flags().StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	cmd.Flags().BoolVar(&f.examples, "examples", false, "serve the example operations (noop, sleep, echo, fail, later, fanout, and the embeddings example)")
	cmd.Flags().DurationVar(&f.telemetry, "telemetry-interval", runner.DefaultTelemetryInterval, "how often to record a hardware sample of this host for the UI (0: none; else at least 10ms)")
	cmd.Flags().StringVar(&f.logFormat, "log-format", "text", "text (key=value, for people) or json (one object a line, for log shippers)")
	cmd.Flags().BoolVar(&f.jobLog, "job-log", true, "log one line per finished job at info (id, kind, queue, attempt, duration, outcome); --job-log=false or --log-level warn turns it off")
	cmd.Flags().StringVar(&f.metricsAddr, "metrics-addr", "", "serve Prometheus metrics at http://ADDR/metrics, such as :9090 (default: none; see docs/metrics.md)")
	cmd.Flags().StringVar(&f.listenURL, "listen-url", "", "a direct (session) URL to the same database for the one LISTEN connection, when --database-url goes through a transaction-mode pooler (default $PGRUN_LISTEN_URL)")
	return cmd
}

// parseQueues reads "default=8,images=2,gpu=gpu" strictly: every part must be name=N
// with a valid queue name and N from 1 to maxQueueWorkers (or gpu), and no queue may
// appear twice.
func parseQueues(spec string) (map[string]runner.QueueConfig, error) {
	out := map[string]runner.QueueConfig{}
	for _, part := range strings.Split(spec, ",") {
		name, n, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("--queues part %s is not name=N", clip(part))
		}
		if !pgrun.ValidQueueName(name) {
			return nil, fmt.Errorf("--queues: queue name %s is not valid (%s)", clip(name), pgrun.QueueNameFormat)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("--queues: queue %s is given twice", name)
		}
		// N:M caps the queue's claims at M jobs (runner.QueueConfig.MaxClaim).
		n, m, capped := strings.Cut(n, ":")
		var q runner.QueueConfig
		if capped {
			c, err := queueCount("claim cap", m, name)
			if err != nil {
				return nil, err
			}
			q.MaxClaim = c
		}
		if n == "gpu" { // one slot per device
			q.GPU = true
		} else {
			w, err := queueCount("worker count", n, name)
			if err != nil {
				return nil, err
			}
			q.Workers = w
		}
		out[name] = q
	}
	return out, nil
}

// queueCount parses what (a worker count, a claim cap) of queue name in --queues: a
// whole number from 1 to maxQueueWorkers.
func queueCount(what, n, name string) (int, error) {
	v, err := strconv.Atoi(n)
	switch {
	case errors.Is(err, strconv.ErrRange):
		return 0, fmt.Errorf("--queues: %s %s of queue %s is out of range: give 1 to %d", what, clip(n), name, maxQueueWorkers)
	case err != nil || v < 1:
		return 0, fmt.Errorf("--queues: %s %s of queue %s is not a whole number of at least 1", what, clip(n), name)
	case v > maxQueueWorkers:
		return 0, fmt.Errorf("--queues: %s %d of queue %s is over the limit of %d", what, v, name, maxQueueWorkers)
	}
	return v, nil
}

// checkLogFormat accepts the values of --log-format ("" is text, the default).
func checkLogFormat(format string) error {
	switch format {
	case "", "text", "json":
		return nil
	}
	return fmt.Errorf("--log-format %s is not one of text, json", clip(format))
}

// checkMetricsAddr accepts an empty --metrics-addr (no metrics) or host:port, such as
// :9090 or 127.0.0.1:9090.
func checkMetricsAddr(addr string) error {
	if addr == "" {
		return nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("--metrics-addr %s is not host:port (such as :9090 or 127.0.0.1:9090)", clip(addr))
	}
	return nil
}

// newLogger returns the logger of --log-format and --log-level, writing to w: text
// for people (logfmt-like key=value), json for log shippers (one object a line,
// keys time, level, msg and the attributes).
func newLogger(w io.Writer, format string, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// metricsShutdown bounds how long a stopping runner waits for a scrape in progress.
const metricsShutdown = 5 * time.Second

// serveMetrics serves handler at addr's /metrics until stop is called. It listens
// before returning, so that a taken port fails the command at start rather than in
// the log.
func serveMetrics(addr string, handler http.Handler, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", handler)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	log.Info("serving metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), metricsShutdown)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}
