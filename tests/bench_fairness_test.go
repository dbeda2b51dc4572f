package tests

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testdb"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
)

// The fairness, per-key rate and aging benchmarks of docs/benchmarks.md ("Flow control
// per key"):
//
//	go test ./tests/ -run '^$' -bench 'Fair' -benchtime 1x
//
// Each reports its own figures (b.ReportMetric); ns/op is the whole run.

// BenchmarkFairnessLatency: tenant A holds 200,000 queued jobs, tenant B enqueues 20
// jobs a second for 8 seconds into the same queue, and one runner of 50 slots works
// through both (each job sleeps 1 ms, so that A's backlog lasts past B's 8 seconds).
// B's enqueue-to-start time (started_at - created_at, the engine's clock), p50 and p99,
// with fairness by tenant off and on, and on with pgrun.jobs vacuumed every second (as
// autovacuum would; this machine runs without it): a_left is how many of A's jobs were
// still queued when B's last job was enqueued.
func BenchmarkFairnessLatency(b *testing.B) {
	for _, c := range []struct {
		name         string
		fair, vacuum bool
	}{{"fair=false", false, false}, {"fair=true", true, false}, {"fair=true/vacuum=1s", true, true}} {
		b.Run(c.name, func(b *testing.B) {
			var p50, p99, aLeft float64
			for range b.N {
				p50, p99, aLeft = fairnessLatency(b, c.fair, c.vacuum)
			}
			b.ReportMetric(p50, "b_p50_ms")
			b.ReportMetric(p99, "b_p99_ms")
			b.ReportMetric(aLeft, "a_left")
		})
	}
}

// fairnessLatency runs one round of BenchmarkFairnessLatency.
func fairnessLatency(b *testing.B, fair, vacuum bool) (p50, p99, aLeft float64) {
	db := testkit.NewDB(b)
	settings := "'bench'"
	if fair {
		settings += ", fair_by => 'tenant'"
	}
	testkit.ExecAll(b, db, `select pgrun.set_queue(`+settings+`)`,
		`insert into pgrun.jobs (kind, queue, tenant) select 'work', 'bench', 'A' from generate_series(1, 200000)`,
		`vacuum analyze pgrun.jobs`)
	r := benchRunner(db.Pool, 50)
	testkit.Handle(b, r, "work", func(ctx context.Context, _ *runner.Job[struct{}]) (any, error) {
		time.Sleep(time.Millisecond)
		return nil, nil
	})
	stop := testkit.StartRunner(b, r)
	defer stop()
	const perSecond, seconds = 20, 8
	if vacuum {
		defer vacuumEvery(db, time.Second)()
	}
	tick := time.NewTicker(time.Second / perSecond)
	for range perSecond * seconds {
		<-tick.C
		_, err := db.Pool.Exec(db.Ctx, `insert into pgrun.jobs (kind, queue, tenant) values ('work', 'bench', 'B')`)
		require.NoError(b, err)
	}
	tick.Stop()
	aLeft = float64(countRowsTB(b, db, `select count(*) from pgrun.jobs where tenant = 'A' and status = 'queued'`))
	st := r.Stats()
	b.Logf("fair=%v vacuum=%v: %.0f jobs a claim, %d claims", fair, vacuum, float64(st.Claimed)/float64(max(st.ClaimCalls, 1)), st.ClaimCalls)
	testkit.Eventually(b, 5*time.Minute, "B's jobs started", func() bool {
		return countRowsTB(b, db, `select count(*) from pgrun.jobs where tenant = 'B' and started_at is null`) == 0
	})
	rows, err := db.Pool.Query(db.Ctx, `select extract(epoch from started_at - created_at) * 1000 from pgrun.jobs
		where tenant = 'B'`)
	require.NoError(b, err)
	var ms []float64
	for rows.Next() {
		var v float64
		require.NoError(b, rows.Scan(&v))
		ms = append(ms, v)
	}
	require.NoError(b, rows.Err())
	sort.Float64s(ms)
	var largest int
	require.NoError(b, db.Pool.QueryRow(db.Ctx, `select coalesce(max(c), 0) from (select count(*) as c from pgrun.jobs
		where claim_id is not null group by left(replace(claim_id::text, '-', ''), 16)) x`).Scan(&largest))
	b.Logf("fair=%v vacuum=%v: B's start p50 %.1f ms, p99 %.1f ms; largest claim %d", fair, vacuum, ms[len(ms)/2],
		ms[len(ms)*99/100], largest)
	stop()
	db.Pool.Close() // its connections back before the next round's database opens
	return ms[len(ms)/2], ms[len(ms)*99/100], aLeft
}

