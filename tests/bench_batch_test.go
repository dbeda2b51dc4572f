package tests

import (
	"context"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
// It logs every round and reports the medians over the rounds (ns/op is the whole
// run): the rates, their ratio, and the runner's own CPU time per job (the test
// process's, user and system, over the burn-down), which is what the batch path
// changes; the database's work per job, one claim and one completion, is the same
// either way.

// BenchmarkHandleBatch: 100,000 no-op jobs; 20,000 jobs whose handler call holds
// one shared device for 200 µs whatever it is given (a model's forward pass, one
// call of a bulk API): there one call per job is the bound, and a batch of 100 pays
// it once; and 50,000 jobs whose handler writes the job's result into a table of the
// same database (what a batch handler is most often for: an embedding stored with
// pgvector, a row sent on): one INSERT a job, or one INSERT of the batch's rows.
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
	// The sink's handlers write to the database their runner claims from (db, set
	// before each burn-down).
	var db *testkit.DB
	sinkJob := func(ctx context.Context, j *runner.Job[struct{}]) (any, error) {
		_, err := db.Pool.Exec(ctx, `insert into public.sink (job_id) values ($1)`, j.ID)
		return nil, err
	}
	sinkBatch := func(ctx context.Context, jobs []*runner.Job[struct{}]) ([]runner.BatchResult, error) {
		ids := make([]int64, len(jobs))
		for i, j := range jobs {
			ids[i] = j.ID
		}
		_, err := db.Pool.Exec(ctx, `insert into public.sink (job_id) select unnest($1::bigint[])`, ids)
		return make([]runner.BatchResult, len(jobs)), err
	}
	fresh := func() *runner.Runner {
		db = testkit.NewDB(b)
		testkit.ExecAll(b, db, `create table public.sink (job_id bigint not null)`)
		return benchRunner(db.Pool, 200)
	}
	// done checks the sink (every job's row written once, where the handler writes
	// one) and gives the database's connections back before the next one opens.
	done := func(n int, res burn) burn {
		if sunk := countRowsTB(b, db, `select count(distinct job_id) from public.sink`); sunk > 0 {
			require.Equal(b, n, sunk)
		}
		db.Pool.Close()
		return res
	}
	perJob := func(n int, h func(context.Context, *runner.Job[struct{}]) (any, error)) burn {
		r := fresh()
		testkit.Handle(b, r, "work", h)
		return done(n, burnDownCounted(b, db, r, n))
	}
	batched := func(n int, h func(context.Context, []*runner.Job[struct{}]) ([]runner.BatchResult, error)) burn {
		r := fresh()
		if err := runner.HandleBatch(r, "work", h, 100, 10*time.Millisecond); err != nil {
			b.Fatal(err)
		}
		return done(n, burnDownCounted(b, db, r, n))
	}
	var noopRatio, noopJob, noopBatched, cpuJob, cpuBatched, devRatio, sinkRatio, sinkJobs, sinkBatched []float64
	for round := range b.N {
		nj, nb := perJob(100000, noop), batched(100000, noopBatch)
		dj, dbt := perJob(20000, deviceJob), batched(20000, deviceBatch)
		sj, sb := perJob(50000, sinkJob), batched(50000, sinkBatch)
		noopJob, noopBatched = append(noopJob, nj.rate), append(noopBatched, nb.rate)
		noopRatio = append(noopRatio, nb.rate/nj.rate)
		cpuJob, cpuBatched = append(cpuJob, nj.cpuPerJob), append(cpuBatched, nb.cpuPerJob)
		devRatio = append(devRatio, dbt.rate/dj.rate)
		sinkJobs, sinkBatched = append(sinkJobs, sj.rate), append(sinkBatched, sb.rate)
		sinkRatio = append(sinkRatio, sb.rate/sj.rate)
		b.Logf("round %d: no-op: per job %.0f, batch %.0f jobs/s (%.2fx), runner CPU %.1f vs %.1f µs/job; device: per job %.0f, batch %.0f jobs/s (%.1fx); sink: per job %.0f, batch %.0f jobs/s (%.2fx)",
			round+1, nj.rate, nb.rate, nb.rate/nj.rate, nj.cpuPerJob, nb.cpuPerJob, dj.rate, dbt.rate, dbt.rate/dj.rate,
			sj.rate, sb.rate, sb.rate/sj.rate)
	}
	b.ReportMetric(median(noopJob), "noop_per_job_jobs/s")
	b.ReportMetric(median(noopBatched), "noop_batch100_jobs/s")
	b.ReportMetric(median(noopRatio), "noop_ratio")
	b.ReportMetric(median(cpuJob), "noop_per_job_cpu_µs/job")
	b.ReportMetric(median(cpuBatched), "noop_batch100_cpu_µs/job")
	b.ReportMetric(median(devRatio), "device_ratio")
	b.ReportMetric(median(sinkJobs), "sink_per_job_jobs/s")
	b.ReportMetric(median(sinkBatched), "sink_batch100_jobs/s")
	b.ReportMetric(median(sinkRatio), "sink_ratio")
}

// burn is one burn-down: its rate, and the test process's CPU time per job over it.
type burn struct {
	rate, cpuPerJob float64
}

// burnDownCounted is burnDown, waiting on the runner's count of recorded successes
// (Stats.Completed) instead of counting rows: a count(*) of the backlog every 10 ms
// was a third of the server's work in a 100,000-job burn-down, against both handlers
// alike. The rows are counted once at the end.
func burnDownCounted(b *testing.B, db *testkit.DB, r *runner.Runner, n int) burn {
	b.Helper()
	_, err := db.Pool.Exec(db.Ctx, `select pgrun.enqueue_jobs(jsonb_agg(jsonb_build_object('kind', 'work', 'queue', 'bench')))
		from generate_series(1, $1)`, n)
	require.NoError(b, err)
	cpu := processCPU()
	began := time.Now()
	stop := testkit.StartRunner(b, r)
	testkit.Eventually(b, 5*time.Minute, "the burn-down", func() bool { return r.Stats().Completed >= int64(n) })
	took := time.Since(began)
	used := processCPU() - cpu
	stop()
	require.Equal(b, n, countRowsTB(b, db, `select count(*) from pgrun.jobs where queue = 'bench' and status = 'succeeded'`))
	return burn{rate: float64(n) / took.Seconds(), cpuPerJob: float64(used.Microseconds()) / float64(n)}
}

// processCPU is the CPU time the test process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// median is the middle value of v (the upper one of an even count).
func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}
