package tests

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/sqlapi"
	"github.com/pgrun/pgrun/internal/testkit"
)

// The rollups' guarantees (sql/functions/74_rollups.sql): a minute rolled up twice
// gives the same rows, a catch-up goes in bounded steps, rows past the retention go,
// and a bad input changes nothing.

// rollupState is every rollup row and the watermark, as text, to compare.
func rollupState(t testing.TB, b *testkit.DB) string {
	t.Helper()
	var s string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select concat_ws(E'\n',
		(select string_agg(m::text, E'\n' order by m.minute, m.queue, m.kind) from pgrun.job_minutes m),
		(select string_agg(q::text, E'\n' order by q.quarter, q.queue, q.kind) from pgrun.job_quarters q),
		(select string_agg(m::text, E'\n' order by m.minute) from pgrun.job_minute_totals m),
		(select string_agg(q::text, E'\n' order by q.quarter) from pgrun.job_quarter_totals q),
		(select string_agg(e::text, E'\n' order by e.minute, e.queue, e.kind, e.error_group) from pgrun.error_minutes e),
		(select string_agg(e::text, E'\n' order by e.quarter, e.queue, e.kind, e.error_group) from pgrun.error_quarters e),
		(select through::text from pgrun.rollup_watermark))`).Scan(&s))
	return s
}

// Rolling up minutes again, from a watermark moved back, writes the same rows: each
// minute is counted again and written over. A job that changed since (deleted,
// redriven) is counted as it is now, and a minute left with no endings loses its row.
func TestRollingUpAMinuteAgainChangesNothing(t *testing.T) {
	b := testkit.Setup(t)
	t0 := testkit.At("2030-01-01T10:00:00Z")
	ids, _ := injectBurst(t, b, t0)
	now := t0.Add(2 * time.Hour)
	rollUp(t, b, now)
	once := rollupState(t, b)
	require.NotEmpty(t, minuteRows(t, b))

	for _, back := range []string{"2030-01-01 10:00Z", "2030-01-01 10:31Z", "2030-01-01 09:00Z"} {
		testkit.ExecAll(t, b, `update pgrun.rollup_watermark set through = '`+back+`'`)
		rollUp(t, b, now)
		require.Equal(t, once, rollupState(t, b), "rolled up again from %s", back)
	}

	// The first 421 failure is gone: its minute is counted again without it.
	testkit.ExecAll(t, b, `delete from pgrun.jobs where id = `+strconv.FormatInt(ids[0], 10))
	testkit.ExecAll(t, b, `update pgrun.rollup_watermark set through = '2030-01-01 10:00Z'`)
	rollUp(t, b, now)
	var n int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select coalesce(sum(n), 0) from pgrun.error_minutes
		where error_group like 'smtp 421%' and queue = 'emails'`).Scan(&n))
	require.Equal(t, 156, n)
	// A minute whose only ending is gone has no row left.
	testkit.ExecAll(t, b, `delete from pgrun.jobs where finished_at >= '2030-01-01 11:29Z' and finished_at < '2030-01-01 11:30Z'`)
	testkit.ExecAll(t, b, `update pgrun.rollup_watermark set through = '2030-01-01 11:00Z'`)
	rollUp(t, b, now)
	require.Zero(t, countRowsTB(t, b, `select count(*) from pgrun.job_minutes where minute = '2030-01-01 11:29Z'`))
	require.Zero(t, countRowsTB(t, b, `select count(*) from pgrun.job_minute_totals where minute = '2030-01-01 11:29Z'`))
	require.Zero(t, countRowsTB(t, b, `select count(*) from pgrun.error_minutes where minute = '2030-01-01 11:29Z'`))
}

