package tests

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/sqlapi"
	"github.com/pgrun/pgrun/internal/testdb"
	"github.com/pgrun/pgrun/internal/testkit"
)

// The rollups' costs (docs/benchmarks.md, "Rollups"):
//
//	go test ./tests/ -run '^$' -bench Rollup -benchtime 20x
//
// BenchmarkRollupMinute is the maintenance step's cost for one minute of a system
// ending 2,000 jobs a second: 120,000 jobs of 5 queues and 4 kinds, 2% failed with
// two kinds of message, 1% cancelled, rolled up (counted, grouped, written) in one
// rollup_minutes call. BenchmarkRollupReaders is the dashboard's reads over 7 days of
// rollups of 20 queue and kind pairs (every minute of each), with an error group
// failing in each pair every minute and a minute and a half not rolled up yet (200
// endings a second) counted live: job_series over 1 hour, 24 hours and 7 days,
// error_groups over 1 hour, 24 hours and 7 days, and typical_run_times over 24
// hours. Each page has to answer in 150 ms.
func BenchmarkRollupMinute(b *testing.B) {
	url := testdb.URL(b)
	db := &testkit.DB{Ctx: context.Background(), Pool: testdb.PoolFor(b, url), URL: url}
	seed := testkit.AsServerUser(b, url)
	minute := time.Now().UTC().Truncate(time.Minute).Add(-2 * time.Minute)
	for _, sql := range []string{
		`set session_replication_role = replica`,
		`insert into pgrun.jobs (kind, queue, status, attempt, max_attempts, run_at, created_at, started_at, finished_at, error)
		 select 'kind' || (i % 4), 'q' || (i % 5), s.status::pgrun.job_status, 1, 1, t - interval '2 s' * (i % 7) / 7,
		        t - interval '3 s', t - (i % 1000) * interval '1 ms', t,
		        case when s.status = 'failed' then jsonb_build_object('class', 'error', 'message',
		          case when i % 3 = 0 then '550 mailbox unavailable'
		               else 'smtp 421 4.7.0 try again later (id ' || i || ')' end) end
		 from generate_series(1, 120000) i,
		      lateral (select $1::timestamptz + (i - 1) * interval '0.5 ms' as t,
		                      case when i % 50 = 0 then 'failed' when i % 100 = 1 then 'cancelled' else 'succeeded' end as status) s`,
		`vacuum analyze pgrun.jobs`,
	} {
		_, err := seed.Exec(db.Ctx, sql, argsFor(sql, minute)...)
		require.NoError(b, err, sql)
	}
	now := minute.Add(time.Minute + 15*time.Second) // the minute has settled
	var moved int
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		_, err := db.Pool.Exec(db.Ctx, `update pgrun.rollup_watermark set through = $1`, minute)
		require.NoError(b, err)
		b.StartTimer()
		require.NoError(b, db.Pool.QueryRow(db.Ctx, sqlapi.RollupMinutes, now).Scan(&moved))
	}
	b.StopTimer()
	require.Equal(b, 1, moved)
	var n int
	require.NoError(b, db.Pool.QueryRow(db.Ctx, `select sum(succeeded + failed + cancelled) from pgrun.job_minutes`).Scan(&n))
	require.Equal(b, 120000, n)
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/minute")
}

// argsFor gives a seeding statement its one parameter, at, when it has one.
func argsFor(sql string, at time.Time) []any {
	if strings.Contains(sql, "$1") {
		return []any{at}
	}
	return nil
}

