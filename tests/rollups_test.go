package tests

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/sqlapi"
	"github.com/pgrun/pgrun/internal/testkit"
)

// The per-minute rollups and what the dashboard reads from them
// (sql/functions/74_rollups.sql, error_group in 05_errors.sql; issue 34: the
// operator's incident). Time is the rollup's now argument and the pinned clock,
// never a sleep: every ending is written with its finished_at.

// ending is a job that ended: its queue, kind and status, when it ended, how long
// it had waited (run_at to start) and run (start to end), and its error message.
type ending struct {
	Queue, Kind, Status string
	At                  time.Time
	Wait, Run           time.Duration
	Message             string
}

// endJobs writes es as jobs that ended so (inserted queued, then set as they ended)
// and returns their ids in the order of es.
func endJobs(t testing.TB, b *testkit.DB, es []ending) []int64 {
	t.Helper()
	type row struct {
		Queue   string  `json:"queue"`
		Kind    string  `json:"kind"`
		Status  string  `json:"status"`
		At      string  `json:"at"`
		Wait    float64 `json:"wait"`
		Run     float64 `json:"run"`
		Message string  `json:"message"`
	}
	rows := make([]row, len(es))
	for i, e := range es {
		rows[i] = row{e.Queue, e.Kind, e.Status, e.At.Format(time.RFC3339Nano), e.Wait.Seconds(), e.Run.Seconds(), e.Message}
	}
	data, err := json.Marshal(rows)
	require.NoError(t, err)
	tag := fmt.Sprintf("%d", time.Now().UnixNano())
	_, err = b.Pool.Exec(b.Ctx, `insert into pgrun.jobs (kind, queue, args)
		select e ->> 'kind', e ->> 'queue', jsonb_build_object('ending', x.n, 'tag', $2::text)
		from jsonb_array_elements($1::jsonb) with ordinality x(e, n)`, string(data), tag)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.Ctx, `update pgrun.jobs j
		set status = (x.e ->> 'status')::pgrun.job_status, attempt = 1,
		    finished_at = (x.e ->> 'at')::timestamptz,
		    started_at = (x.e ->> 'at')::timestamptz - (x.e ->> 'run')::float8 * interval '1 second',
		    run_at = (x.e ->> 'at')::timestamptz - ((x.e ->> 'run')::float8 + (x.e ->> 'wait')::float8) * interval '1 second',
		    error = case when x.e ->> 'message' <> '' then jsonb_build_object('class', 'error', 'message', x.e ->> 'message') end
		from jsonb_array_elements($1::jsonb) with ordinality x(e, n)
		where j.args ->> 'tag' = $2 and (j.args ->> 'ending')::bigint = x.n`, string(data), tag)
	require.NoError(t, err)
	var ids []int64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select array_agg(id order by (args ->> 'ending')::bigint) from pgrun.jobs
		where args ->> 'tag' = $1`, tag).Scan(&ids))
	require.Len(t, ids, len(es))
	return ids
}

// rollUp runs rollup_minutes as of now until the watermark stops moving, and
// returns how many calls moved it.
func rollUp(t testing.TB, b *testkit.DB, now time.Time) int {
	t.Helper()
	for calls := 0; ; calls++ {
		var moved int
		require.NoError(t, b.Pool.QueryRow(b.Ctx, sqlapi.RollupMinutes, now).Scan(&moved))
		if moved == 0 {
			return calls
		}
		require.Less(t, calls, 100, "rollup_minutes kept moving")
	}
}

// minuteRow is a row of pgrun.job_minutes.
type minuteRow struct {
	Minute    time.Time `db:"minute"`
	Queue     string    `db:"queue"`
	Kind      string    `db:"kind"`
	Succeeded int       `db:"succeeded"`
	Failed    int       `db:"failed"`
	Cancelled int       `db:"cancelled"`
	WaitHist  []int32   `db:"wait_hist"`
	RunHist   []int32   `db:"run_hist"`
}

func minuteRows(t testing.TB, b *testkit.DB) []minuteRow {
	t.Helper()
	rows, err := b.Pool.Query(b.Ctx, `select minute, queue, kind, succeeded, failed, cancelled, wait_hist, run_hist
		from pgrun.job_minutes order by minute, queue, kind`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[minuteRow])
	require.NoError(t, err)
	return out
}

// Failures whose messages differ only in ids, numbers and quoted values are one
// group; status codes keep groups apart.
func TestErrorGroupNormalisesMessages(t *testing.T) {
	b := testkit.Setup(t)
	for _, c := range []struct{ in, want string }{
		{"smtp 421 4.7.0 try again later (id 81723)", "smtp 421 N.N.N try again later (id N)"},
		{"smtp 421 4.7.0 try again later (id 5)", "smtp 421 N.N.N try again later (id N)"},
		{"smtp 550 mailbox unavailable", "smtp 550 mailbox unavailable"},
		{"550 mailbox unavailable", "550 mailbox unavailable"},
		{"HTTP 503 from upstream", "HTTP 503 from upstream"},
		{"took 1234 ms after 2 retries", "took N ms after N retries"},
		{"timeout after 30s", "timeout after Ns"},
		{"job 0b5f1c2e-1d3a-4e5f-8a9b-0c1d2e3f4a5b not found", "job <uuid> not found"},
		{"job 0B5F1C2E-1D3A-4E5F-8A9B-0C1D2E3F4A5B not found", "job <uuid> not found"},
		{"bad digest 9f86d081884c7d65 for req_4f3a2b1c9d and 0x1f2e3d4c5b", "bad digest <hex> for req_<hex> and <hex>"},
		{"key 'user:42' missing", "key '…' missing"},
		{`key "user:43" missing`, "key '…' missing"},
		{"can't reach server's host 'db-1'", "can't reach server's host '…'"},
		{"  several\n\tlines   and  spaces ", "several lines and spaces"},
		{"Connection Refused", "Connection Refused"}, // case kept
		{"4210 is no code, nor x421", "N is no code, nor xN"},
		{strings.Repeat("word ", 60), strings.Repeat("word ", 40)},
	} {
		var got string
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select pgrun.error_group($1)`, c.in).Scan(&got), c.in)
		require.Equal(t, c.want, got, "%q", c.in)
	}
	for _, blank := range []*string{nil, ptr(""), ptr("  \n ")} {
		var got *string
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select pgrun.error_group($1)`, blank).Scan(&got))
		require.Nil(t, got)
	}
	var distinct int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(distinct pgrun.error_group(m)) from unnest(array[
		'smtp 421 try later', 'smtp 550 try later', '421 try later', '550 try later']) m`).Scan(&distinct))
	require.Equal(t, 4, distinct, "status codes keep groups apart")
}