// A catch-up goes in bounded steps: each call counts at most max_rollup_minutes()
// minutes from the first with endings (empty minutes before and after are passed
// over at no cost), and the first call starts at most 7 days back, however old the
// oldest ending.
func TestRollupCatchUpIsBoundedPerCall(t *testing.T) {
	b := testkit.Setup(t)
	t0 := testkit.At("2030-01-10T10:00:00Z")
	var es []ending
	for i := range 23 { // one ending a minute for 23 minutes, after a quiet week
		es = append(es, ending{Queue: "q", Kind: "k", Status: "succeeded", At: t0.Add(time.Duration(i)*time.Minute + time.Second),
			Wait: time.Second, Run: time.Second})
	}
	es = append(es, ending{Queue: "q", Kind: "k", Status: "succeeded", At: t0.Add(-8 * 24 * time.Hour), Run: time.Second})
	endJobs(t, b, es)
	var most int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select pgrun.max_rollup_minutes()`).Scan(&most))
	require.Equal(t, 5, most)

	now := t0.Add(time.Hour)
	var seen []int
	for range 10 {
		var moved int
		require.NoError(t, b.Pool.QueryRow(b.Ctx, sqlapi.RollupMinutes, now).Scan(&moved))
		if moved == 0 {
			break
		}
		var minutes int
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.job_minutes`).Scan(&minutes))
		seen = append(seen, minutes)
	}
	// 23 minutes with endings, five a call; the last runs on to the closed edge.
	require.Equal(t, []int{5, 10, 15, 20, 23}, seen)
	var oldest time.Time
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select min(minute) from pgrun.job_minutes`).Scan(&oldest))
	require.Equal(t, t0, oldest.UTC(), "the ending 8 days back is past the first call's reach")
	var through time.Time
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select through from pgrun.rollup_watermark`).Scan(&through))
	require.Equal(t, t0.Add(59*time.Minute), through.UTC())
}

