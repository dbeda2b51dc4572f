package tests

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testdb"
	"github.com/pgrun/pgrun/internal/testkit"
)

// BenchmarkEnqueue measures Enqueue, one job per statement (ns/op is per job), and
// EnqueueMany (pgrun.enqueue_batch) in batches of 500 and 1,000 (ns/job, jobs/s).
func BenchmarkEnqueue(b *testing.B) {
	ctx := context.Background()
	pool := testdb.Pool(b)
	b.Run("one", func(b *testing.B) {
		for b.Loop() {
			_, err := pgrun.Enqueue(ctx, pool, "noop", nil)
			require.NoError(b, err)
		}
	})
	for _, size := range []int{500, 1000} {
		b.Run(fmt.Sprintf("batch%d", size), func(b *testing.B) {
			specs := make([]pgrun.JobSpec, size)
			for i := range specs {
				specs[i] = pgrun.JobSpec{Kind: "noop"}
			}
			n := 0
			for b.Loop() {
				_, err := pgrun.EnqueueMany(ctx, pool, specs)
				require.NoError(b, err)
				n += len(specs)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/job")
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}

// BenchmarkClaimComplete measures the database side of a burn-down: claim_jobs of
// a batch, then complete_jobs of the same batch (two commits), against a backlog.
func BenchmarkClaimComplete(b *testing.B) {
	for _, batch := range []int{1, 100, 500} {
		b.Run(fmt.Sprintf("batch%d", batch), func(b *testing.B) {
			ctx := context.Background()
			pool := testdb.Pool(b)
			backlog := max(b.N, 1) * batch
			for done := 0; done < backlog; done += 5000 {
				specs := make([]pgrun.JobSpec, min(5000, backlog-done))
				for i := range specs {
					specs[i] = pgrun.JobSpec{Kind: "noop"}
				}
				_, err := pgrun.EnqueueMany(ctx, pool, specs)
				require.NoError(b, err)
			}
			jobs := 0
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				rows, err := pool.Query(ctx, `select id, attempt from pgrun.claim_jobs('default', 'bench', $1)`, batch)
				require.NoError(b, err)
				type claimed struct {
					ID      int64 `db:"id"`
					Attempt int32 `db:"attempt"`
				}
				got, err := pgx.CollectRows(rows, pgx.RowToStructByName[claimed])
				require.NoError(b, err)
				ids := make([]int64, len(got))
				attempts := make([]int32, len(got))
				for k, c := range got {
					ids[k], attempts[k] = c.ID, c.Attempt
				}
				_, err = pool.Exec(ctx, `select pgrun.complete_jobs($1, $2)`, ids, attempts)
				require.NoError(b, err)
				jobs += len(got)
			}
			b.StopTimer()
			require.Equal(b, b.N*batch, jobs)
			b.ReportMetric(float64(jobs)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}

// BenchmarkClaimCompleteWithHistory compares claim+complete (batches of 100) on a
// table with no history against one holding 5 million finished jobs: the partial
// claim and running indexes keep history out of the hot path. Seeding takes a minute
// or so; set PGRUN_BENCH_HISTORY to change the number of finished rows.
func BenchmarkClaimCompleteWithHistory(b *testing.B) {
	history := 5_000_000
	if v := os.Getenv("PGRUN_BENCH_HISTORY"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(b, err)
		history = n
	}
	for _, rows := range []int{0, history} {
		b.Run(fmt.Sprintf("finished=%d", rows), func(b *testing.B) {
			ctx := context.Background()
			url := testdb.URL(b)
			pool := testdb.PoolFor(b, url)
			if rows > 0 {
				seedFinished(b, url, rows)
			}
			backlog := max(b.N, 1) * 100
			for done := 0; done < backlog; done += 5000 {
				specs := make([]pgrun.JobSpec, min(5000, backlog-done))
				for i := range specs {
					specs[i] = pgrun.JobSpec{Kind: "noop"}
				}
				_, err := pgrun.EnqueueMany(ctx, pool, specs)
				require.NoError(b, err)
			}
			_, err := pool.Exec(ctx, `analyze pgrun.jobs`)
			require.NoError(b, err)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				_, err := pool.Exec(ctx, `select pgrun.complete_jobs(array_agg(id), array_agg(attempt))
					from pgrun.claim_jobs('default', 'bench', 100)`)
				require.NoError(b, err)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}

// seedFinished inserts n succeeded jobs spread over the last week, as the server's
// own user with triggers off (the enqueue trigger would refuse finished rows).
func seedFinished(b *testing.B, testURL string, n int) {
	b.Helper()
	conn := testkit.AsServerUser(b, testURL)
	_, err := conn.Exec(context.Background(), `set session_replication_role = replica`)
	require.NoError(b, err)
	_, err = conn.Exec(context.Background(), `
		insert into pgrun.jobs (kind, queue, args, status, attempt, max_attempts, run_at, created_at,
		                        started_at, finished_at, claimed_by, result)
		select 'noop', 'default', '{}', 'succeeded', 1, 25, t, t, t, t + interval '5 ms', 'seed', null
		from (select now() - (i * interval '100 ms') as t from generate_series(1, $1) i) s`, n)
	require.NoError(b, err)
	_, err = conn.Exec(context.Background(), `vacuum analyze pgrun.jobs`)
	require.NoError(b, err)
}

// BenchmarkTenantMode measures what the tenant mode costs, with it off and on:
// enqueue_jobs of 500 and enqueue_job of one as a pgrun_enqueuer mapped to a tenant
// (row-level security's check runs per row; the tenant is worked out once per
// statement, by the trigger for a single job) and claim+complete of 500 as a
// pgrun_worker (SECURITY DEFINER functions: row-level security does not apply).
func BenchmarkTenantMode(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("on=%t", on), func(b *testing.B) {
			ctx := context.Background()
			url := testdb.URL(b)
			kit := &testkit.DB{Ctx: ctx, Pool: testdb.PoolFor(b, url), URL: url}
			enqueuerRole, enqueuer := testkit.NewRole(b, kit, "pgrun_enqueuer")
			_, worker := testkit.NewRole(b, kit, "pgrun_worker")
			_, err := kit.Pool.Exec(ctx, `select pgrun.grant_tenant($1, 'acme'), pgrun.set_tenant_mode($2)`, enqueuerRole, on)
			require.NoError(b, err)
			specs := make([]pgrun.JobSpec, 500)
			for i := range specs {
				specs[i] = pgrun.JobSpec{Kind: "noop"}
			}
			b.Run("enqueue500", func(b *testing.B) {
				n := 0
				for b.Loop() {
					_, err := pgrun.EnqueueMany(ctx, enqueuer, specs)
					require.NoError(b, err)
					n += len(specs)
				}
				b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "jobs/s")
			})
			b.Run("enqueue1", func(b *testing.B) { // one job per statement: the trigger stamps it
				for b.Loop() {
					_, err := pgrun.Enqueue(ctx, enqueuer, "noop", nil)
					require.NoError(b, err)
				}
			})
			b.Run("claimcomplete500", func(b *testing.B) {
				for range max(b.N, 1) {
					_, err := pgrun.EnqueueMany(ctx, enqueuer, specs)
					require.NoError(b, err)
				}
				b.ResetTimer()
				jobs := 0
				for i := 0; i < b.N; i++ {
					var ids []int64
					var attempts []int32
					require.NoError(b, worker.QueryRow(ctx, `select coalesce(array_agg(id), '{}'), coalesce(array_agg(attempt), '{}')
						from pgrun.claim_jobs('default', 'bench', 500)`).Scan(&ids, &attempts))
					var n int
					require.NoError(b, worker.QueryRow(ctx, `select count(*) from pgrun.complete_jobs($1, $2, null, 'bench')`,
						ids, attempts).Scan(&n))
					jobs += n
				}
				b.StopTimer()
				b.ReportMetric(float64(jobs)/b.Elapsed().Seconds(), "jobs/s")
			})
		})
	}
}