// BenchmarkFairnessBurnDown: the burn-down of 100,000 no-op jobs over 1,000 concurrency
// keys (and as many tenants; _10: over 10) by one runner of 200 slots, in a queue with
// none of the per-key settings, with fairness by key, fairness by tenant, a per-key
// rate limit too high to bind (1,000,000 a second), and aging; each setting in its own
// database, the settings alternated round by round. Reports jobs/s of each and its
// ratio to the queue with none (goal: at least 0.7).
func BenchmarkFairnessBurnDown(b *testing.B) {
	burnDownCases(b, []burnDownCase{
		{"none", "", 1000},
		{"fair_key", "fair_by => 'concurrency_key'", 1000},
		{"fair_tenant", "fair_by => 'tenant'", 1000},
		{"fair_key_10", "fair_by => 'concurrency_key'", 10},
		{"key_rate", "key_rate_limit => 1000000, key_rate_period => '1 second'", 1000},
		{"aging", "priority_aging => '1 minute'", 1000},
	})
}

// burnDownCase is one queue of a burn-down benchmark: its settings (set_queue's
// arguments after the name; "plain": jobs without a key), and how many keys its
// jobs spread over.
type burnDownCase struct {
	name, settings string
	keys           int
}

// BenchmarkPlainBurnDown: the same burn-down in a queue whose jobs have no key and that
// sets nothing, the queue that must pay nothing for flow control per key. It runs on
// the build before the change too (copy this file there): alternate the two builds.
func BenchmarkPlainBurnDown(b *testing.B) {
	burnDownCases(b, []burnDownCase{{"plain", "plain", 0}})
}

