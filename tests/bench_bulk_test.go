package tests

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testdb"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
)

// BenchmarkBulkRetry is issue 34's figure (docs/benchmarks.md, "Bulk actions"):
//
//	go test ./tests/ -run '^$' -bench BulkRetry -benchtime 1x
//
// 100,000 failed jobs that a filter matches (queue dead, error text "421"), beside
// 10,000 permanent "550" failures it leaves out, are retried by `runner job retry
// --queue dead --error 421` (retry_matching in batches of 1,000, resting after each as
// long as it took), while a runner of 50 slots
// burns down no-op jobs of another queue. It reports the retry's time (retry_s, to be
// within 30 s) and the runner's rate of claims during the retry against its rate over
// as long right after it, alone (claim_rate_ratio, to be at least 0.7).
func BenchmarkBulkRetry(b *testing.B) {
	const (
		n       = 100_000
		backlog = 1_500_000 // more than the runner burns in the two windows (about 40,000 a second here)
	)
	var retrySecs, before, during float64
	for range b.N {
		b.StopTimer()
		url := testdb.URL(b)
		db := &testkit.DB{Ctx: context.Background(), Pool: testdb.PoolFor(b, url), URL: url}
		seed := testkit.AsServerUser(b, url)
		for _, sql := range []string{
			`set session_replication_role = replica`,
			`insert into pgrun.queues (name) values ('dead'), ('burn') on conflict do nothing`,
			`insert into pgrun.jobs (kind, queue, args, status, attempt, failures, max_attempts, run_at, created_at,
			                        started_at, finished_at, claimed_by, error)
			 select 'mail', 'dead', jsonb_build_object('n', i), 'failed', 1, 1, 1, t, t, t, t + interval '5 ms', 'seed',
			        jsonb_build_object('class', 'error', 'message',
			          case when i % 11 = 0 then '550 5.1.1 mailbox unavailable' else 'smtp 421 4.7.0 try again later' end)
			 from (select i, now() - interval '1 hour' + i * interval '1 ms' as t from generate_series(1, 110000) i) s`,
			`insert into pgrun.jobs (kind, queue, max_attempts) select 'noop', 'burn', 25 from generate_series(1, ` + strconv.Itoa(backlog) + `)`,
			`vacuum analyze pgrun.jobs`,
		} {
			_, err := seed.Exec(db.Ctx, sql)
			require.NoError(b, err, sql)
		}
		require.Equal(b, n, countRowsTB(b, db, `select count(*) from pgrun.jobs where queue = 'dead' and error ->> 'message' like '%421%'`))

		var claims atomic.Int64
		r := testkit.NewBareRunner(db.Pool, runner.Config{Queues: map[string]runner.QueueConfig{"burn": {Workers: 50}}})
		testkit.Handle(b, r, "noop", func(context.Context, *runner.Job[struct{}]) (any, error) {
			claims.Add(1)
			return nil, nil
		})
		stop := testkit.StartRunner(b, r)
		testkit.Eventually(b, time.Minute, "the runner to start claiming", func() bool { return claims.Load() > 1000 })

		// The retry as an operator runs it: `runner job retry` with the filter, its
		// own process and connection.
		start, atStart := time.Now(), claims.Load()
		b.StartTimer()
		out, err := exec.CommandContext(db.Ctx, runnerBin, "job", "retry", "--queue", "dead", "--error", "421",
			"--no-progress", "--database-url", url).CombinedOutput()
		b.StopTimer()
		elapsed := time.Since(start)
		duringClaims := claims.Load() - atStart
		// The runner alone for as long, right after: the rate to compare with.
		alone := claims.Load()
		<-time.After(elapsed) // a measuring window, not a wait for an event
		aloneClaims := claims.Load() - alone
		stop()
		require.NoError(b, err, "%s", out)
		require.Equal(b, fmt.Sprintf("%d failed jobs queued again\n", n), string(out))
		require.Positive(b, countRowsTB(b, db, `select count(*) from pgrun.jobs where queue = 'burn' and status = 'queued'`),
			"the backlog lasted the whole measurement")
		require.Equal(b, 10_000, countRowsTB(b, db, `select count(*) from pgrun.jobs where queue = 'dead' and status = 'failed'`),
			"the permanent failures stay failed")
		retrySecs = elapsed.Seconds()
		during = float64(duringClaims) / elapsed.Seconds()
		before = float64(aloneClaims) / elapsed.Seconds()
	}
	b.ReportMetric(retrySecs, "retry_s")
	b.ReportMetric(n/retrySecs, "retried_jobs/s")
	b.ReportMetric(before, "claims/s_alone")
	b.ReportMetric(during, "claims/s_during")
	b.ReportMetric(during/before, "claim_rate_ratio")
}