func ptr[T any](v T) *T { return &v }

// rollup_minutes counts, per minute, queue and kind, exactly the jobs that ended in
// that minute by status, a job at 10:00:59.999 in 10:00 and one at 10:01:00 in 10:01,
// and the minute still settling is left for later.
func TestRollupMinutesCountsEachMinute(t *testing.T) {
	b := testkit.Setup(t)
	t0 := testkit.At("2030-01-01T10:00:00Z")
	var es []ending
	add := func(n int, queue, kind, status string, at time.Time) {
		for range n {
			es = append(es, ending{Queue: queue, Kind: kind, Status: status, At: at, Wait: time.Second, Run: time.Second,
				Message: map[string]string{"failed": "boom", "cancelled": "cancelled"}[status]})
		}
	}
	add(5, "emails", "send", "succeeded", t0.Add(10*time.Second))
	add(2, "emails", "send", "failed", t0.Add(59*time.Second+999*time.Millisecond))
	add(1, "emails", "send", "cancelled", t0)
	add(3, "emails", "send", "succeeded", t0.Add(time.Minute))
	add(4, "emails", "bounce", "succeeded", t0.Add(time.Minute+30*time.Second))
	add(6, "images", "send", "failed", t0.Add(2*time.Minute+5*time.Second))
	add(7, "images", "send", "succeeded", t0.Add(3*time.Minute+5*time.Second)) // settling at now
	endJobs(t, b, es)
	// A job that is still running, and one skipped, count nowhere.
	endJobs(t, b, []ending{{Queue: "emails", Kind: "send", Status: "skipped", At: t0.Add(20 * time.Second)}})
	testkit.ExecAll(t, b, `select pgrun.enqueue_job('send', queue => 'emails')`)

	rollUp(t, b, t0.Add(3*time.Minute+15*time.Second)) // 10:02 settled at 10:03:10, 10:03 settles at 10:04:10
	got := minuteRows(t, b)
	type key struct {
		Minute             time.Time
		Queue, Kind        string
		Succ, Fail, Cancel int
	}
	var keys []key
	for _, r := range got {
		keys = append(keys, key{r.Minute.UTC(), r.Queue, r.Kind, r.Succeeded, r.Failed, r.Cancelled})
		n := r.Succeeded + r.Failed + r.Cancelled
		require.Equal(t, n, sum(r.WaitHist), "every ended job had started")
		require.Equal(t, n, sum(r.RunHist))
	}
	require.Equal(t, []key{
		{t0, "emails", "send", 5, 2, 1},
		{t0.Add(time.Minute), "emails", "bounce", 4, 0, 0},
		{t0.Add(time.Minute), "emails", "send", 3, 0, 0},
		{t0.Add(2 * time.Minute), "images", "send", 0, 6, 0},
	}, keys)
	var through time.Time
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select through from pgrun.rollup_watermark`).Scan(&through))
	require.Equal(t, t0.Add(3*time.Minute), through.UTC(), "10:03 is still settling")

	rollUp(t, b, t0.Add(4*time.Minute+10*time.Second))
	require.Len(t, minuteRows(t, b), 5, "10:03 once it settled")
}

func sum(h []int32) int {
	n := 0
	for _, v := range h {
		n += int(v)
	}
	return n
}

// The percentiles a merged histogram gives are within the width of the bucket that
// holds the exact percentile (nearest rank), for wait and run times alike, and
// across minutes, queues and kinds merged by job_series and typical_run_times.
func TestHistogramPercentilesAreWithinABucket(t *testing.T) {
	b := testkit.Setup(t)
	t0 := testkit.At("2030-01-01T10:00:00Z")
	var es []ending
	var runs, waits []float64
	for i := range 300 {
		run := time.Duration(3+i*i%5000) * time.Millisecond // 3 ms to 5 s, unevenly
		wait := time.Duration(i%37) * 100 * time.Millisecond
		queue, kind := "q"+fmt.Sprint(i%2), "k"+fmt.Sprint(i%3)
		es = append(es, ending{Queue: queue, Kind: kind, Status: "succeeded",
			At: t0.Add(time.Duration(i) * time.Second), Wait: wait, Run: run})
		runs = append(runs, run.Seconds())
		waits = append(waits, wait.Seconds())
	}
	endJobs(t, b, es)
	rollUp(t, b, t0.Add(time.Hour))
	c := testkit.PinClock(t, b, t0.Add(time.Hour))

	var waitN, runN int
	var wait50, wait95, run50, run95 float64
	c.QueryRow(`select wait_n, wait_p50, wait_p95, run_n, run_p50, run_p95
		from pgrun.job_series('2 hours', '1 day', group_by => 'all')`, nil, &waitN, &wait50, &wait95, &runN, &run50, &run95)
	require.Equal(t, 300, waitN)
	require.Equal(t, 300, runN)
	requireInBucket(t, nearestRank(runs, 0.5), run50, "run p50")
	requireInBucket(t, nearestRank(runs, 0.95), run95, "run p95")
	requireInBucket(t, nearestRank(waits, 0.5), wait50, "wait p50")
	requireInBucket(t, nearestRank(waits, 0.95), wait95, "wait p95")

	var n int
	var p50, p95 float64
	c.QueryRow(`select n, p50, p95 from pgrun.typical_run_times('24 hours') where queue = 'q1' and kind = 'k2'`, nil,
		&n, &p50, &p95)
	var mine []float64
	for i, r := range runs {
		if i%2 == 1 && i%3 == 2 {
			mine = append(mine, r)
		}
	}
	require.Equal(t, len(mine), n)
	requireInBucket(t, nearestRank(mine, 0.5), p50, "typical p50")
	requireInBucket(t, nearestRank(mine, 0.95), p95, "typical p95")

	// The aggregate sums histograms as the readers do.
	var direct float64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select pgrun.hist_quantile(pgrun.hist_add(run_hist), 0.95)
		from pgrun.job_minutes`).Scan(&direct))
	require.InDelta(t, run95, direct, 1e-9)
}

