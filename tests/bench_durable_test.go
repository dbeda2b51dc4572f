package tests

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
)

// The durable-execution benchmarks of docs/benchmarks.md ("Durable execution"):
//
//	go test ./tests/ -run '^$' -bench Durable -benchtime 1x
//
// Each reports its own figures (b.ReportMetric); ns/op is the whole run.

// burnDown runs n no-op jobs of queue "bench" through r and returns the seconds it
// took, from the runner's start to the last job's finish.
func burnDown(b *testing.B, db *testkit.DB, r *runner.Runner, n int) float64 {
	b.Helper()
	_, err := db.Pool.Exec(db.Ctx, `select pgrun.enqueue_jobs(jsonb_agg(jsonb_build_object('kind', 'work', 'queue', 'bench')))
		from generate_series(1, $1)`, n)
	require.NoError(b, err)
	began := time.Now()
	stop := testkit.StartRunner(b, r)
	defer stop()
	testkit.Eventually(b, 5*time.Minute, "the burn-down", func() bool {
		return countRowsTB(b, db, `select count(*) from pgrun.jobs where queue = 'bench' and status = 'succeeded'`) == n
	})
	return time.Since(began).Seconds()
}

func countRowsTB(tb testing.TB, db *testkit.DB, sql string, args ...any) int {
	tb.Helper()
	var n int
	require.NoError(tb, db.Pool.QueryRow(db.Ctx, sql, args...).Scan(&n))
	return n
}

func benchRunner(pool *pgxpool.Pool, slots int) *runner.Runner {
	return testkit.NewBareRunner(pool, runner.Config{Queues: map[string]runner.QueueConfig{"bench": {Workers: slots}}})
}

// BenchmarkDurableSteps: a handler of ten trivial steps beside a plain one. With 50
// slots on 2,000 jobs each: jobs/s and steps/s. With one slot on 200 jobs each: the
// time a step adds to its handler (ms/step), one statement (step_put) and its commit.
func BenchmarkDurableSteps(b *testing.B) {
	plainHandler := func(context.Context, *runner.Job[struct{}]) (any, error) { return nil, nil }
	tenSteps := func(ctx context.Context, j *runner.Job[struct{}]) (any, error) {
		for i := range 10 {
			if _, err := runner.Step(ctx, j, fmt.Sprintf("s%d", i), func(context.Context) (int, error) { return i, nil }); err != nil {
				return nil, err
			}
		}
		return nil, nil
	}
	run := func(slots, n int, h func(context.Context, *runner.Job[struct{}]) (any, error)) float64 {
		db := testkit.NewDB(b)
		r := benchRunner(db.Pool, slots)
		testkit.Handle(b, r, "work", h)
		return burnDown(b, db, r, n)
	}
	var plain, stepped, plain1, stepped1 float64
	for range b.N {
		plain, stepped = run(50, 2000, plainHandler), run(50, 2000, tenSteps)
		plain1, stepped1 = run(1, 200, plainHandler), run(1, 200, tenSteps)
	}
	b.ReportMetric(2000/plain, "plain_jobs/s")
	b.ReportMetric(2000/stepped, "10step_jobs/s")
	b.ReportMetric(2000*10/stepped, "steps/s")
	b.ReportMetric((stepped1-plain1)/(200*10)*1000, "ms/step_1slot")
}

// BenchmarkDurableParkedJobsCostTheClaim: the burn-down of 50,000 no-op jobs in a
// queue beside 100,000 parked jobs of the same queue (half sleeping, queued for
// later; half awaiting events, waiting), against the same queue without them.
func BenchmarkDurableParkedJobsCostTheClaim(b *testing.B) {
	const n = 50000
	var bare, beside float64
	for range b.N {
		db := testkit.NewDB(b)
		r := benchRunner(db.Pool, 200)
		testkit.Handle(b, r, "work", func(context.Context, *runner.Job[struct{}]) (any, error) { return nil, nil })
		bare = burnDown(b, db, r, n)

		db = testkit.NewDB(b)
		// The state sleep_job and await_event leave, written in bulk (the functions
		// take a claim each): 50,000 sleeping jobs, queued until tomorrow, and 50,000
		// waiting for an event each, with their waits.
		testkit.ExecAll(b, db,
			`select pgrun.enqueue_jobs(jsonb_agg(jsonb_build_object('kind', 'parked', 'queue', 'bench',
			   'run_at', now() + interval '1 day'))) from generate_series(1, 50000)`,
			`select pgrun.enqueue_jobs(jsonb_agg(jsonb_build_object('kind', 'awaiting', 'queue', 'bench'))) from generate_series(1, 50000)`,
			`update pgrun.jobs set status = 'waiting', attempt = 1 where kind = 'awaiting'`,
			`insert into pgrun.job_waits (job_id, step, event, until)
			 select id, 'pay', 'payment:' || id, now() + interval '1 day' from pgrun.jobs where kind = 'awaiting'`)
		testkit.ExecAll(b, db, `vacuum analyze pgrun.jobs`)
		require.Equal(b, 100000, countRowsTB(b, db, `select count(*) from pgrun.jobs where status in ('queued', 'waiting') and kind in ('parked', 'awaiting')`))
		r = benchRunner(db.Pool, 200)
		testkit.Handle(b, r, "work", func(context.Context, *runner.Job[struct{}]) (any, error) { return nil, nil })
		beside = burnDown(b, db, r, n)
	}
	b.ReportMetric(n/bare, "bare_jobs/s")
	b.ReportMetric(n/beside, "beside_100k_parked_jobs/s")
	b.ReportMetric(bare/beside, "ratio")
}

