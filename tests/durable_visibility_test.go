package tests

import (
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/ui"
)

// Durable execution seen everywhere: the calls a handler recorded and what a parked
// job waits for, in pgrun.job_timeline and pgrun.job_parked, on the dashboard's job
// page (HTML and JSON) and in `runner job get`. The jobs here are driven through the
// SQL functions of 35_durable.sql as the engine's owner, one call at a time, so each
// state is exact when it is read.

// dvReceipt is the charge step's result: 18 bytes of JSON text as stored.
const dvReceipt = `{"receipt": "r-1"}`

// dvJob is a job of queue dv that recorded calls under its first claim.
type dvJob struct {
	ID, Child int64
}

// dvRecorded enqueues a job on queue dv, claims it and records, as its handler
// would: step charge (dvReceipt), step empty (no result) and spawn child (a job of
// queue dv.child, so that claims of dv never take it).
func dvRecorded(t *testing.T, b *testkit.DB) dvJob {
	t.Helper()
	var j dvJob
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id from pgrun.enqueue_job('order', '{}', queue => 'dv')`).Scan(&j.ID))
	dvClaim(t, b.Pool, j.ID, 1)
	require.Equal(t, "done", dvText(t, b.Pool, `select pgrun.step_put($1, 'charge', 0, $2::jsonb)`, j.ID, dvReceipt))
	require.Equal(t, "done", dvText(t, b.Pool, `select pgrun.step_put($1, 'empty', 1, null)`, j.ID))
	var status string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select status, child from pgrun.spawn_job($1, 'child', 2, '{"kind": "child", "queue": "dv.child"}')`,
		j.ID).Scan(&status, &j.Child))
	require.Equal(t, "done", status)
	return j
}

// dvClaim claims the next job of queue dv on q and requires it to be id under attempt.
func dvClaim(t *testing.T, q testkit.Querier, id int64, attempt int) {
	t.Helper()
	c := testkit.ClaimN(t, q, "dv", "w1", 1, "30 seconds")
	require.Len(t, c, 1)
	require.Equal(t, id, c[0].ID)
	require.EqualValues(t, attempt, c[0].Attempt)
}

// dvText runs sql, which returns one text value, on q.
func dvText(t *testing.T, q testkit.Querier, sql string, args ...any) string {
	t.Helper()
	var s string
	require.NoError(t, q.QueryRow(t.Context(), sql, args...).Scan(&s), sql)
	return s
}

// dvAwaitEvent makes job id, as step name at position pos, await event for at most
// timeout; returns the call's status.
func dvAwaitEvent(t *testing.T, q testkit.Querier, id int64, name string, pos int, event, timeout string) string {
	t.Helper()
	return dvText(t, q, `select status from pgrun.await_event($1, $2, $3, $4, $5::interval)`, id, name, pos, event, timeout)
}

// dvParked is a row of pgrun.job_parked.
type dvParked struct {
	WaitingFor string     `db:"waiting_for"`
	Until      time.Time  `db:"until"`
	Step       string     `db:"step"`
	Event      *string    `db:"event"`
	AwaitedJob *int64     `db:"awaited_job"`
	TimedOut   bool       `db:"timed_out"`
	Since      *time.Time `db:"since"`
}

// parkedOf reads pgrun.job_parked(id): nil when the job is not parked.
func parkedOf(t *testing.T, q testkit.Querier, id int64) *dvParked {
	t.Helper()
	rows, err := q.Query(t.Context(), `select * from pgrun.job_parked($1)`, id)
	require.NoError(t, err)
	var got []dvParked
	for rows.Next() {
		var p dvParked
		require.NoError(t, rows.Scan(&p.WaitingFor, &p.Until, &p.Step, &p.Event, &p.AwaitedJob, &p.TimedOut, &p.Since))
		got = append(got, p)
	}
	require.NoError(t, rows.Err())
	require.LessOrEqual(t, len(got), 1, "one wait at a time")
	if len(got) == 0 {
		return nil
	}
	return &got[0]
}

// entryNamed returns the one entry of tl named event.
func entryNamed(t *testing.T, tl []tlEntry, event string) tlEntry {
	t.Helper()
	var found []tlEntry
	for _, e := range tl {
		if e.Event == event {
			found = append(found, e)
		}
	}
	require.Len(t, found, 1, "entries %s in %v", event, sketch(tl))
	return found[0]
}

