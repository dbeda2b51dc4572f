package tests

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testdb"
)

// BenchmarkEnqueue measures enqueue_job one job per statement and enqueue_jobs in
// batches; ns/op is per job.
func BenchmarkEnqueue(b *testing.B) {
	ctx := context.Background()
	pool := testdb.Pool(b)
	b.Run("one", func(b *testing.B) {
		for b.Loop() {
			_, err := pgrun.Enqueue(ctx, pool, "noop", nil)
			require.NoError(b, err)
		}
	})
	b.Run("batch500", func(b *testing.B) {
		specs := make([]pgrun.JobSpec, 500)
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
	})
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
