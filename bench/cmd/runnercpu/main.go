// Command runnercpu measures what the runner itself costs per job: it fills a fresh
// queue with no-op jobs by a plain INSERT (so that no client code of enqueueing is
// counted), burns them down with an in-process runner at its defaults and prints the
// process's CPU, allocations and collections per job. Under callgrind it gives the
// runner's instructions per job, which, unlike seconds, a noisy machine does not
// change:
//
//	go build -o /tmp/runnercpu ./cmd/runnercpu
//	GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off \
//	  valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out /tmp/runnercpu --jobs 30000
//
// (valgrind 3.19 knows neither Go's preemption signals nor the RDTSCP instruction,
// hence the GODEBUG settings; one P keeps the scheduler's spinning out of the count.)
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/runner"
)

func main() {
	jobs := flag.Int("jobs", 30000, "no-op jobs to burn down")
	workers := flag.Int("workers", 500, "runner slots (the default of `runner bench`)")
	url := flag.String("database-url", os.Getenv("PGRUN_DATABASE_URL"), "PostgreSQL URL (default $PGRUN_DATABASE_URL)")
	flag.Parse()
	if err := run(*url, *jobs, *workers); err != nil {
		fmt.Fprintln(os.Stderr, "runnercpu:", err)
		os.Exit(1)
	}
}

func run(url string, n, workers int) error {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := pgrun.Migrate(ctx, pool); err != nil {
		return err
	}
	queue := fmt.Sprintf("bench.cpu%d", time.Now().UnixNano())
	defer func() { _, _ = pool.Exec(context.Background(), `delete from pgrun.jobs where queue = $1`, queue) }()
	if _, err := pool.Exec(ctx, `insert into pgrun.jobs (kind, queue) select 'noop', $1 from generate_series(1, $2)`, queue, n); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `vacuum (analyze) pgrun.jobs`); err != nil {
		return err
	}
	r, err := runner.New(pool, runner.Config{
		Queues: map[string]runner.QueueConfig{queue: {Workers: workers}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return err
	}
	var ran atomic.Int64
	if err := runner.Handle(r, "noop", func(context.Context, *runner.Job[struct{}]) (any, error) {
		ran.Add(1)
		return nil, nil
	}); err != nil {
		return err
	}
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	cpu0, began := cpuTime(), time.Now()
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	for {
		if ran.Load() < int64(n) {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		var left int64
		if err := pool.QueryRow(ctx, `select count(*) from pgrun.jobs where queue = $1 and status in ('queued', 'running')`, queue).Scan(&left); err != nil {
			return err
		}
		if left == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	elapsed, cpu := time.Since(began), cpuTime()-cpu0
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	stop()
	if err := <-done; err != nil {
		return err
	}
	per := func(x float64) float64 { return x / float64(n) }
	fmt.Printf("%d jobs in %.2f s (%.0f jobs/s); per job: %.2f µs of this process's CPU, %.1f allocations, %.0f bytes; %d collections (GOGC %s)\n",
		n, elapsed.Seconds(), float64(n)/elapsed.Seconds(), per(float64(cpu.Microseconds())),
		per(float64(after.Mallocs-before.Mallocs)), per(float64(after.TotalAlloc-before.TotalAlloc)),
		after.NumGC-before.NumGC, gogc())
	return nil
}

// cpuTime is the CPU time this process has used so far (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func gogc() string {
	if v, ok := os.LookupEnv("GOGC"); ok {
		return v
	}
	return "100"
}