// The timeline lists every call the handler recorded, in time order with the rest,
// by name, kind, position, attempt and the size of its result (never the result);
// while the job is parked it ends with what the job waits for and until when.
func TestDurableTimelineListsRecordedCallsAndTheParkedWait(t *testing.T) {
	b := testkit.Setup(t)
	j := dvRecorded(t, b)
	before := time.Now()
	require.Equal(t, "parked", dvAwaitEvent(t, b.Pool, j.ID, "pay", 3, "payment:42", "1 hour"))
	after := time.Now()

	p := parkedOf(t, b.Pool, j.ID)
	require.NotNil(t, p, "awaiting an event")
	require.Equal(t, "event", p.WaitingFor)
	require.Equal(t, "payment:42", *p.Event)
	require.Nil(t, p.AwaitedJob)
	require.Equal(t, "pay", p.Step)
	require.False(t, p.TimedOut)
	require.WithinRange(t, p.Until, before.Add(time.Hour-time.Second), after.Add(time.Hour+time.Second))

	tl := timelineOf(t, b.Pool, j.ID)
	require.Equal(t, []string{"job.enqueued@0", "job.started@1", "step.recorded@1", "step.recorded@1", "job.spawned@1",
		"job.awaiting@1", "job.parked@1"}, sketch(tl))
	require.JSONEq(t, `{"step": "charge", "kind": "step", "position": 0, "result_bytes": 18}`, string(tl[2].Fields))
	require.JSONEq(t, `{"step": "empty", "kind": "step", "position": 1, "result_bytes": null}`, string(tl[3].Fields))
	require.JSONEq(t, fmt.Sprintf(`{"step": "child", "kind": "spawn", "position": 2, "job": %d, "result_bytes": %d}`,
		j.Child, len(fmt.Sprintf(`{"id": %d}`, j.Child))), string(tl[4].Fields))
	for _, e := range tl {
		require.NotContains(t, string(e.Fields), "r-1", "%s carries the size of a result, not the result", e.Event)
	}
	parked := tl[6]
	require.Equal(t, "info", parked.Level)
	require.Contains(t, *parked.Message, "waiting for event payment:42 until ")
	var pf struct {
		WaitingFor string    `json:"waiting_for"`
		Event      string    `json:"event"`
		Step       string    `json:"step"`
		Until      time.Time `json:"until"`
		TimedOut   *bool     `json:"timed_out"`
	}
	require.NoError(t, json.Unmarshal(parked.Fields, &pf))
	require.Equal(t, "event", pf.WaitingFor)
	require.Equal(t, "payment:42", pf.Event)
	require.Equal(t, "pay", pf.Step)
	require.True(t, pf.Until.Equal(p.Until), "the timeline's until is job_parked's")
	require.NotNil(t, pf.TimedOut)
	require.False(t, *pf.TimedOut)

	// The event comes; the resumed handler takes it and sleeps.
	require.Equal(t, "true", dvText(t, b.Pool, `select pgrun.emit_event('payment:42', '{"amount": 5}')::text`))
	require.Nil(t, parkedOf(t, b.Pool, j.ID), "queued again by the emit: no longer parked")
	dvClaim(t, b.Pool, j.ID, 2)
	require.Equal(t, "done", dvAwaitEvent(t, b.Pool, j.ID, "pay", 3, "payment:42", "1 hour"))
	require.Nil(t, parkedOf(t, b.Pool, j.ID), "running")
	wake := time.Now().Add(10 * time.Minute).Truncate(time.Microsecond)
	require.Equal(t, "parked", dvText(t, b.Pool, `select pgrun.sleep_job($1, 'nap', 4, $2)`, j.ID, wake))

	p = parkedOf(t, b.Pool, j.ID)
	require.NotNil(t, p, "sleeping")
	require.Equal(t, "sleep", p.WaitingFor)
	require.True(t, p.Until.Equal(wake), "until %s, want %s", p.Until, wake)
	require.Equal(t, "nap", p.Step)
	require.Nil(t, p.Event)

	tl = timelineOf(t, b.Pool, j.ID)
	require.Equal(t, []string{"job.enqueued@0", "step.recorded@1", "step.recorded@1", "job.spawned@1", "job.awaiting@1",
		"job.started@2", "event.received@2", "sleep.recorded@2", "job.sleeping@2", "job.parked@2"}, sketch(tl))
	require.JSONEq(t, fmt.Sprintf(`{"step": "pay", "kind": "event", "position": 3, "event": "payment:42", "result_bytes": %d}`,
		len(`{"event": "payment:42", "payload": {"amount": 5}}`)), string(entryNamed(t, tl, "event.received").Fields))
	var sleep struct {
		Step        string    `json:"step"`
		Kind        string    `json:"kind"`
		Position    int       `json:"position"`
		Until       time.Time `json:"until"`
		ResultBytes int       `json:"result_bytes"`
	}
	require.NoError(t, json.Unmarshal(entryNamed(t, tl, "sleep.recorded").Fields, &sleep))
	require.Equal(t, "nap", sleep.Step)
	require.Equal(t, "sleep", sleep.Kind)
	require.Equal(t, 4, sleep.Position)
	require.True(t, sleep.Until.Equal(wake))
	require.Positive(t, sleep.ResultBytes)
	require.Contains(t, *tl[len(tl)-1].Message, "sleeping until ")
	for i := 1; i < len(tl); i++ {
		require.False(t, tl[i].At.Before(tl[i-1].At), "time order: %s before %s", tl[i].Event, tl[i-1].Event)
	}

	// pgrun.job_parked is a reader's call, tenant-checked like job_timeline.
	_, err := b.Pool.Exec(b.Ctx, `select * from pgrun.job_parked(424242)`)
	require.Equal(t, "P0002", testkit.PgError(t, err, "job_parked of an unknown id").Code)
	testkit.Allowed(t, b, testkit.AsRole(t, b, "pgrun_enqueuer"), `select * from pgrun.job_parked($1)`, j.ID)
	testkit.Allowed(t, b, testkit.AsRole(t, b, "pgrun_admin"), `select * from pgrun.job_parked($1)`, j.ID)
}

