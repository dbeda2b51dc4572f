// Command runner is pgrun's command line: it installs the schema, runs workers,
// enqueues and inspects jobs, and benchmarks and demonstrates the engine.
//
// The database comes from --database-url, else PGRUN_DATABASE_URL, else
// DATABASE_URL. Errors print as one line on stderr with a non-zero exit.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

func main() {
	setGCPercent()
	os.Exit(run(os.Args[1:]))
}

// defaultGOGC is the garbage collector's target this binary runs with unless the
// GOGC environment variable sets one. A runner's live heap is small (a few MB: the
// claimed jobs, the connections' buffers) while it allocates for every job, so at
// Go's default of 100 it collects some twenty times a second under load, and the
// collector took over a third of the runner's instructions (callgrind, no-op jobs).
// At 400 it collects a sixth as often, for a few MB more: measured on this project's
// 2-core machine, 10.8 instead of 13.9 µs of runner CPU per job and 6-13% more
// burn-down (docs/benchmarks.md). A program that embeds the runner chooses its own
// (GOGC, debug.SetGCPercent); GOMEMLIMIT still bounds the heap either way.
const defaultGOGC = 400

// setGCPercent applies defaultGOGC when GOGC is not set.
func setGCPercent() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(defaultGOGC)
	}
}

// run executes the command line args and returns the exit code.
func run(args []string) int {
	return runWithStderr(args, os.Stderr)
}

// runWithStderr is run with errors written to stderr: one line, "runner: " and
// the message (errorLine: a PostgreSQL error's hint included, a failed connection's
// cause), and exit code 1.
func runWithStderr(args []string, stderr io.Writer) int {
	ctx, stop := signalContext()
	defer stop()
	root := newRootCmd()
	root.SetArgs(args)
	if cmd, err := root.ExecuteContextC(ctx); err != nil {
		fmt.Fprintln(stderr, "runner: "+errorLine(cmd, err))
		return 1
	}
	return 0
}

// signalContext is cancelled by the first SIGINT or SIGTERM, so that commands stop
// gracefully; a second signal exits at once (status 130), leaving what is left to
// the leases.
func signalContext() (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
		cancel()
		<-ch
		fmt.Fprintln(os.Stderr, "runner: second signal, exiting now")
		os.Exit(130)
	}()
	return ctx, func() { signal.Stop(ch); cancel() }
}
