package runner

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgrun/pgrun"
)

// A cancel notification that arrives before the job starts here (claimed just before
// its parent was cancelled) keeps the handler from ever running.
func TestJobCancelledBeforeStartNeverRuns(t *testing.T) {
	r := newRunner(nil, Config{Queues: map[string]QueueConfig{"default": {Workers: 1}}})
	var ran atomic.Bool
	if err := Handle(r, "child", func(context.Context, *Job[struct{}]) (any, error) {
		ran.Store(true)
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	f := newFetcher(r, "default", 1)
	r.cancelRunning(cancelKey{id: 42, attempt: 1}, ErrJobCancelled) // not running here yet: remembered
	r.start(&pgrun.Job{ID: 42, Kind: "child", Attempt: 1}, f)
	select {
	case <-f.freedCh: // the slot was freed
	case <-time.After(5 * time.Second):
		t.Fatal("the execution did not finish")
	}
	r.execWG.Wait()
	if ran.Load() {
		t.Fatal("the handler of a job cancelled before it started ran")
	}
	if len(r.running) != 0 {
		t.Fatalf("execution still registered: %v", r.running)
	}
}

// isTransient sorts database errors into retry and give up.
func TestIsTransient(t *testing.T) {
	for err, want := range map[error]bool{
		context.Canceled:               false,
		context.DeadlineExceeded:       false,
		&pgconn.PgError{Code: "40P01"}: true,
		&pgconn.PgError{Code: "40001"}: true,
		&pgconn.PgError{Code: "08006"}: true,
		&pgconn.PgError{Code: "57P01"}: true,
		&pgconn.PgError{Code: "25006"}: true, // a primary demoted in place
		&pgconn.PgError{Code: "22023"}: false,
		&pgconn.PgError{Code: "23505"}: false,
	} {
		if got := isTransient(err); got != want {
			t.Errorf("isTransient(%v) = %v, want %v", err, got, want)
		}
	}
}