// In the tenant mode, pgrun.job_parked and the timeline's step entries are the
// job's tenant's: another tenant's enqueuer finds no such job.
func TestDurableParkedWaitIsTheTenantsOwn(t *testing.T) {
	k := newTenantKit(t)
	var id int64
	require.NoError(t, k.acme.QueryRow(k.Ctx, `select id from pgrun.enqueue_job('order', '{}', queue => 'dv')`).Scan(&id))
	dvClaim(t, k.Pool, id, 1)
	require.Equal(t, "done", dvText(t, k.Pool, `select pgrun.step_put($1, 'charge', 0, $2::jsonb)`, id, dvReceipt))
	require.Equal(t, "parked", dvAwaitEvent(t, k.Pool, id, "pay", 1, "payment:42", "1 hour"))

	notFound(t, k.DB, k.globex, `select * from pgrun.job_parked($1)`, id)
	notFound(t, k.DB, k.globex, `select * from pgrun.job_timeline($1)`, id)
	p := parkedOf(t, k.acme, id)
	require.NotNil(t, p)
	require.Equal(t, "payment:42", *p.Event)
	require.Equal(t, []string{"job.enqueued@0", "job.started@1", "step.recorded@1", "job.awaiting@1", "job.parked@1"},
		sketch(timelineOf(t, k.acme, id)))
}

