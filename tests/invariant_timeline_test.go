package tests

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testkit"
)

// tlEntry is one row of pgrun.job_timeline.
type tlEntry struct {
	At      time.Time `db:"at"`
	Event   string    `db:"event"`
	Level   string    `db:"level"`
	Attempt *int32    `db:"attempt"`
	Message *string   `db:"message"`
	Fields  []byte    `db:"fields"`
}

// timelineOf reads job id's timeline.
func timelineOf(t *testing.T, db testkit.Querier, id int64) []tlEntry {
	t.Helper()
	rows, err := db.Query(context.Background(), `select * from pgrun.job_timeline($1)`, id)
	require.NoError(t, err)
	entries, err := pgx.CollectRows(rows, pgx.RowToStructByName[tlEntry])
	require.NoError(t, err)
	return entries
}

// sketch renders a timeline as "event@attempt" ("@-" for an entry naming no attempt).
func sketch(entries []tlEntry) []string {
	out := make([]string, len(entries))
	for i, e := range entries {
		a := "-"
		if e.Attempt != nil {
			a = fmt.Sprint(*e.Attempt)
		}
		out[i] = e.Event + "@" + a
	}
	return out
}

// tlEnqueue enqueues one echo job on queue default and returns its id.
func tlEnqueue(t *testing.T, db testkit.Querier) int64 {
	t.Helper()
	var id int64
	require.NoError(t, db.QueryRow(context.Background(), `select id from pgrun.enqueue_job('echo', '{"n": 1}')`).Scan(&id))
	return id
}

func tlExec(t *testing.T, db testkit.Querier, sql string, args ...any) {
	t.Helper()
	_, err := db.Exec(context.Background(), sql, args...)
	require.NoError(t, err)
}