// nearestRank is the q-quantile of xs by nearest rank: the ceil(q n)-th smallest.
func nearestRank(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[max(int(math.Ceil(q*float64(len(s))))-1, 0)]
}

// requireInBucket asserts that got lies in the histogram bucket of exact: [2^(i-1),
// 2^i) ms, the first bucket [0, 2) ms.
func requireInBucket(t *testing.T, exact, got float64, what string) {
	t.Helper()
	ms := exact * 1000
	lo, hi := 0.0, 2.0
	if ms >= 2 {
		i := math.Floor(math.Log2(ms)) + 1
		lo, hi = math.Pow(2, i-1), math.Pow(2, i)
	}
	require.True(t, got*1000 >= lo && got*1000 <= hi, "%s: %.4f s is not in [%.0f, %.0f) ms, the bucket of %.4f s",
		what, got, lo, hi, exact)
}

// job_series adds the minutes not rolled up yet, counted live, to the rolled-up
// ones (minutes and quarter hours): each bucket matches a direct count of pgrun.jobs,
// whatever part is rolled up, and only the bucket still open is partial.
func TestJobSeriesMatchesADirectCount(t *testing.T) {
	b := testkit.Setup(t)
	t0 := testkit.At("2030-01-01T09:40:00Z")
	var es []ending
	statuses := []string{"succeeded", "succeeded", "succeeded", "failed", "cancelled"}
	for i := range 600 { // 09:40 to 10:09:58, one every 3 s
		es = append(es, ending{Queue: []string{"emails", "images"}[i%2], Kind: []string{"send", "resize", "ping"}[i%3],
			Status: statuses[i%5], At: t0.Add(time.Duration(i*3) * time.Second),
			Wait: time.Duration(i%9) * 50 * time.Millisecond, Run: time.Duration(i%13) * 70 * time.Millisecond,
			Message: map[string]string{"failed": "boom"}[statuses[i%5]]})
	}
	endJobs(t, b, es)
	now := testkit.At("2030-01-01T10:09:59Z")
	c := testkit.PinClock(t, b, now)

	type point struct {
		At                       time.Time
		Queue, Kind              *string
		Succ, Fail, Canc, WN, RN int64
		Partial                  bool
	}
	collect := func(rows pgx.Rows, err error) []point {
		t.Helper()
		require.NoError(t, err)
		ps, err := pgx.CollectRows(rows, pgx.RowToStructByPos[point])
		require.NoError(t, err)
		for i := range ps {
			ps[i].At = ps[i].At.UTC()
		}
		return ps
	}
	check := func(stage string) {
		t.Helper()
		for _, q := range []struct {
			since, bucket string
			groupBy       *string
		}{{"1 hour", "1 minute", nil}, {"1 hour", "5 minutes", ptr("queue")}, {"1 hour", "15 minutes", nil},
			{"2 hours", "30 minutes", ptr("all")}, {"45 minutes", "15 minutes", ptr("kind")},
			// All together: the totals by minute and by quarter hour, and the live minutes.
			{"1 hour", "1 minute", ptr("all")}, {"1 hour", "5 minutes", ptr("all")}, {"45 minutes", "15 minutes", ptr("all")}} {
			want := collect(b.Pool.Query(b.Ctx, `
				select date_bin($2::interval, j.finished_at, timestamptz '1970-01-01 00:00Z') as at,
				       case when $3::text in ('kind', 'all') then null else j.queue end as queue,
				       case when $3::text in ('queue', 'all') then null else j.kind end as kind,
				       count(*) filter (where j.status = 'succeeded'), count(*) filter (where j.status = 'failed'),
				       count(*) filter (where j.status = 'cancelled'), count(*), count(*),
				       date_bin($2::interval, j.finished_at, timestamptz '1970-01-01 00:00Z') + $2::interval > $4
				from pgrun.jobs j
				where j.finished_at >= date_bin($2::interval, $4::timestamptz - $1::interval, timestamptz '1970-01-01 00:00Z')
				  and j.finished_at < $4 and j.status in ('succeeded', 'failed', 'cancelled')
				group by 1, 2, 3 order by 1, 2, 3`, q.since, q.bucket, q.groupBy, now))
			require.NotEmpty(t, want)
			got := collect(c.Conn.Query(b.Ctx, `select at, queue, kind, succeeded, failed, cancelled, wait_n, run_n, partial
				from pgrun.job_series($1, $2, null, null, $3)`, q.since, q.bucket, q.groupBy))
			require.Equal(t, want, got, "%s: job_series(%s, %s, group_by %v)", stage, q.since, q.bucket, q.groupBy)
		}
		// A queue and a kind alone, by the default grouping.
		want := collect(b.Pool.Query(b.Ctx, `
			select date_bin('10 minutes', j.finished_at, timestamptz '1970-01-01 00:00Z'), j.queue, j.kind,
			       count(*) filter (where j.status = 'succeeded'), count(*) filter (where j.status = 'failed'),
			       count(*) filter (where j.status = 'cancelled'), count(*), count(*),
			       date_bin('10 minutes', j.finished_at, timestamptz '1970-01-01 00:00Z') + interval '10 minutes' > $1
			from pgrun.jobs j
			where j.queue = 'images' and j.kind = 'ping' and j.finished_at < $1
			  and j.finished_at >= date_bin('10 minutes', $1::timestamptz - interval '1 hour', timestamptz '1970-01-01 00:00Z')
			group by 1, 2, 3 order by 1`, now))
		got := collect(c.Conn.Query(b.Ctx, `select at, queue, kind, succeeded, failed, cancelled, wait_n, run_n, partial
			from pgrun.job_series('1 hour', '10 minutes', 'images', 'ping')`))
		require.Equal(t, want, got, "%s: one queue and kind", stage)
	}
	check("nothing rolled up, all live")
	rollUp(t, b, testkit.At("2030-01-01T10:05:30Z")) // minutes up to 10:05, quarters up to 10:00
	var quarters int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(distinct quarter) from pgrun.job_quarters`).Scan(&quarters))
	require.Equal(t, 2, quarters, "09:30 and 09:45 are whole")
	check("rolled up to 10:05, the rest live")
	rollUp(t, b, testkit.At("2030-01-01T10:30:00Z"))
	check("rolled up to 10:29 (later than the clock)")
}

// error_groups groups the burst: 157 "smtp 421" failures, each with its own
// id, and 17 "550 mailbox unavailable", in the same queue and kind, over 90 minutes,
// partly rolled up and partly live; with their first and last failure and a spark
// that sums to the count.
func TestErrorGroupsGroupABurst(t *testing.T) {
	b := testkit.Setup(t)
	t0 := testkit.At("2030-01-01T09:00:00Z")
	ids421, ids550 := injectBurst(t, b, t0)
	require.Len(t, ids421, 157)
	require.Len(t, ids550, 17)
	rollUp(t, b, t0.Add(50*time.Minute)) // the first 50 minutes rolled up, the rest live
	c := testkit.PinClock(t, b, t0.Add(2*time.Hour))

	type group struct {
		Queue, Kind string
		Group       *string
		Sample      string
		N           int64
		First, Last time.Time
		Spark       []int32
	}
	rows, err := c.Conn.Query(b.Ctx, sqlapi.DashboardErrorGroups, "24 hours", 50)
	require.NoError(t, err)
	gs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[group])
	require.NoError(t, err)
	require.Len(t, gs, 3, "421, 550, and the other queue's failure")
	first := func(ids []int64) (a, z time.Time) {
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select min(finished_at), max(finished_at) from pgrun.jobs where id = any ($1)`, ids).
			Scan(&a, &z))
		return a, z
	}
	for i, want := range []struct {
		group string
		ids   []int64
	}{{"smtp 421 N.N.N try again later (id N)", ids421}, {"550 mailbox unavailable", ids550}} {
		g := gs[i]
		require.Equal(t, "emails", g.Queue)
		require.Equal(t, "send", g.Kind)
		require.Equal(t, want.group, *g.Group)
		require.EqualValues(t, len(want.ids), g.N)
		a, z := first(want.ids)
		require.Equal(t, a.UTC(), g.First.UTC())
		require.Equal(t, z.UTC(), g.Last.UTC())
		require.Len(t, g.Spark, 24)
		require.Equal(t, int(g.N), sum(g.Spark))
		require.Contains(t, g.Sample, strings.Fields(want.group)[0])
	}
	// The burst spans 90 of the last 24 hours: slices 21 and 22 of the 24 (hours
	// 21-23 before the clock), none before.
	require.Zero(t, sum(gs[0].Spark[:21]))

	// max_groups cuts the list, most first; a span that ends before the burst sees none.
	rows, err = c.Conn.Query(b.Ctx, sqlapi.DashboardErrorGroups, "24 hours", 1)
	require.NoError(t, err)
	gs, err = pgx.CollectRows(rows, pgx.RowToStructByPos[group])
	require.NoError(t, err)
	require.Len(t, gs, 1)
	require.EqualValues(t, 157, gs[0].N)
	c.Set(t0.Add(-time.Hour))
	rows, err = c.Conn.Query(b.Ctx, sqlapi.DashboardErrorGroups, "1 hour", 50)
	require.NoError(t, err)
	gs, err = pgx.CollectRows(rows, pgx.RowToStructByPos[group])
	require.NoError(t, err)
	require.Empty(t, gs)
}