// burnDownCases runs BenchmarkFairnessBurnDown's burn-down for each case, b.N rounds of
// all of them, and reports the median jobs/s of each (and its ratio to "none").
//
// PGRUN_BENCH_CASES (names, comma-separated: none,fair_key) runs those cases only.
// PGRUN_BENCH_VACUUM (a duration, e.g. 1s) vacuums pgrun.jobs that often during each
// burn-down, as autovacuum would on a server that runs it (pgrun sets the table's
// scale factors to 1%); this project's test server runs without autovacuum, so
// without it every claim steps over the entries of every job claimed so far.
// PGRUN_BENCH_TRICKLE (a duration, e.g. 5ms) enqueues one job of a key of its own
// that often during each burn-down, one INSERT each, so that the runner is woken all
// along, as in a queue that takes new work while it burns down a backlog; the rate
// counts those jobs with the backlog's.
func burnDownCases(b *testing.B, cases []burnDownCase) {
	const n = 100000
	vacuum, trickle := benchEnvDuration(b, "PGRUN_BENCH_VACUUM"), benchEnvDuration(b, "PGRUN_BENCH_TRICKLE")
	if only := os.Getenv("PGRUN_BENCH_CASES"); only != "" {
		keep := strings.Split(only, ",")
		cases = slices.DeleteFunc(slices.Clone(cases), func(c burnDownCase) bool { return !slices.Contains(keep, c.name) })
	}
	rates := map[string][]float64{}
	for range b.N {
		for _, c := range cases {
			db := testkit.NewDB(b)
			settings := "'bench'"
			if c.settings != "" && c.settings != "plain" {
				settings += ", " + c.settings
			}
			testkit.ExecAll(b, db, `select pgrun.set_queue(`+settings+`)`)
			if c.settings == "plain" {
				testkit.ExecAll(b, db, fmt.Sprintf(`insert into pgrun.jobs (kind, queue) select 'work', 'bench' from generate_series(1, %d)`, n))
			} else {
				testkit.ExecAll(b, db, fmt.Sprintf(`insert into pgrun.jobs (kind, queue, concurrency_key, tenant, priority)
					select 'work', 'bench', 'k' || (i %% %d), 't' || (i %% %d), i %% 3 from generate_series(1, %d) i`,
					c.keys, c.keys, n))
			}
			testkit.ExecAll(b, db, `vacuum analyze pgrun.jobs`)
			checkpoint(b)
			r := benchRunner(db.Pool, 200)
			testkit.Handle(b, r, "work", func(context.Context, *runner.Job[struct{}]) (any, error) { return nil, nil })
			began := time.Now()
			stop := testkit.StartRunner(b, r)
			stopVacuum := func() {}
			if vacuum > 0 {
				stopVacuum = vacuumEvery(db, vacuum)
			}
			var trickled atomic.Int64
			stopTrickle := func() {}
			if trickle > 0 {
				stopTrickle = trickleInto(db, trickle, &trickled)
			}
			// The runner's count of recorded successes, not a count(*) of the backlog,
			// which every 10 ms was a third of the server's work (burnDownCounted).
			testkit.Eventually(b, 10*time.Minute, "the burn-down", func() bool { return r.Stats().Completed >= n+trickled.Load() })
			stopTrickle()
			total := float64(n + trickled.Load())
			rates[c.name] = append(rates[c.name], total/time.Since(began).Seconds())
			st := r.Stats()
			b.Logf("%s: %.0f jobs/s, %.0f jobs a claim, %.0f a completion, %d trickled", c.name, total/time.Since(began).Seconds(),
				float64(st.Claimed)/float64(max(st.ClaimCalls, 1)), float64(st.Completed)/float64(max(st.CompleteCalls, 1)), trickled.Load())
			stopVacuum()
			stop()
			require.Equal(b, n, countRowsTB(b, db, `select count(*) from pgrun.jobs where queue = 'bench' and status = 'succeeded'
				and tenant is distinct from 'trickle'`))
			db.Pool.Close() // its connections back before the next case's database opens

		}
	}
	median := func(v []float64) float64 {
		s := append([]float64(nil), v...)
		sort.Float64s(s)
		return s[len(s)/2]
	}
	for _, c := range cases {
		m := median(rates[c.name])
		b.ReportMetric(m, c.name+"_jobs/s")
		if none, ok := rates["none"]; ok && c.name != "none" {
			b.ReportMetric(m/median(none), c.name+"_ratio")
		}
	}
}

// benchEnvDuration reads the duration in the environment variable name, 0 if unset.
func benchEnvDuration(b *testing.B, name string) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	require.NoError(b, err, name)
	return d
}

// trickleInto enqueues one job into queue bench every d (tenant and concurrency key
// "trickle"), counting those that committed in n, until the returned function is
// called.
func trickleInto(db *testkit.DB, d time.Duration, n *atomic.Int64) (stop func()) {
	return repeatEvery(db.Ctx, d, func(ctx context.Context) {
		if _, err := db.Pool.Exec(ctx, `insert into pgrun.jobs (kind, queue, tenant, concurrency_key)
			values ('work', 'bench', 'trickle', 'trickle')`); err == nil {
			n.Add(1)
		}
	})
}

// vacuumEvery vacuums db's pgrun.jobs every d (as autovacuum would; this project's
// test server runs without it) until the returned function is called, which waits for
// a vacuum in progress to end.
func vacuumEvery(db *testkit.DB, d time.Duration) (stop func()) {
	return repeatEvery(db.Ctx, d, func(ctx context.Context) { _, _ = db.Pool.Exec(ctx, `vacuum pgrun.jobs`) })
}

// repeatEvery calls fn at once and then every d (a call that runs past a tick skips
// it) until the returned function is called, which cancels fn's context and waits for
// a call in progress to return.
func repeatEvery(ctx context.Context, d time.Duration, fn func(context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(d)
		defer tick.Stop()
		for {
			fn(ctx)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}

// checkpoint writes the server's dirty pages out (as its superuser: CHECKPOINT is
// theirs), so that a burn-down starts with none of the case before it left to write
// and pays the full-page images of its own first touches only: without it a case that
// followed a 100,000-row insert and vacuum paid for them at random.
func checkpoint(b *testing.B) {
	b.Helper()
	conn, err := pgx.Connect(context.Background(), testdb.ServerURL())
	require.NoError(b, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(context.Background(), `checkpoint`)
	require.NoError(b, err)
}
