package pgrun_test

import (
	"context"
	"io"
	"log"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testdb"
	"github.com/pgrun/pgrun/runner"
)

// The runnable examples run against a real PostgreSQL (PGRUN_DATABASE_URL, see
// internal/testdb), each on a database of its own, cloned from a migrated template,
// so that their ids and counts are the same on every run.

// cleanups are the examples' databases to drop once they have all run.
var cleanups []func()

func TestMain(m *testing.M) {
	code := m.Run()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	os.Exit(code)
}

// exampleTB stands in for the *testing.T an example does not have: a failure ends
// the process, and cleanups run after the last example.
type exampleTB struct{}

func (exampleTB) Helper()                           {}
func (exampleTB) Failed() bool                      { return false }
func (exampleTB) Logf(string, ...any)               {}
func (exampleTB) Fatalf(format string, args ...any) { log.Fatalf(format, args...) }
func (exampleTB) Cleanup(f func())                  { cleanups = append(cleanups, f) }

// examplePool is a pool on a fresh database where pgrun.Migrate has run. A program
// would write:
//
//	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
//	err = pgrun.Migrate(ctx, pool)
func examplePool() *pgxpool.Pool {
	return testdb.Pool(exampleTB{})
}

// exampleClient is a client on examplePool.
func exampleClient() *pgrun.Client {
	client, err := pgrun.NewClient(examplePool(), pgrun.Config{})
	if err != nil {
		log.Fatal(err)
	}
	return client
}

// startRunner runs a runner on pool for the default queue with the handlers
// register adds, until the returned stop is called.
func startRunner(pool *pgxpool.Pool, register func(r *runner.Runner)) (stop func()) {
	r, err := runner.New(pool, runner.Config{
		Queues:       map[string]runner.QueueConfig{"default": {Workers: 4}},
		PollInterval: 50 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		log.Fatal(err)
	}
	register(r)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			log.Fatal(err)
		}
	}
}

// waitFinished polls job id until it has finished (a minute at most) and returns it.
func waitFinished(client *pgrun.Client, id int64) *pgrun.Job {
	deadline := time.Now().Add(time.Minute)
	for {
		j, err := client.GetJob(context.Background(), id)
		if err != nil {
			log.Fatal(err)
		}
		if j.Status.Finished() {
			return j
		}
		if time.Now().After(deadline) {
			log.Fatalf("job %d is still %s after a minute", id, j.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
