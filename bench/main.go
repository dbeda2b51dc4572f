// Command bench runs pgrun and River side by side on one PostgreSQL server and
// prints how they compare: insert rate, burn-down throughput of no-op jobs, and
// (for pgrun) the database-side limit of a bare claim/complete loop.
//
// It is a module of its own (bench/go.mod) so that River and its dependencies never
// enter the engine's go.mod. Each engine gets a fresh database per round, and the
// rounds alternate (pgrun, River, pgrun, River, ...) so that drift on a shared
// machine (other load, checkpoints, a warming cache) hits both engines alike; the
// medians damp the rest.
//
//	cd bench && go run . --jobs 200000
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"
)

// config is what the flags set.
type config struct {
	AdminURL     string        `json:"-"`
	Jobs         int           `json:"jobs"`
	Rounds       int           `json:"rounds"`
	Batch        int           `json:"batch"`
	PgrunWorkers int           `json:"pgrun_workers"`
	RiverWorkers int           `json:"river_workers"`
	LimitConns   int           `json:"limit_conns"`
	LimitClaim   int           `json:"limit_claim"`
	PoolConns    int           `json:"pool_conns"`
	StallTimeout time.Duration `json:"-"`
	JSON         bool          `json:"-"`
	SkipLimit    bool          `json:"skip_limit"`
	DBSuffix     string        `json:"-"`
	Only         string        `json:"only,omitempty"`
	PgrunStats   bool          `json:"pgrun_stats,omitempty"`
	// PgrunGOGC is the collector's target during pgrun's rounds (the runner binary's
	// default); River's rounds run at the process's own, RiverGOGC.
	PgrunGOGC int `json:"pgrun_gogc"`
	RiverGOGC int `json:"river_gogc"`
}

func main() {
	var c config
	flag.StringVar(&c.AdminURL, "admin-url", envOr("PGRUN_BENCH_ADMIN_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"),
		"URL of a database to create and drop the bench databases from (env PGRUN_BENCH_ADMIN_URL)")
	flag.IntVar(&c.Jobs, "jobs", 200_000, "no-op jobs per engine per round")
	flag.IntVar(&c.Rounds, "rounds", 3, "rounds per engine (they alternate pgrun, River, pgrun, ...)")
	flag.IntVar(&c.Batch, "batch", 1_000, "jobs per EnqueueMany / InsertMany call")
	flag.IntVar(&c.PgrunWorkers, "pgrun-workers", 500, "pgrun runner slots (the default of `runner bench`)")
	flag.IntVar(&c.RiverWorkers, "river-workers", 2_000, "River MaxWorkers (the setting of River's own `river bench`)")
	flag.IntVar(&c.LimitConns, "limit-conns", 2, "connections of the bare claim/complete loop (database-side limit)")
	flag.IntVar(&c.LimitClaim, "limit-claim", 1_000, "jobs per claim_jobs call of the bare loop (the runner's MaxClaim default)")
	flag.IntVar(&c.PoolConns, "pool-conns", 0, "max connections of each engine's pool (0: pgx's default, max(4, cores))")
	flag.DurationVar(&c.StallTimeout, "stall-timeout", 2*time.Minute, "give up when a burn-down makes no progress for this long")
	flag.BoolVar(&c.JSON, "json", false, "print the result as JSON instead of tables")
	flag.BoolVar(&c.SkipLimit, "skip-limit", false, "skip pgrun's database-side limit measurement")
	flag.StringVar(&c.DBSuffix, "db-suffix", "", "appended to the bench database names (to run two benches on one server)")
	flag.StringVar(&c.Only, "only", "", "run one engine only, pgrun or river (for experiments; no ratios)")
	flag.IntVar(&c.PgrunGOGC, "pgrun-gogc", 400, "GOGC during pgrun's rounds (400: the runner binary's default; River's rounds keep the process's, GOGC or 100)")
	flag.BoolVar(&c.PgrunStats, "pgrun-stats", false, "record pgrun's claim and completion calls (track_functions) and print them per round")
	flag.Parse()
	c.RiverGOGC = debug.SetGCPercent(100)
	debug.SetGCPercent(c.RiverGOGC)
	if c.Jobs < 1 || c.Rounds < 1 || c.Batch < 1 || c.PgrunWorkers < 1 || c.RiverWorkers < 1 ||
		c.LimitConns < 1 || c.LimitClaim < 1 || c.PgrunGOGC < 1 || c.LimitClaim > 10_000 || c.PoolConns < 0 ||
		(c.Only != "" && c.Only != "pgrun" && c.Only != "river") {
		fmt.Fprintln(os.Stderr, "bench: --jobs, --rounds, --batch, the worker counts and --limit-conns must be at least 1; --limit-claim 1 to 10000; --only pgrun or river")
		os.Exit(2)
	}

	// A signal cancels the context, so that the running round stops its engine and
	// drops its database on the way out instead of leaving them behind.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Both engines log through slog; the bench prints its own progress.
	slog.SetDefault(quietLogger())

	res, err := run(ctx, c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	if c.JSON {
		err = printJSON(os.Stdout, res)
	} else {
		printTables(os.Stdout, res)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// run alternates the engines' rounds and gathers their results.
func run(ctx context.Context, c config) (*result, error) {
	res := &result{Config: c, Date: time.Now().UTC().Format(time.RFC3339)}
	admin, err := connectAdmin(ctx, c.AdminURL)
	if err != nil {
		return nil, err
	}
	defer admin.Close(context.WithoutCancel(ctx))
	if err := admin.QueryRow(ctx, `select current_setting('server_version')`).Scan(&res.Server); err != nil {
		return nil, fmt.Errorf("server version: %w", err)
	}
	progress("PostgreSQL %s; %d jobs, %d rounds per engine, batches of %d", res.Server, c.Jobs, c.Rounds, c.Batch)
	for i := 1; i <= c.Rounds; i++ {
		if c.Only != "river" {
			p, err := pgrunRound(ctx, admin, c, i)
			if err != nil {
				return nil, fmt.Errorf("pgrun round %d: %w", i, err)
			}
			res.Rounds = append(res.Rounds, *p)
		}
		if c.Only != "pgrun" {
			r, err := riverRound(ctx, admin, c, i)
			if err != nil {
				return nil, fmt.Errorf("river round %d: %w", i, err)
			}
			res.Rounds = append(res.Rounds, *r)
		}
	}
	res.summarize()
	return res, nil
}

// progress prints a timestamped line to stderr; stdout is kept for the result.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s bench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// quietLogger discards logs: the engines would otherwise interleave theirs with the
// bench's progress.
func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
