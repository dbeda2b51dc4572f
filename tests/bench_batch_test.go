package tests

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
)

// The batch handler benchmark of docs/benchmarks.md ("Batch handlers"):
//
//	go test ./tests/ -run '^$' -bench HandleBatch -benchtime 3x
//
// Each round burns the same backlog down with a per-job handler (runner.Handle) and
// with a batch handler (runner.HandleBatch, batches of 100), alternated on fresh
// databases, the runner's queue of 200 slots either way (two batches of 100 at once).
// It reports the last round's rates and their ratio (ns/op is the whole run).

// BenchmarkHandleBatch: 100,000 no-op jobs, and 20,000 jobs whose handler call holds
// one shared device for 200 µs whatever it is given (a model's forward pass, one
// call of a bulk API): there one call per job is the bound, and a batch of 100 pays
// it once.
func BenchmarkHandleBatch(b *testing.B) {
	noop := func(context.Context, *runner.Job[struct{}]) (any, error) { return nil, nil }
	noopBatch := func(_ context.Context, jobs []*runner.Job[struct{}]) ([]runner.BatchResult, error) {
		return make([]runner.BatchResult, len(jobs)), nil
	}
	var device sync.Mutex
	call := func() {
		device.Lock()
		defer device.Unlock()
		time.Sleep(200 * time.Microsecond)
	}
	deviceJob := func(context.Context, *runner.Job[struct{}]) (any, error) { call(); return nil, nil }
	deviceBatch := func(_ context.Context, jobs []*runner.Job[struct{}]) ([]runner.BatchResult, error) {
		call()
		return make([]runner.BatchResult, len(jobs)), nil
	}
	perJob := func(n int, h func(context.Context, *runner.Job[struct{}]) (any, error)) float64 {
		db := testkit.NewDB(b)
		r := benchRunner(db.Pool, 200)
		testkit.Handle(b, r, "work", h)
		return float64(n) / burnDown(b, db, r, n)
	}
	batched := func(n int, h func(context.Context, []*runner.Job[struct{}]) ([]runner.BatchResult, error)) float64 {
		db := testkit.NewDB(b)
		r := benchRunner(db.Pool, 200)
		if err := runner.HandleBatch(r, "work", h, 100, 10*time.Millisecond); err != nil {
			b.Fatal(err)
		}
		return float64(n) / burnDown(b, db, r, n)
	}
	var noopJob, noopBatched, devJob, devBatched float64
	for range b.N {
		noopJob, noopBatched = perJob(100000, noop), batched(100000, noopBatch)
		devJob, devBatched = perJob(20000, deviceJob), batched(20000, deviceBatch)
		b.Logf("no-op: per job %.0f, batch %.0f jobs/s (%.2fx); device: per job %.0f, batch %.0f jobs/s (%.1fx)",
			noopJob, noopBatched, noopBatched/noopJob, devJob, devBatched, devBatched/devJob)
	}
	b.ReportMetric(noopJob, "noop_per_job_jobs/s")
	b.ReportMetric(noopBatched, "noop_batch100_jobs/s")
	b.ReportMetric(noopBatched/noopJob, "noop_ratio")
	b.ReportMetric(devJob, "device_per_job_jobs/s")
	b.ReportMetric(devBatched, "device_batch100_jobs/s")
	b.ReportMetric(devBatched/devJob, "device_ratio")
}