// injectBurst writes the incident from t0: over 90 minutes, 157 failures
// "smtp 421 4.7.0 try again later (id <n>)" and 17 "550 mailbox unavailable" of
// queue emails and kind send among 300 successes, and one 421 failure of another
// queue. It returns the ids of the 421 and 550 failures.
func injectBurst(t testing.TB, b *testkit.DB, t0 time.Time) (ids421, ids550 []int64) {
	t.Helper()
	var es []ending
	for i := range 157 {
		es = append(es, ending{Queue: "emails", Kind: "send", Status: "failed", At: t0.Add(time.Duration(i*34) * time.Second),
			Wait: time.Second, Run: 200 * time.Millisecond, Message: fmt.Sprintf("smtp 421 4.7.0 try again later (id %d)", 9000+i*7)})
	}
	for i := range 17 {
		es = append(es, ending{Queue: "emails", Kind: "send", Status: "failed", At: t0.Add(time.Duration(i*317) * time.Second),
			Wait: time.Second, Run: 100 * time.Millisecond, Message: "550 mailbox unavailable"})
	}
	for i := range 300 {
		es = append(es, ending{Queue: "emails", Kind: "send", Status: "succeeded", At: t0.Add(time.Duration(i*18) * time.Second),
			Wait: time.Second, Run: 150 * time.Millisecond})
	}
	es = append(es, ending{Queue: "other", Kind: "send", Status: "failed", At: t0.Add(time.Minute),
		Wait: time.Second, Run: time.Second, Message: "smtp 421 4.7.0 try again later (id 1)"})
	ids := endJobs(t, b, es)
	return ids[:157], ids[157:174]
}