// A wait that ran out shows as timed out (level warn) while the job is queued to
// resume; the resumed await records the timeout as event.timed_out.
func TestDurableTimelineShowsATimedOutAwait(t *testing.T) {
	b := testkit.Setup(t)
	j := dvRecorded(t, b)
	require.Equal(t, "parked", dvAwaitEvent(t, b.Pool, j.ID, "pay", 3, "payment:never", "1 minute"))
	clk := testkit.PinClock(t, b, time.Now().Add(2*time.Minute))
	var n int
	clk.QueryRow(`select pgrun.wake_waits()`, nil, &n)
	require.Equal(t, 1, n)

	p := parkedOf(t, b.Pool, j.ID)
	require.NotNil(t, p, "queued to resume, its wait timed out")
	require.True(t, p.TimedOut)
	require.Equal(t, "payment:never", *p.Event)
	last := timelineOf(t, b.Pool, j.ID)
	parked := last[len(last)-1]
	require.Equal(t, "job.parked", parked.Event)
	require.Equal(t, "warn", parked.Level)
	require.Contains(t, *parked.Message, "waiting for event payment:never until ")
	require.Contains(t, *parked.Message, "timed out")

	dvClaim(t, clk.Conn, j.ID, 2)
	require.Equal(t, "timeout", dvAwaitEvent(t, clk.Conn, j.ID, "pay", 3, "payment:never", "1 minute"))
	require.Nil(t, parkedOf(t, b.Pool, j.ID))
	tl := timelineOf(t, b.Pool, j.ID)
	require.Equal(t, "event.timed_out@2", sketch(tl)[len(tl)-1])
	timedOut := tl[len(tl)-1]
	require.Equal(t, "warn", timedOut.Level)
	require.JSONEq(t, `{"step": "pay", "kind": "event", "position": 3, "event": "payment:never", "timed_out": true,
		"result_bytes": 43}`, string(timedOut.Fields))
}

// dvPage is the job page's JSON: the sections these tests read.
type dvPage struct {
	Data struct {
		Steps []struct {
			At          time.Time `json:"at"`
			Name        string    `json:"name"`
			Kind        string    `json:"kind"`
			Position    int       `json:"position"`
			Attempt     *int      `json:"attempt"`
			ResultBytes *int64    `json:"result_bytes"`
			Event       string    `json:"event"`
			Job         *int64    `json:"job"`
			Status      string    `json:"status"`
		} `json:"steps"`
		Parked *struct {
			WaitingFor string    `json:"waiting_for"`
			Event      string    `json:"event"`
			Job        *int64    `json:"job"`
			Until      time.Time `json:"until"`
			Step       string    `json:"step"`
			TimedOut   bool      `json:"timed_out"`
		} `json:"parked"`
		Timeline []json.RawMessage `json:"timeline"`
	} `json:"data"`
	Problems []string `json:"problems"`
}

// jobPageJSON reads /jobs/id?format=json from the dashboard at base.
func jobPageJSON(t *testing.T, base string, id int64) (dvPage, string) {
	t.Helper()
	resp, body := get(t, fmt.Sprintf("%s/jobs/%d?format=json", base, id))
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	var p dvPage
	require.NoError(t, json.Unmarshal([]byte(body), &p), body)
	require.Empty(t, p.Problems)
	return p, body
}

