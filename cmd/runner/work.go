package main

import (
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgrun/pgrun/examples/embeddings"
	"github.com/pgrun/pgrun/gpu"
	"github.com/pgrun/pgrun/runner"
)

func init() { commands = append(commands, newWorkCmd) }

// registerHandlers lets other files of this command (examples) add handlers to the
// runner `work` builds, after the built-ins.
var registerHandlers []func(*runner.Runner)

func newWorkCmd(g *globals) *cobra.Command {
	var (
		queues, workerID, logLevel string
		grace, lease               time.Duration
	)
	cmd := &cobra.Command{
		Use:   "work",
		Short: "Run jobs: claim from the given queues and run their handlers until SIGTERM",
		Long: `work runs a runner with the built-in operations (noop, sleep, echo, fail) until
SIGTERM or SIGINT. Then it stops claiming, waits --grace for in-flight jobs, cancels
and requeues the rest without spending an attempt, and exits 0. A second signal
exits at once (status 130); leases bring back what was left.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			qs, err := parseQueues(queues)
			if err != nil {
				return err
			}
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level %q is not one of debug, info, warn, error", logLevel)
			}
			pool, err := g.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer pool.Close()
			// The example embedder is always servable: a gpu queue can run its jobs.
			cache := gpu.NewCache(gpu.CacheConfig{Load: embeddings.Load, IdleUnload: 10 * time.Minute})
			r := runner.New(pool, runner.Config{
				Queues:        qs,
				Models:        cache,
				Servable:      []string{embeddings.ModelName},
				WorkerID:      workerID,
				Lease:         lease,
				ShutdownGrace: grace,
				Logger:        slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})),
				Version:       version,
			})
			runner.HandleBuiltins(r)
			embeddings.Register(r, pool)
			for _, register := range registerHandlers {
				register(r)
			}
			return r.Run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&queues, "queues", "default=8", "queues to serve and their worker counts: name=N,name=N (N=gpu: one per device)")
	cmd.Flags().StringVar(&workerID, "worker-id", "", "worker id (default host:pid:random)")
	cmd.Flags().DurationVar(&grace, "grace", runner.DefaultShutdownGrace, "how long in-flight jobs may finish after SIGTERM")
	cmd.Flags().DurationVar(&lease, "lease", 0, "claim lease, renewed every lease/3 (0: each queue's default_lease, else 30s)")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	return cmd
}

// version is recorded in pgrun.workers.
const version = "0.1.0-dev"

var queueSpecName = regexp.MustCompile(`^[a-z][a-z0-9_.-]{0,62}$`)

// parseQueues reads "default=8,images=2,gpu=gpu" strictly: every part must be name=N with a
// valid queue name and N >= 1, and no queue may appear twice.
func parseQueues(spec string) (map[string]runner.QueueConfig, error) {
	out := map[string]runner.QueueConfig{}
	for _, part := range strings.Split(spec, ",") {
		name, n, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("--queues part %q is not name=N", part)
		}
		if !queueSpecName.MatchString(name) {
			return nil, fmt.Errorf("--queues: queue name %q is not valid (1 to 63 of a-z, 0-9, _ - . starting with a letter)", name)
		}
		if n == "gpu" { // one slot per device
			out[name] = runner.QueueConfig{GPU: true}
			continue
		}
		workers, err := strconv.Atoi(n)
		if err != nil || workers < 1 {
			return nil, fmt.Errorf("--queues: worker count %q of queue %s is not a whole number of at least 1", n, name)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("--queues: queue %s is given twice", name)
		}
		out[name] = runner.QueueConfig{Workers: workers}
	}
	return out, nil
}