// "Retry this group": the bulk filter's error_group key makes retry_matching retry
// exactly the group's failed jobs and leave the other group's (and the same message
// in another queue) failed.
func TestRetryMatchingRetriesOneErrorGroup(t *testing.T) {
	b := testkit.Setup(t)
	t0 := testkit.At("2030-01-01T09:00:00Z")
	ids421, ids550 := injectBurst(t, b, t0)
	filter := `{"queue": "emails", "kind": "send", "states": ["failed"], "error_group": "smtp 421 N.N.N try again later (id N)"}`
	var matched, changed int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select matched, changed from pgrun.retry_matching($1, dry_run => true)`, filter).
		Scan(&matched, &changed))
	require.Equal(t, 157, matched)
	require.Equal(t, 157, changed)
	require.Equal(t, 157, countRowsTB(t, b, `select count(*) from pgrun.jobs where status = 'failed' and queue = 'emails'
		and pgrun.error_group(error ->> 'message') = 'smtp 421 N.N.N try again later (id N)'`), "a dry run changes nothing")
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select matched, changed from pgrun.retry_matching($1)`, filter).
		Scan(&matched, &changed))
	require.Equal(t, 157, changed)
	states := func(ids []int64) map[string]int {
		rows, err := b.Pool.Query(b.Ctx, `select status::text, count(*)::int from pgrun.jobs where id = any ($1) group by 1`, ids)
		require.NoError(t, err)
		got := map[string]int{}
		for rows.Next() {
			var s string
			var n int
			require.NoError(t, rows.Scan(&s, &n))
			got[s] = n
		}
		require.NoError(t, rows.Err())
		return got
	}
	require.Equal(t, map[string]int{"queued": 157}, states(ids421))
	require.Equal(t, map[string]int{"failed": 17}, states(ids550))
	require.Equal(t, 1, countRowsTB(t, b, `select count(*) from pgrun.jobs where queue = 'other' and status = 'failed'`))
}

// maintain() runs rollup_minutes every round and reports the minutes it rolled up.
func TestMaintainRollsUpClosedMinutes(t *testing.T) {
	b := testkit.Setup(t)
	t0 := testkit.At("2030-01-01T10:00:00Z")
	endJobs(t, b, []ending{{Queue: "emails", Kind: "send", Status: "succeeded", At: t0.Add(5 * time.Second),
		Wait: time.Second, Run: time.Second}})
	c := testkit.PinClock(t, b, t0.Add(90*time.Second))
	var rows int
	c.QueryRow(`select (pgrun.maintain() -> 'steps' -> 'rollup_minutes' ->> 'rows')::int`, nil, &rows)
	require.Positive(t, rows)
	require.Len(t, minuteRows(t, b), 1)
	c.QueryRow(`select (pgrun.maintain() -> 'steps' -> 'rollup_minutes' ->> 'rows')::int`, nil, &rows)
	require.Zero(t, rows, "nothing new has closed")
}