// The totals over every queue and kind (job_minute_totals, job_quarter_totals, which
// the charts of everything read) are the sums of the rows by queue and kind, minute
// by minute and quarter by quarter, whichever call rolled each up: a catch-up in
// steps, a quarter whose minutes came in several calls, minutes rolled up again.
func TestRollupTotalsAreTheSumsOfTheirQueuesAndKinds(t *testing.T) {
	b := testkit.Setup(t)
	t0 := testkit.At("2030-01-01T10:00:00Z")
	injectBurst(t, b, t0)
	var es []ending
	for i := range 90 { // 10:00 to 11:29, a few queues and kinds, one ending a minute each
		es = append(es, ending{Queue: []string{"emails", "images", "audit"}[i%3], Kind: []string{"send", "resize"}[i%2],
			Status: []string{"succeeded", "failed", "cancelled", "succeeded"}[i%4], At: t0.Add(time.Duration(i)*time.Minute + 7*time.Second),
			Wait: time.Duration(i) * 30 * time.Millisecond, Run: time.Duration(i%17) * 90 * time.Millisecond})
	}
	endJobs(t, b, es)
	for _, now := range []time.Time{t0.Add(17 * time.Minute), t0.Add(31*time.Minute + 20*time.Second), t0.Add(2 * time.Hour)} {
		rollUp(t, b, now)
	}
	testkit.ExecAll(t, b, `update pgrun.rollup_watermark set through = '2030-01-01 10:20Z'`)
	rollUp(t, b, t0.Add(2*time.Hour))

	sums := func(sql string) string {
		t.Helper()
		var s string
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select coalesce(string_agg(x::text, E'\n' order by x.at), '') from (`+sql+`) x`).Scan(&s))
		return s
	}
	byQueueKind := `select %[1]s as at, sum(succeeded)::int as succeeded, sum(failed)::int as failed, sum(cancelled)::int as cancelled,
		pgrun.hist_add(wait_hist) as wait_hist, pgrun.hist_add(run_hist) as run_hist from pgrun.%[2]s group by 1`
	totals := `select %[1]s as at, succeeded, failed, cancelled, wait_hist, run_hist from pgrun.%[2]s`
	want := sums(fmt.Sprintf(byQueueKind, "minute", "job_minutes"))
	require.NotEmpty(t, want)
	require.Equal(t, want, sums(fmt.Sprintf(totals, "minute", "job_minute_totals")))
	want = sums(fmt.Sprintf(byQueueKind, "quarter", "job_quarters"))
	require.Equal(t, 6, strings.Count(want, "\n")+1, "10:00 to 11:15, every quarter whole")
	require.Equal(t, want, sums(fmt.Sprintf(totals, "quarter", "job_quarter_totals")))
}

// Rollup rows older than rollup_retention() (8 days) are deleted by rollup_minutes;
// younger ones stay.
func TestRollupsPastRetentionAreDeleted(t *testing.T) {
	b := testkit.Setup(t)
	t0 := testkit.At("2030-01-01T10:00:00Z")
	injectBurst(t, b, t0)
	rollUp(t, b, t0.Add(2*time.Hour))
	minutes := countRowsTB(t, b, `select count(*) from pgrun.job_minutes`)
	require.Positive(t, countRowsTB(t, b, `select count(*) from pgrun.job_quarters`))
	require.Positive(t, countRowsTB(t, b, `select count(*) from pgrun.error_minutes`))
	require.Positive(t, countRowsTB(t, b, `select count(*) from pgrun.error_quarters`))

	// Eight days after 10:45 the minutes before 10:45 are past the retention.
	rollUp(t, b, t0.Add(8*24*time.Hour+45*time.Minute))
	left := countRowsTB(t, b, `select count(*) from pgrun.job_minutes`)
	require.Positive(t, left)
	require.Less(t, left, minutes)
	for _, q := range []string{
		`select count(*) from pgrun.job_minutes where minute < '2030-01-01 10:45Z'`,
		`select count(*) from pgrun.job_quarters where quarter < '2030-01-01 10:45Z'`,
		`select count(*) from pgrun.job_minute_totals where minute < '2030-01-01 10:45Z'`,
		`select count(*) from pgrun.job_quarter_totals where quarter < '2030-01-01 10:45Z'`,
		`select count(*) from pgrun.error_minutes where minute < '2030-01-01 10:45Z'`,
		`select count(*) from pgrun.error_quarters where quarter < '2030-01-01 10:45Z'`,
	} {
		require.Zero(t, countRowsTB(t, b, q), q)
	}
	require.Positive(t, countRowsTB(t, b, `select count(*) from pgrun.job_quarters where quarter >= '2030-01-01 10:45Z'`))

	rollUp(t, b, t0.Add(9*24*time.Hour))
	for _, table := range []string{"job_minutes", "job_quarters", "job_minute_totals", "job_quarter_totals",
		"error_minutes", "error_quarters"} {
		require.Zero(t, countRowsTB(t, b, `select count(*) from pgrun.`+table), table)
	}
}

// A bad input to the rollups' functions, or an error_group filter key out of
// bounds, raises 22023 with a hint and changes nothing.
func TestRollupsRefuseBadInput(t *testing.T) {
	b := testkit.Setup(t)
	t0 := testkit.At("2030-01-01T10:00:00Z")
	injectBurst(t, b, t0)
	rollUp(t, b, t0.Add(time.Hour))
	before := rollupState(t, b)
	long := strings.Repeat("x", 201)
	for _, stmt := range []string{
		`select * from pgrun.job_series('9 days', '1 hour')`,
		`select * from pgrun.job_series('0', '1 hour')`,
		`select * from pgrun.job_series(null, '1 hour')`,
		`select * from pgrun.job_series('1 hour', '0')`,
		`select * from pgrun.job_series('1 hour', '90 seconds')`,
		`select * from pgrun.job_series('1 hour', '2 days')`,
		`select * from pgrun.job_series('8 days', '5 minutes')`, // 2,305 buckets
		`select * from pgrun.job_series('1 hour', '1 minute', 'Bad Queue')`,
		`select * from pgrun.job_series('1 hour', '1 minute', null, '')`,
		`select * from pgrun.job_series('1 hour', '1 minute', null, null, 'host')`,
		`select * from pgrun.error_groups('9 days')`,
		`select * from pgrun.error_groups('-1 hour')`,
		`select * from pgrun.error_groups('1 hour', 0)`,
		`select * from pgrun.error_groups('1 hour', 501)`,
		`select * from pgrun.typical_run_times('9 days')`,
		`select pgrun.hist_quantile('{1, 2}', 1.5)`,
		`select pgrun.hist_quantile('{1, 2}', 'NaN')`,
		`select pgrun.rollup_minutes(null)`,
		`select pgrun.rollup_minutes('infinity')`,
		`select * from pgrun.retry_matching('{"states": ["failed"], "error_group": "` + long + `"}')`,
		`select * from pgrun.retry_matching('{"states": ["failed"], "error_group": ""}')`,
		`select * from pgrun.retry_matching('{"states": ["failed"], "error_group": 421}')`,
	} {
		jobs := testkit.Counts(t, b.Pool)
		_, err := b.Pool.Exec(b.Ctx, stmt)
		require.Error(t, err, stmt)
		var pe *pgconn.PgError
		require.ErrorAs(t, err, &pe, stmt)
		require.Equal(t, "22023", pe.Code, "%s: %v", stmt, err)
		require.NotEmpty(t, pe.Hint, stmt)
		require.Equal(t, jobs, testkit.Counts(t, b.Pool), stmt)
	}
	require.Equal(t, before, rollupState(t, b))

	// At the bounds, taken.
	for _, stmt := range []string{
		`select * from pgrun.job_series('8 days', '1 day')`,
		`select * from pgrun.job_series('8 days', '6 minutes', 'emails', 'send', 'all')`, // 1,921 buckets
		`select * from pgrun.job_series('1 minute', '1 minute')`,
		`select * from pgrun.error_groups('8 days', 500)`,
		`select * from pgrun.error_groups('1 second', 1)`,
		`select * from pgrun.typical_run_times('8 days')`,
		`select pgrun.hist_quantile('{1, 2}', 0), pgrun.hist_quantile('{1, 2}', 1)`,
		`select * from pgrun.retry_matching('{"states": ["failed"], "error_group": "` + long[:200] + `"}', dry_run => true)`,
	} {
		_, err := b.Pool.Exec(b.Ctx, stmt)
		require.NoError(t, err, stmt)
	}
}

// Who may read the rollups: every role reads the counts (job_series,
// typical_run_times), as queue_stats; only an administrator reads the failures by
// group, whose messages are every tenant's; nobody but maintenance and an
// administrator rolls up.
func TestRollupsAreGrantedByRole(t *testing.T) {
	b := testkit.Setup(t)
	injectBurst(t, b, testkit.At("2030-01-01T10:00:00Z"))
	for _, role := range []string{"pgrun_enqueuer", "pgrun_worker", "pgrun_admin"} {
		p := testkit.AsRole(t, b, role)
		testkit.Allowed(t, b, p, `select * from pgrun.job_series('1 hour', '1 minute', group_by => 'all')`)
		testkit.Allowed(t, b, p, `select * from pgrun.typical_run_times()`)
		testkit.Allowed(t, b, p, `select pgrun.error_group('smtp 421 x')`)
		testkit.Allowed(t, b, p, `select pgrun.hist_quantile('{1, 2, 3}', 0.5)`)
		if role == "pgrun_admin" {
			testkit.Allowed(t, b, p, `select * from pgrun.error_groups('1 hour')`)
			testkit.Allowed(t, b, p, `select pgrun.rollup_minutes()`)
			continue
		}
		testkit.Denied(t, b, p, `select * from pgrun.error_groups('1 hour')`)
		testkit.Denied(t, b, p, `select pgrun.rollup_minutes()`)
		testkit.Denied(t, b, p, `select * from pgrun.count_minutes(now() - interval '1 hour', now())`)
	}
}
