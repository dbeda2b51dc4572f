// Command runner is pgrun's command line: it installs the schema, runs workers,
// enqueues and inspects jobs, and benchmarks and demonstrates the engine.
//
// The database comes from --database-url, else PGRUN_DATABASE_URL, else
// DATABASE_URL. Errors print as one line on stderr with a non-zero exit.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// run executes the command line args and returns the exit code.
func run(args []string) int {
	return runWithStderr(args, os.Stderr)
}

// runWithStderr is run with errors written to stderr: one line, "runner: " and
// the message (a PostgreSQL error's hint included), and exit code 1.
func runWithStderr(args []string, stderr io.Writer) int {
	ctx, stop := signalContext()
	defer stop()
	root := newRootCmd()
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(stderr, "runner: "+oneLine(err))
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

// oneLine renders err for a person: a PostgreSQL error as its message and hint, all
// on one line.
func oneLine(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		s := pe.Message
		if pe.Hint != "" {
			s += " (hint: " + pe.Hint + ")"
		}
		return strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(s) // one line even if the hint has several
	}
	msg := err.Error()
	for i, c := range msg {
		if c == '\n' {
			return msg[:i]
		}
	}
	return msg
}