// A job that succeeded on its first attempt wrote no event, yet its timeline tells
// the whole story from the row's own timestamps.
func TestTimelineOfAJobThatSucceededFirstTime(t *testing.T) {
	b := testkit.Setup(t)
	id := tlEnqueue(t, b.Pool)
	c := testkit.ClaimN(t, b.Pool, "default", "w1", 1, "30 seconds")
	require.Len(t, c, 1)
	tlExec(t, b.Pool, `select pgrun.complete_jobs(array[$1::bigint], array[$2::int])`, c[0].ID, c[0].Attempt)

	require.Zero(t, testkit.Snap(t, b.Pool, id).Events, "the hot path writes no event")
	tl := timelineOf(t, b.Pool, id)
	require.Equal(t, []string{"job.enqueued@0", "job.started@1", "job.succeeded@1"}, sketch(tl))
	var created, started, finished time.Time
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select created_at, started_at, finished_at from pgrun.jobs where id = $1`, id).
		Scan(&created, &started, &finished))
	require.True(t, tl[0].At.Equal(created))
	require.True(t, tl[1].At.Equal(started))
	require.True(t, tl[2].At.Equal(finished))
	require.JSONEq(t, `{"worker": "w1"}`, string(tl[1].Fields))
	for _, e := range tl {
		require.Equal(t, "info", e.Level, e.Event)
	}
}

// tlFailOnceThenSucceed runs a job whose first attempt fails (retryable) and whose
// second succeeds; the second claim happens on a clock past the backoff.
func tlFailOnceThenSucceed(t *testing.T, b *testkit.DB) int64 {
	t.Helper()
	id := tlEnqueue(t, b.Pool)
	c := testkit.ClaimN(t, b.Pool, "default", "w1", 1, "30 seconds")
	require.Len(t, c, 1)
	tlExec(t, b.Pool, `select pgrun.fail_job($1, $2, '{"message": "disk full", "class": "io"}')`, c[0].ID, c[0].Attempt)
	require.Equal(t, "queued", string(testkit.JobStatus(t, b, id)))

	clk := testkit.PinClock(t, b, time.Now().Add(time.Hour)) // past any first backoff
	c = testkit.ClaimN(t, clk.Conn, "default", "w2", 1, "30 seconds")
	require.Len(t, c, 1)
	require.EqualValues(t, 2, c[0].Attempt)
	clk.Exec(`select pgrun.complete_jobs(array[$1::bigint], array[$2::int])`, c[0].ID, c[0].Attempt)
	return id
}

// A failed attempt shows as its stored job.failed under attempt 1; the retry that
// succeeded shows as started and succeeded under attempt 2.
func TestTimelineOfAJobThatFailedOnceThenSucceeded(t *testing.T) {
	b := testkit.Setup(t)
	id := tlFailOnceThenSucceed(t, b)
	tl := timelineOf(t, b.Pool, id)
	require.Equal(t, []string{"job.enqueued@0", "job.failed@1", "job.started@2", "job.succeeded@2"}, sketch(tl))
	require.Equal(t, "disk full", *tl[1].Message)
	require.Equal(t, "warn", tl[1].Level)
	require.JSONEq(t, `{"worker": "w2"}`, string(tl[2].Fields))
}

// A cancelled queued job: the stored job.cancelled is its ending, not repeated.
func TestTimelineOfACancelledQueuedJobShowsTheCancelOnce(t *testing.T) {
	b := testkit.Setup(t)
	id := tlEnqueue(t, b.Pool)
	tlExec(t, b.Pool, `select pgrun.cancel_job($1, 'not needed')`, id)
	tl := timelineOf(t, b.Pool, id)
	require.Equal(t, []string{"job.enqueued@0", "job.cancelled@0"}, sketch(tl))
	require.Equal(t, "not needed", *tl[1].Message)
}

// A permanent failure: fail_job's job.failed is the ending, not repeated.
func TestTimelineOfAPermanentFailureShowsTheFailureOnce(t *testing.T) {
	b := testkit.Setup(t)
	id := tlEnqueue(t, b.Pool)
	c := testkit.ClaimN(t, b.Pool, "default", "w1", 1, "30 seconds")
	tlExec(t, b.Pool, `select pgrun.fail_job($1, $2, '{"message": "bad input"}', false)`, c[0].ID, c[0].Attempt)
	tl := timelineOf(t, b.Pool, id)
	require.Equal(t, []string{"job.enqueued@0", "job.started@1", "job.failed@1"}, sketch(tl))
	require.Equal(t, "error", tl[2].Level)
}

// An ending that wrote no event of its name (a failure by lease expiry writes
// job.lease_expired) still ends the timeline with job.failed, carrying the error.
func TestTimelineEndsWithAFailureTheAuditLogNamedOtherwise(t *testing.T) {
	b := testkit.Setup(t)
	now := time.Now().Add(time.Hour)
	clk := testkit.PinClock(t, b, now)
	id := tlEnqueue(t, clk.Conn)
	c := testkit.ClaimN(t, clk.Conn, "default", "w1", 1, "30 seconds")
	require.Len(t, c, 1)
	clk.Set(now.Add(time.Minute))
	clk.Exec(`select pgrun.maintain(lease_budget => 0)`)
	require.Equal(t, "failed", string(testkit.JobStatus(t, b, id)))

	tl := timelineOf(t, b.Pool, id)
	require.Equal(t, []string{"job.enqueued@0", "job.started@1", "job.lease_expired@1", "job.failed@1"}, sketch(tl))
	last := tl[3]
	require.Equal(t, "error", last.Level)
	require.Contains(t, *last.Message, "lease of worker w1 expired")
	require.JSONEq(t, `{"class": "lease_expired"}`, string(last.Fields))
}

// A redriven job: the earlier ending stays where it happened, and the new ending is
// shown even though an event of another ending (or of the same name, from an earlier
// attempt) is stored.
func TestTimelineOfARedrivenJob(t *testing.T) {
	t.Run("cancelled_then_succeeded", func(t *testing.T) {
		b := testkit.Setup(t)
		id := tlEnqueue(t, b.Pool)
		tlExec(t, b.Pool, `select pgrun.cancel_job($1)`, id)
		tlExec(t, b.Pool, `select pgrun.retry_job($1)`, id)
		c := testkit.ClaimN(t, b.Pool, "default", "w1", 1, "30 seconds")
		require.Len(t, c, 1)
		tlExec(t, b.Pool, `select pgrun.complete_jobs(array[$1::bigint], array[$2::int])`, c[0].ID, c[0].Attempt)
		require.Equal(t,
			[]string{"job.enqueued@0", "job.cancelled@0", "job.retried@0", "job.started@1", "job.succeeded@1"},
			sketch(timelineOf(t, b.Pool, id)))
	})
	t.Run("failed_twice_for_good", func(t *testing.T) {
		b := testkit.Setup(t)
		id := tlEnqueue(t, b.Pool)
		for attempt := 1; attempt <= 2; attempt++ {
			c := testkit.ClaimN(t, b.Pool, "default", "w1", 1, "30 seconds")
			require.Len(t, c, 1)
			tlExec(t, b.Pool, `select pgrun.fail_job($1, $2, '{"message": "no"}', false)`, c[0].ID, c[0].Attempt)
			if attempt == 1 {
				tlExec(t, b.Pool, `select pgrun.retry_job($1)`, id)
			}
		}
		require.Equal(t,
			[]string{"job.enqueued@0", "job.failed@1", "job.retried@1", "job.started@2", "job.failed@2"},
			sketch(timelineOf(t, b.Pool, id)))
	})
}

// Handler events sit between start and ending; an event naming no attempt has NULL.
func TestTimelineKeepsHandlerEventsInOrder(t *testing.T) {
	b := testkit.Setup(t)
	id := tlEnqueue(t, b.Pool)
	c := testkit.ClaimN(t, b.Pool, "default", "w1", 1, "30 seconds")
	tlExec(t, b.Pool, `select pgrun.emit($1, 'batch.done', '{"rows": 10}')`, id)
	tlExec(t, b.Pool, `select pgrun.emit($1, 'batch.odd', '{"attempt": "first"}')`, id)
	tlExec(t, b.Pool, `select pgrun.complete_jobs(array[$1::bigint], array[$2::int])`, c[0].ID, c[0].Attempt)
	require.Equal(t,
		[]string{"job.enqueued@0", "job.started@1", "batch.done@-", "batch.odd@-", "job.succeeded@1"},
		sketch(timelineOf(t, b.Pool, id)))
}

func TestTimelineOfAnUnknownJobRaisesP0002(t *testing.T) {
	b := testkit.Setup(t)
	_, err := b.Pool.Exec(b.Ctx, `select * from pgrun.job_timeline(424242)`)
	pe := testkit.PgError(t, err, "job_timeline of an unknown id")
	require.Equal(t, "P0002", pe.Code)
	require.Contains(t, pe.Message, "424242")
	require.NotEmpty(t, pe.Hint)
}

// `runner job get ID` prints the timeline with attempt numbers.
func TestTimelineIsWhatRunnerJobPrints(t *testing.T) {
	b := testkit.Setup(t)
	id := tlFailOnceThenSucceed(t, b)
	out, err := exec.Command(runnerBin, "job", "get", fmt.Sprint(id), "--database-url", b.URL).CombinedOutput()
	require.NoError(t, err, string(out))
	_, tail, ok := strings.Cut(string(out), "\ntimeline (4)\n")
	require.True(t, ok, "no timeline section in:\n%s", out)
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(tail), "\n")[1:] { // after the header
		f := strings.Fields(line) // date, time, attempt, level, event, ...
		require.GreaterOrEqual(t, len(f), 5, line)
		got = append(got, f[4]+"@"+f[2])
	}
	require.Equal(t, []string{"job.enqueued@0", "job.failed@1", "job.started@2", "job.succeeded@2"}, got)
}

// emit takes "warning" for "warn" and stores warn (the table's check allows debug,
// info, warn and error); other level names are still refused.
func TestEmitStoresWarningAsWarn(t *testing.T) {
	b := testkit.Setup(t)
	id := tlEnqueue(t, b.Pool)
	levelOf := func(given string) string {
		t.Helper()
		var ev int64
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select pgrun.emit($1, 'disk.low', level => $2)`, id, given).Scan(&ev))
		var level string
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select level from pgrun.job_events where id = $1`, ev).Scan(&level))
		return level
	}
	require.Equal(t, "warn", levelOf("warning"))
	require.Equal(t, "warn", levelOf("warn"))
	require.Equal(t, "debug", levelOf("debug"))

	before := testkit.Snap(t, b.Pool, id)
	for _, bad := range []string{"Warning", "warnings", "fatal"} {
		_, err := b.Pool.Exec(b.Ctx, `select pgrun.emit($1, 'disk.low', level => $2)`, id, bad)
		pe := testkit.PgError(t, err, "level "+bad)
		require.Equal(t, "22023", pe.Code)
		require.Contains(t, pe.Message, bad)
		require.Contains(t, pe.Hint, "warning")
	}
	require.Equal(t, before, testkit.Snap(t, b.Pool, id))
}

// emit refuses fields over max_json_bytes before writing anything.
func TestEmitRefusesFieldsOverTheSizeLimit(t *testing.T) {
	b := testkit.Setup(t)
	id := tlEnqueue(t, b.Pool)
	c := testkit.ClaimN(t, b.Pool, "default", "w1", 1, "30 seconds")
	require.Len(t, c, 1)
	before := testkit.Snap(t, b.Pool, id)
	_, err := b.Pool.Exec(b.Ctx,
		`select pgrun.emit($1, 'blob', jsonb_build_object('blob', repeat('x', pgrun.max_json_bytes() + 1)))`, id)
	pe := testkit.PgError(t, err, "oversized fields")
	require.Equal(t, "22023", pe.Code)
	require.Contains(t, pe.Message, "event fields")
	require.Contains(t, pe.Message, "over the limit")
	require.NotEmpty(t, pe.Hint)
	require.Equal(t, before, testkit.Snap(t, b.Pool, id), "nothing written, not even the sign of life")

	// Just under the limit is fine.
	tlExec(t, b.Pool, `select pgrun.emit($1, 'blob', jsonb_build_object('blob', repeat('x', 1000)))`, id)
}

// emit fields _progress_current and _progress_total set the job's progress as
// set_progress does, together with the sign of life.
func TestEmitReportsProgress(t *testing.T) {
	b := testkit.Setup(t)
	id := tlEnqueue(t, b.Pool)
	c := testkit.ClaimN(t, b.Pool, "default", "w1", 1, "30 seconds")
	require.Len(t, c, 1)
	progress := func() (int64, *int64, bool) {
		t.Helper()
		var cur int64
		var total *int64
		var beat bool
		require.NoError(t, b.Pool.QueryRow(b.Ctx,
			`select progress_current, progress_total, heartbeat_at is not null from pgrun.jobs where id = $1`, id).
			Scan(&cur, &total, &beat))
		return cur, total, beat
	}
	cur, total, beat := progress()
	require.Zero(t, cur)
	require.Nil(t, total)
	require.False(t, beat)

	tlExec(t, b.Pool, `select pgrun.emit($1, 'batch.done', '{"_progress_current": 3, "_progress_total": 10, "rows": 7}')`, id)
	cur, total, beat = progress()
	require.EqualValues(t, 3, cur)
	require.EqualValues(t, 10, *total)
	require.True(t, beat)

	tlExec(t, b.Pool, `select pgrun.emit($1, 'batch.done', '{"_progress_current": 5}')`, id) // total kept
	cur, total, _ = progress()
	require.EqualValues(t, 5, cur)
	require.EqualValues(t, 10, *total)

	tlExec(t, b.Pool, `select pgrun.emit($1, 'batch.more', '{"_progress_total": 20}')`, id) // current kept
	cur, total, _ = progress()
	require.EqualValues(t, 5, cur)
	require.EqualValues(t, 20, *total)

	tlExec(t, b.Pool, `select pgrun.emit($1, 'batch.done', '{"_progress_current": 9000000000000000000, "_progress_total": 9.2e18}')`, id)
	cur, total, _ = progress()
	require.EqualValues(t, int64(9000000000000000000), cur)
	require.EqualValues(t, int64(9200000000000000000), *total)

	// The keys stay in the stored fields.
	var fields string
	require.NoError(t, b.Pool.QueryRow(b.Ctx,
		`select fields::text from pgrun.job_events where job_id = $1 and event = 'batch.more'`, id).Scan(&fields))
	require.JSONEq(t, `{"_progress_total": 20}`, fields)

	// Like the sign of life, progress applies to a running job only.
	q := tlEnqueue(t, b.Pool)
	tlExec(t, b.Pool, `select pgrun.emit($1, 'batch.done', '{"_progress_current": 3, "_progress_total": 10}')`, q)
	var qcur int64
	var qtotal *int64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select progress_current, progress_total from pgrun.jobs where id = $1`, q).Scan(&qcur, &qtotal))
	require.Zero(t, qcur)
	require.Nil(t, qtotal)
}

// A progress field that is not a non-negative integer is refused with 22023 naming
// the field, before anything is written.
func TestEmitRejectsBadProgressNamingTheField(t *testing.T) {
	b := testkit.Setup(t)
	id := tlEnqueue(t, b.Pool)
	c := testkit.ClaimN(t, b.Pool, "default", "w1", 1, "30 seconds")
	require.Len(t, c, 1)
	before := testkit.Snap(t, b.Pool, id)
	for _, key := range []string{"_progress_current", "_progress_total"} {
		for _, bad := range []string{`-1`, `1.5`, `"3"`, `null`, `true`, `[1]`, `1e30`} {
			fields := fmt.Sprintf(`{"%s": %s}`, key, bad)
			_, err := b.Pool.Exec(b.Ctx, `select pgrun.emit($1, 'batch.done', $2::jsonb)`, id, fields)
			pe := testkit.PgError(t, err, fields)
			require.Equal(t, "22023", pe.Code, fields)
			require.Contains(t, pe.Message, key, fields)
			require.NotEmpty(t, pe.Hint, fields)
		}
	}
	require.Equal(t, before, testkit.Snap(t, b.Pool, id))
}