// The job page lists the recorded calls in a Steps section (name, kind, position,
// when, attempt, result size) and says what a parked job waits for, in HTML
// (escaped) and in JSON.
func TestDurableJobPageShowsStepsAndTheParkedLine(t *testing.T) {
	b := testkit.Setup(t)
	j := dvRecorded(t, b)
	require.Equal(t, "done", dvText(t, b.Pool, `select pgrun.step_put($1, '<b>bold</b>', 3, '[1, 2]')`, j.ID))
	require.Equal(t, "parked", dvText(t, b.Pool, `select status from pgrun.await_job($1, 'wait', 4, $2, '1 hour')`, j.ID, j.Child))
	p := parkedOf(t, b.Pool, j.ID)
	require.NotNil(t, p)
	base := serveUI(t, b.Pool, ui.Options{})

	page, _ := jobPageJSON(t, base, j.ID)
	type row struct {
		Name, Kind      string
		Position, Bytes int
	}
	var got []row
	for _, s := range page.Data.Steps {
		require.NotNil(t, s.Attempt, s.Name)
		require.Equal(t, 1, *s.Attempt, s.Name)
		require.False(t, s.At.IsZero(), s.Name)
		bytes := -1
		if s.ResultBytes != nil {
			bytes = int(*s.ResultBytes)
		}
		got = append(got, row{s.Name, s.Kind, s.Position, bytes})
	}
	require.Equal(t, []row{{"charge", "step", 0, 18}, {"empty", "step", 1, -1},
		{"child", "spawn", 2, len(fmt.Sprintf(`{"id": %d}`, j.Child))}, {"<b>bold</b>", "step", 3, len(`[1, 2]`)}}, got)
	require.Equal(t, j.Child, *page.Data.Steps[2].Job)
	parked := page.Data.Parked
	require.NotNil(t, parked, "the page says the job is parked")
	require.Equal(t, "job", parked.WaitingFor)
	require.Equal(t, j.Child, *parked.Job)
	require.Equal(t, "wait", parked.Step)
	require.False(t, parked.TimedOut)
	require.True(t, parked.Until.Equal(p.Until), "until %s, job_parked says %s", parked.Until, p.Until)
	require.Len(t, page.Data.Timeline, 8, "the timeline keeps every entry")

	resp, body := get(t, fmt.Sprintf("%s/jobs/%d", base, j.ID))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, "<h2>Steps")
	steps := regexp.MustCompile(`(?s)<table class="list timeline steps">.*?</table>`).FindString(body)
	require.NotEmpty(t, steps, "a steps table")
	cells := regexp.MustCompile(`<td[^>]*>(.*?)</td>`)
	var charge []string
	for _, tr := range regexp.MustCompile(`(?s)<tr[^>]*>(.*?)</tr>`).FindAllStringSubmatch(steps, -1) {
		if strings.Contains(tr[1], "<td>charge</td>") {
			for _, c := range cells.FindAllStringSubmatch(tr[1], -1) {
				charge = append(charge, c[1])
			}
		}
	}
	require.Len(t, charge, 7, "position, name, kind, when, attempt, result, detail")
	require.Equal(t, []string{"0", "charge", "step"}, charge[:3])
	require.Regexp(t, `^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$`, charge[3])
	require.Equal(t, []string{"1", "18 B"}, charge[4:6])
	require.Contains(t, steps, html.EscapeString("<b>bold</b>"), "a step name is escaped")
	require.NotContains(t, body, "<b>bold</b>")
	require.Contains(t, body, fmt.Sprintf(`waiting for job <a href="/jobs/%d">%d</a> until %s`, j.Child, j.Child,
		p.Until.UTC().Format("2006-01-02 15:04:05 UTC")))
	require.Contains(t, body, "step wait")
}

// The parked line names an awaited event (escaped) or a sleep; a job without
// durable calls has an empty steps list, no Steps section and no parked line.
func TestDurableJobPageParkedLineForEventsAndSleeps(t *testing.T) {
	b := testkit.Setup(t)
	base := serveUI(t, b.Pool, ui.Options{})

	const event = `payment:<42>&"x"`
	j := dvRecorded(t, b)
	require.Equal(t, "parked", dvAwaitEvent(t, b.Pool, j.ID, "pay", 3, event, "1 hour"))
	page, _ := jobPageJSON(t, base, j.ID)
	require.NotNil(t, page.Data.Parked)
	require.Equal(t, "event", page.Data.Parked.WaitingFor)
	require.Equal(t, event, page.Data.Parked.Event)
	_, body := get(t, fmt.Sprintf("%s/jobs/%d", base, j.ID))
	require.Contains(t, body, "waiting for event <code>"+html.EscapeString(event)+"</code> until ")
	require.NotContains(t, body, event)

	sleeper := dvRecorded(t, b)
	wake := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	require.Equal(t, "parked", dvText(t, b.Pool, `select pgrun.sleep_job($1, 'nap', 3, $2)`, sleeper.ID, wake))
	page, _ = jobPageJSON(t, base, sleeper.ID)
	require.NotNil(t, page.Data.Parked)
	require.Equal(t, "sleep", page.Data.Parked.WaitingFor)
	require.True(t, page.Data.Parked.Until.Equal(wake))
	require.Len(t, page.Data.Steps, 4)
	require.Equal(t, "sleep", page.Data.Steps[3].Kind)
	_, body = get(t, fmt.Sprintf("%s/jobs/%d", base, sleeper.ID))
	require.Contains(t, body, "sleeping until "+wake.UTC().Format("2006-01-02 15:04:05 UTC"))

	var plain int64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id from pgrun.enqueue_job('noop', '{}', queue => 'dv.plain')`).Scan(&plain))
	page, raw := jobPageJSON(t, base, plain)
	require.Nil(t, page.Data.Parked)
	require.NotContains(t, raw, `"parked"`)
	require.Contains(t, raw, `"steps": []`, "an empty list, as the other sections")
	_, body = get(t, fmt.Sprintf("%s/jobs/%d", base, plain))
	require.NotContains(t, body, "<h2>Steps")
	require.NotContains(t, body, `class="parked`)
}