func BenchmarkRollupReaders(b *testing.B) {
	url := testdb.URL(b)
	db := &testkit.DB{Ctx: context.Background(), Pool: testdb.PoolFor(b, url), URL: url}
	seed := testkit.AsServerUser(b, url)
	// The rollups end a minute and a half ago; what ended since is counted live.
	through := time.Now().UTC().Truncate(time.Minute).Add(-time.Minute)
	for _, sql := range []string{
		`set session_replication_role = replica`,
		// 7 days of minutes of 20 queue and kind pairs, with histograms of 16 to 20 buckets.
		`insert into pgrun.job_minutes (minute, queue, kind, succeeded, failed, cancelled, wait_hist, run_hist)
		 select m, 'q' || (k % 5), 'kind' || (k / 5), 100 + k, 2, 1,
		        array(select ((g * 7 + k) % 13)::int from generate_series(1, 16 + k % 5) g),
		        array(select ((g * 5 + k) % 11)::int from generate_series(1, 18 + k % 3) g)
		 from generate_series($1::timestamptz - interval '7 days', $1::timestamptz - interval '1 minute', interval '1 minute') m,
		      generate_series(0, 19) k`,
		`insert into pgrun.job_quarters (quarter, queue, kind, succeeded, failed, cancelled, wait_hist, run_hist)
		 select s.at, s.queue, s.kind, s.succeeded, s.failed, s.cancelled, s.wait_hist, s.run_hist
		 from pgrun.rollup_series(date_bin('15 minutes', $1::timestamptz - interval '7 days', timestamptz '1970-01-01 00:00Z'),
		                          date_bin('15 minutes', $1::timestamptz, timestamptz '1970-01-01 00:00Z'),
		                          interval '15 minutes', null, null, null, $1::timestamptz,
		                          date_bin('15 minutes', $1::timestamptz, timestamptz '1970-01-01 00:00Z'),
		                          date_bin('15 minutes', $1::timestamptz - interval '7 days', timestamptz '1970-01-01 00:00Z')) s`,
		// Their totals over every queue and kind, as rollup_minutes writes them.
		`insert into pgrun.job_minute_totals (minute, succeeded, failed, cancelled, wait_hist, run_hist)
		 select minute, sum(succeeded), sum(failed), sum(cancelled), pgrun.hist_add(wait_hist), pgrun.hist_add(run_hist)
		 from pgrun.job_minutes group by minute`,
		`insert into pgrun.job_quarter_totals (quarter, succeeded, failed, cancelled, wait_hist, run_hist)
		 select quarter, sum(succeeded), sum(failed), sum(cancelled), pgrun.hist_add(wait_hist), pgrun.hist_add(run_hist)
		 from pgrun.job_quarters group by quarter`,
		`insert into pgrun.error_minutes (minute, queue, kind, error_group, n, sample, first_at, last_at)
		 select m.minute, m.queue, m.kind,
		        case when m.kind = 'kind0' then 'smtp 421 N.N.N try again later (id N)' else m.kind || ' failed: timeout after Ns' end,
		        m.failed, 'a sample', m.minute, m.minute + interval '59 s'
		 from pgrun.job_minutes m`,
		`insert into pgrun.error_quarters (quarter, queue, kind, error_group, n, sample, first_at, last_at)
		 select date_bin('15 minutes', e.minute, timestamptz '1970-01-01 00:00Z'), e.queue, e.kind, e.error_group, sum(e.n),
		        min(e.sample), min(e.first_at), max(e.last_at)
		 from pgrun.error_minutes e
		 where e.minute < date_bin('15 minutes', $1::timestamptz, timestamptz '1970-01-01 00:00Z')
		 group by 1, 2, 3, 4`,
		`update pgrun.rollup_watermark set through = $1`,
		// A minute and a half of live endings, 200 a second.
		`insert into pgrun.jobs (kind, queue, status, attempt, max_attempts, run_at, created_at, started_at, finished_at, error)
		 select 'kind' || (i % 4), 'q' || (i % 5), case when i % 50 = 0 then 'failed' else 'succeeded' end::pgrun.job_status,
		        1, 1, t - interval '2 s', t - interval '3 s', t - interval '1 s', t,
		        case when i % 50 = 0 then '{"class": "error", "message": "smtp 421 4.7.0 try again later"}'::jsonb end
		 from generate_series(1, 18000) i, lateral (select $1::timestamptz + i * interval '5 ms' as t) s`,
		`vacuum analyze pgrun.jobs, pgrun.job_minutes, pgrun.job_quarters, pgrun.job_minute_totals, pgrun.job_quarter_totals,
		 pgrun.error_minutes, pgrun.error_quarters`,
	} {
		_, err := seed.Exec(db.Ctx, sql, argsFor(sql, through)...)
		require.NoError(b, err, sql)
	}
	for _, q := range []struct {
		name string
		sql  string
		args []any
	}{
		{"series_1h_by_minute", sqlapi.DashboardJobSeries, []any{"1 hour", "1 minute", nil, nil, "all"}},
		{"series_24h_by_15min", sqlapi.DashboardJobSeries, []any{"24 hours", "15 minutes", nil, nil, "all"}},
		{"series_24h_by_15min_per_queue_kind", sqlapi.DashboardJobSeries, []any{"24 hours", "15 minutes", nil, nil, nil}},
		{"series_7d_by_2h", sqlapi.DashboardJobSeries, []any{"7 days", "2 hours", nil, nil, "all"}},
		{"error_groups_1h", sqlapi.DashboardErrorGroups, []any{"1 hour", 50}},
		{"error_groups_24h", sqlapi.DashboardErrorGroups, []any{"24 hours", 50}},
		{"error_groups_7d", sqlapi.DashboardErrorGroups, []any{"7 days", 50}},
		{"typical_run_times_24h", sqlapi.DashboardTypicalRunTimes, []any{"24 hours"}},
	} {
		b.Run(q.name, func(b *testing.B) {
			var rows int
			for range b.N {
				r, err := db.Pool.Query(db.Ctx, q.sql, q.args...)
				require.NoError(b, err)
				rows = 0
				for r.Next() {
					rows++
				}
				require.NoError(b, r.Err())
			}
			require.Positive(b, rows)
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/op")
			b.ReportMetric(float64(rows), "rows")
		})
	}
}