// BenchmarkDurableResumeAtOnce: 10,000 jobs that a runner of 500 slots parked with a
// durable sleep ending at the same second resume: the time from that second to the
// last one's start. Parked by the runner itself (its fetcher then wakes when the sleep
// ends, fetcher_due.go) and, for comparison, parked through SQL by another worker (the
// runner finds them at its poll, a second).
func BenchmarkDurableResumeAtOnce(b *testing.B) {
	const n = 10000
	resume := func(parkHere bool) float64 {
		db := testkit.NewDB(b)
		r := benchRunner(db.Pool, 500)
		var wake time.Time
		require.NoError(b, db.Pool.QueryRow(db.Ctx, `select date_trunc('second', now()) + interval '8 seconds'`).Scan(&wake))
		testkit.Handle(b, r, "work", func(ctx context.Context, j *runner.Job[struct{}]) (any, error) {
			return nil, runner.SleepUntil(ctx, j, "nap", wake)
		})
		testkit.ExecAll(b, db,
			`select pgrun.enqueue_jobs(jsonb_agg(jsonb_build_object('kind', 'work', 'queue', 'bench'))) from generate_series(1, 10000)`)
		if !parkHere {
			testkit.ExecAll(b, db, `select pgrun.worker_heartbeat('parker', 'h', 1, array['bench'])`)
			_, err := db.Pool.Exec(db.Ctx, `select count(pgrun.sleep_job(c.id, 'nap', 0, $1, 'parker', c.claim_id))
				from pgrun.claim_jobs('bench', 'parker', 10000) c`, wake)
			require.NoError(b, err)
		}
		stop := testkit.StartRunner(b, r)
		if parkHere {
			testkit.Eventually(b, time.Minute, "all parked", func() bool {
				return countRowsTB(b, db, `select count(*) from pgrun.jobs where status = 'queued' and run_at = $1`, wake) == n
			})
			require.True(b, time.Now().Before(wake), "parking took past the wake-up")
		}
		testkit.Eventually(b, time.Minute, "the sleepers finish", func() bool {
			return countRowsTB(b, db, `select count(*) from pgrun.jobs where status = 'succeeded'`) == n
		})
		stop()
		var spread float64
		require.NoError(b, db.Pool.QueryRow(db.Ctx, `select extract(epoch from max(started_at) - $1)::float8 from pgrun.jobs`, wake).Scan(&spread))
		return spread
	}
	var here, elsewhere float64
	for range b.N {
		here, elsewhere = resume(true), resume(false)
	}
	b.ReportMetric(here, "s_to_last_start")
	b.ReportMetric(elsewhere, "s_to_last_start_parked_elsewhere")
}

// BenchmarkDurableEventLatency: 200 jobs await events; each is emitted on its own,
// and the time from the emit's commit to the resumed job's start is taken, p50 and
// p99, with slots free.
func BenchmarkDurableEventLatency(b *testing.B) {
	const n = 200
	var lat []float64
	for range b.N {
		db := testkit.NewDB(b)
		r := benchRunner(db.Pool, 50)
		testkit.Handle(b, r, "work", func(ctx context.Context, j *runner.Job[struct{}]) (any, error) {
			_, err := runner.AwaitEvent(ctx, j, fmt.Sprintf("e:%d", j.ID), time.Hour)
			return nil, err
		})
		testkit.ExecAll(b, db, `select pgrun.enqueue_jobs(jsonb_agg(jsonb_build_object('kind', 'work', 'queue', 'bench'))) from generate_series(1, 200)`)
		stop := testkit.StartRunner(b, r)
		testkit.Eventually(b, time.Minute, "all parked", func() bool {
			return countRowsTB(b, db, `select count(*) from pgrun.jobs where status = 'waiting'`) == n
		})
		lat = lat[:0]
		for id := 1; id <= n; id++ { // one at a time; the latency is read from the database's clock
			_, err := db.Pool.Exec(db.Ctx, `select pgrun.emit_event($1, null)`, fmt.Sprintf("e:%d", id))
			require.NoError(b, err)
		}
		testkit.Eventually(b, time.Minute, "all resumed", func() bool {
			return countRowsTB(b, db, `select count(*) from pgrun.jobs where status = 'succeeded'`) == n
		})
		stop()
		rows, err := db.Pool.Query(db.Ctx, `select extract(epoch from j.started_at - e.emitted_at)::float8
			from pgrun.jobs j join pgrun.events e on e.name = 'e:' || j.id`)
		require.NoError(b, err)
		for rows.Next() {
			var s float64
			require.NoError(b, rows.Scan(&s))
			lat = append(lat, s*1000)
		}
		require.NoError(b, rows.Err())
	}
	sort.Float64s(lat)
	b.ReportMetric(lat[len(lat)/2], "p50_ms")
	b.ReportMetric(lat[len(lat)*99/100], "p99_ms")
}