// A dashboard role granted exactly what docs/ui.md lists for a read-only dashboard
// sees the steps and the parked line: the page reads them from job_timeline alone.
func TestDurableJobPageNeedsNoGrantBeyondTheReadOnlyRole(t *testing.T) {
	b := testkit.Setup(t)
	name, reader := testkit.NewRole(t, b, "")
	for _, stmt := range []string{
		`grant usage on schema pgrun to %q`,
		`grant select on pgrun.jobs, pgrun.job_events, pgrun.runs, pgrun.workflows, pgrun.queues, pgrun.schedules,
		   pgrun.workers, pgrun.worker_control, pgrun.hw_metrics, pgrun.outbox, pgrun.queue_stats, pgrun.worker_status, pgrun.settings to %q`,
		`grant execute on function pgrun.queue_counts(), pgrun.stats_exact_limit(), pgrun.worker_alive(pgrun.workers, timestamptz),
		   pgrun.worker_silence(interval), pgrun.clock(), pgrun.job_timeline(bigint), pgrun.claim_token(bigint) to %q`,
	} {
		_, err := b.Pool.Exec(b.Ctx, fmt.Sprintf(stmt, name))
		require.NoError(t, err)
	}
	j := dvRecorded(t, b)
	require.Equal(t, "parked", dvAwaitEvent(t, b.Pool, j.ID, "pay", 3, "payment:42", "1 hour"))
	testkit.Denied(t, b, reader, `select * from pgrun.job_steps`)

	page, _ := jobPageJSON(t, serveUI(t, reader, ui.Options{ReadOnly: true}), j.ID) // no problems
	require.Len(t, page.Data.Steps, 3)
	require.Equal(t, "charge", page.Data.Steps[0].Name)
	require.NotNil(t, page.Data.Parked)
	require.Equal(t, "payment:42", page.Data.Parked.Event)
}

// `runner job get` prints what a parked job waits for and a steps section (position,
// name, kind, when, attempt, result size) before the timeline.
func TestDurableRunnerJobGetShowsStepsAndTheParkedLine(t *testing.T) {
	b := testkit.Setup(t)
	j := dvRecorded(t, b)
	require.Equal(t, "parked", dvAwaitEvent(t, b.Pool, j.ID, "pay", 3, "payment:42", "1 hour"))
	out := runRunner(t, b, []string{"job", "get", fmt.Sprint(j.ID)})

	require.Regexp(t, `(?m)^parked\s+waiting for event payment:42 until \S+ \(step pay\)$`, out)
	_, tail, ok := strings.Cut(out, "\nsteps (3)\n")
	require.True(t, ok, "no steps section in:\n%s", out)
	section, _, ok := strings.Cut(tail, "\n\ntimeline (")
	require.True(t, ok, "the timeline follows the steps in:\n%s", out)
	lines := strings.Split(section, "\n")
	require.Equal(t, []string{"position", "name", "kind", "at", "attempt", "result", "detail"}, strings.Fields(lines[0]))
	var got [][]string
	for _, line := range lines[1:] {
		f := strings.Fields(line) // position, name, kind, date, time, attempt, result (n B or -), detail
		require.GreaterOrEqual(t, len(f), 7, line)
		require.Regexp(t, `^\d{4}-\d\d-\d\d$`, f[3], line)
		got = append(got, append(f[:3:3], f[5:]...))
	}
	require.Equal(t, [][]string{
		{"0", "charge", "step", "1", "18", "B", "-"},
		{"1", "empty", "step", "1", "-", "-"},
		{"2", "child", "spawn", "1", fmt.Sprint(len(fmt.Sprintf(`{"id": %d}`, j.Child))), "B", "job", fmt.Sprint(j.Child)},
	}, got)
	require.Contains(t, out, "\ntimeline (7)\n")
}
