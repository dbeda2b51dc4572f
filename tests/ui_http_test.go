package tests

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/ui"
)

// The dashboard over plain HTTP: what the server enforces whatever a page shows.

// noRedirect is an HTTP client that shows redirects instead of following them.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	Timeout: 30 * time.Second}

func get(t *testing.T, u string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := noRedirect.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(body)
}

func post(t *testing.T, u string, form url.Values, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := noRedirect.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(body)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]{64})"`)

// csrfFrom reads the CSRF token from a page's action forms.
func csrfFrom(t *testing.T, page string) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(page)
	require.NotNil(t, m, "no CSRF token in the page")
	return m[1]
}

// Every action is checked on the server: refused when read-only, without the CSRF
// token, from another origin; asked for confirmation first; done only once
// confirmed. The dashboard connects as a pgrun_admin member, as docs/ui.md says.
func TestUIActionsAreCheckedOnTheServer(t *testing.T) {
	b := testkit.Setup(t)
	admin := testkit.AsRole(t, b, "pgrun_admin")
	job, err := pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil, pgrun.RunAt(time.Now().Add(time.Hour)))
	require.NoError(t, err)
	jobURL := fmt.Sprintf("/jobs/%d", job.ID)

	ro := serveUI(t, admin, ui.Options{ReadOnly: true})
	_, page := get(t, ro+jobURL)
	require.NotContains(t, page, `data-action="cancel"`, "a read-only page offers no action")
	resp, body := post(t, ro+"/actions/cancel", url.Values{"id": {fmt.Sprint(job.ID)}, "confirmed": {"yes"}})
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Contains(t, body, "read-only")
	require.Equal(t, pgrun.StatusQueued, testkit.JobStatus(t, b, job.ID))

	base := serveUI(t, admin, ui.Options{})
	_, page = get(t, base+jobURL)
	require.Contains(t, page, `data-action="cancel"`)
	token := csrfFrom(t, page)
	cancel := url.Values{"id": {fmt.Sprint(job.ID)}, "return": {jobURL}}

	resp, body = post(t, base+"/actions/cancel", withConfirmed(cancel, ""))
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "no CSRF token")
	require.Contains(t, body, "CSRF")
	resp, _ = post(t, base+"/actions/cancel", withConfirmed(cancel, token), "Origin", "http://evil.example")
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "another origin")
	resp, _ = post(t, base+"/actions/cancel", withConfirmed(cancel, token), "Sec-Fetch-Site", "cross-site")
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "a cross-site request")
	require.Equal(t, pgrun.StatusQueued, testkit.JobStatus(t, b, job.ID))

	form := withConfirmed(cancel, token)
	form.Del("confirmed")
	resp, body = post(t, base+"/actions/cancel", form)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, fmt.Sprintf("Cancel job %d?", job.ID), "unconfirmed: the server asks")
	require.Contains(t, body, `name="confirmed" value="yes"`)
	require.Equal(t, pgrun.StatusQueued, testkit.JobStatus(t, b, job.ID))

	resp, _ = post(t, base+"/actions/cancel", withConfirmed(cancel, token))
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, jobURL, resp.Header.Get("Location"))
	require.Equal(t, pgrun.StatusCancelled, testkit.JobStatus(t, b, job.ID))

	// A redirect target is kept on the site.
	resp, _ = post(t, base+"/actions/retry", url.Values{"id": {fmt.Sprint(job.ID)}, "csrf": {token}, "confirmed": {"yes"},
		"return": {"//evil.example/"}})
	require.Equal(t, "/", resp.Header.Get("Location"))
	require.Equal(t, pgrun.StatusQueued, testkit.JobStatus(t, b, job.ID))

	// Queue pause and worker control go through as pgrun_admin.
	resp, _ = post(t, base+"/actions/pause-queue", url.Values{"queue": {"default"}, "csrf": {token}, "confirmed": {"yes"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	var paused bool
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select paused from pgrun.queues where name = 'default'`).Scan(&paused))
	require.True(t, paused)
	resp, _ = post(t, base+"/actions/resume-queue", url.Values{"queue": {"default"}, "csrf": {token}, "confirmed": {"yes"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select paused from pgrun.queues where name = 'default'`).Scan(&paused))
	require.False(t, paused)
	resp, _ = post(t, base+"/actions/worker-control", url.Values{"host": {"h1"}, "queue": {"default"}, "mode": {"drain"},
		"csrf": {token}, "confirmed": {"yes"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	var mode string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select mode from pgrun.worker_control where host = 'h1' and queue = 'default'`).Scan(&mode))
	require.Equal(t, "drain", mode)
	resp, _ = post(t, base+"/actions/worker-control", url.Values{"host": {"h1"}, "mode": {"sideways"}, "csrf": {token}, "confirmed": {"yes"}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
}

func withConfirmed(v url.Values, token string) url.Values {
	out := url.Values{"confirmed": {"yes"}}
	for k, vs := range v {
		out[k] = vs
	}
	if token != "" {
		out.Set("csrf", token)
	}
	return out
}

// Basic authentication, the bearer token and its login cookie, and the loopback
// host check of a dashboard without authentication.
func TestUIAuthentication(t *testing.T) {
	b := testkit.Setup(t)
	basic := serveUI(t, b.Pool, ui.Options{BasicUser: "ops", BasicPassword: "pw"})
	resp, _ := get(t, basic+"/")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Contains(t, resp.Header.Get("WWW-Authenticate"), "Basic")
	resp, _ = get(t, strings.Replace(basic, "http://", "http://ops:wrong@", 1)+"/")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	resp, _ = get(t, strings.Replace(basic, "http://", "http://ops:pw@", 1)+"/")
	require.Equal(t, http.StatusOK, resp.StatusCode)

	tok := serveUI(t, b.Pool, ui.Options{Token: "t0ken"})
	resp, _ = get(t, tok+"/jobs")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/login?next=%2Fjobs", resp.Header.Get("Location"))
	resp, _ = get(t, tok+"/jobs?format=json")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "a script gets 401, not a login page")
	resp, _ = get(t, tok+"/jobs?format=json", "Authorization", "Bearer t0ken")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, _ = post(t, tok+"/login", url.Values{"token": {"nope"}, "next": {"/jobs"}})
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	resp, _ = post(t, tok+"/login", url.Values{"token": {"t0ken"}, "next": {"/jobs"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/jobs", resp.Header.Get("Location"))
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "pgrun_ui" {
			cookie = c
		}
	}
	require.NotNil(t, cookie)
	require.True(t, cookie.HttpOnly)
	require.NotContains(t, cookie.Value, "t0ken", "the cookie does not hold the token")
	resp, _ = get(t, tok+"/jobs", "Cookie", "pgrun_ui="+cookie.Value)
	require.Equal(t, http.StatusOK, resp.StatusCode)

	open := serveUI(t, b.Pool, ui.Options{})
	resp, _ = get(t, open+"/", "Host", "evil.example")
	require.Equal(t, http.StatusMisdirectedRequest, resp.StatusCode, "DNS rebinding: a foreign host name is refused")
	resp, _ = get(t, open+"/", "Host", "localhost:8080")
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// jobsJSON reads one page of the jobs list as JSON.
type jobsJSON struct {
	Data struct {
		Jobs       []struct{ ID int64 } `json:"jobs"`
		Older      int64                `json:"older"`
		SearchedTo int64                `json:"searched_to"`
	} `json:"data"`
}

func listPage(t *testing.T, base, query string) jobsJSON {
	t.Helper()
	resp, body := get(t, base+"/jobs?format=json&"+query)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	var p jobsJSON
	require.NoError(t, json.Unmarshal([]byte(body), &p))
	return p
}

// The jobs list pages by id (keyset): every matching job once, newest first; the
// time range and the other filters select what they say.
func TestUIJobsListPagesByKeyset(t *testing.T) {
	b := testkit.Setup(t)
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.enqueue_job('old', '{"tag": "x"}', queue => 'kp') from generate_series(1, 10)`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.Ctx, `update pgrun.jobs set created_at = now() - interval '3 hours'`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.enqueue_job('new', jsonb_build_object('n', g), queue => 'kp') from generate_series(1, 120) g`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.enqueue_job('new', '{}', queue => 'other') from generate_series(1, 20)`)
	require.NoError(t, err)
	base := serveUI(t, b.Pool, ui.Options{ReadOnly: true})

	var ids []int64
	query := "queue=kp"
	for page := 0; page < 10; page++ {
		p := listPage(t, base, query)
		for _, j := range p.Data.Jobs {
			ids = append(ids, j.ID)
		}
		if p.Data.Older == 0 {
			break
		}
		query = fmt.Sprintf("queue=kp&before=%d", p.Data.Older)
	}
	require.Len(t, ids, 130)
	for i := 1; i < len(ids); i++ {
		require.Less(t, ids[i], ids[i-1], "newest first, each once")
	}
	var want []int64
	rows, err := b.Pool.Query(b.Ctx, `select id from pgrun.jobs where queue = 'kp' order by id desc`)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		want = append(want, id)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, want, ids)

	hourAgo := url.QueryEscape(time.Now().Add(-time.Hour).UTC().Format(time.RFC3339))
	require.Len(t, listPage(t, base, "queue=kp&to="+hourAgo).Data.Jobs, 10, "enqueued before an hour ago")
	recent := listPage(t, base, "queue=kp&from="+hourAgo)
	require.Len(t, recent.Data.Jobs, 50)
	require.NotZero(t, recent.Data.Older)
	require.Len(t, listPage(t, base, "arg=tag").Data.Jobs, 10, "a key in args")
	require.Len(t, listPage(t, base, "arg=n%3D7").Data.Jobs, 1, "a key with its value")
	require.Len(t, listPage(t, base, "kind=new&queue=other").Data.Jobs, 20)
	require.Len(t, listPage(t, base, fmt.Sprintf("id=%d", want[5])).Data.Jobs, 1)

	resp, body := get(t, base+"/jobs?state=bogus")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, "bogus")
}

// A role granted what docs/ui.md lists for a read-only dashboard reads every page
// without a permission error.
func TestUIReadOnlyRoleReadsEveryPage(t *testing.T) {
	b := testkit.Setup(t)
	name, reader := testkit.NewRole(t, b, "")
	for _, stmt := range []string{
		`grant usage on schema pgrun to %q`,
		`grant select on pgrun.jobs, pgrun.job_events, pgrun.runs, pgrun.workflows, pgrun.queues, pgrun.schedules,
		   pgrun.workers, pgrun.worker_control, pgrun.hw_metrics, pgrun.outbox, pgrun.queue_stats, pgrun.worker_status, pgrun.settings to %q`,
		`grant execute on function pgrun.queue_counts(), pgrun.stats_exact_limit(), pgrun.worker_alive(pgrun.workers, timestamptz),
		   pgrun.worker_silence(interval), pgrun.clock(), pgrun.job_timeline(bigint), pgrun.claim_token(bigint),
		   pgrun.health(interval, interval), pgrun.outcome_error(pgrun.job_status, jsonb),
		   pgrun.job_matches(jsonb, bigint, text, text, pgrun.job_status, jsonb, jsonb, timestamptz, timestamptz, bigint, bigint),
		   pgrun.error_group(text), pgrun.typical_run_times(interval),
		   pgrun.job_series(interval, interval, text, text, text), pgrun.error_groups(interval, integer),
		   pgrun.job_blocker(bigint), pgrun.rate_period(interval), pgrun.queue_keys(text, integer),
		   pgrun.queue_sequences(text, integer) to %q`,
	} {
		_, err := b.Pool.Exec(b.Ctx, fmt.Sprintf(stmt, name))
		require.NoError(t, err)
	}
	job, err := pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil)
	require.NoError(t, err)
	_, err = pgrun.DefineWorkflow(b.Ctx, b.Pool, "two", map[string]any{"nodes": []map[string]any{
		{"name": "a", "kind": "noop"}, {"name": "b", "kind": "noop", "deps": []string{"a"}}}})
	require.NoError(t, err)
	run, err := pgrun.StartRun(b.Ctx, b.Pool, "two", map[string]any{}, "")
	require.NoError(t, err)
	for _, stmt := range []string{
		`select pgrun.worker_heartbeat('w1', 'host-1', 1, array['default'])`,
		`select pgrun.record_hw('host-1', 12.5, 1 << 30, 8 << 30)`,
		`select pgrun.set_schedule('tick', '@every 30s', 'noop')`,
	} {
		_, err := b.Pool.Exec(b.Ctx, stmt)
		require.NoError(t, err)
	}
	base := serveUI(t, reader, ui.Options{ReadOnly: true})
	for _, p := range []string{"/", "/jobs", fmt.Sprintf("/jobs/%d", job.ID), "/runs", fmt.Sprintf("/runs/%d", run.ID),
		"/workers", "/schedules", "/dead", "/jobs?state=failed", "/jobs?last=1h", "/jobs?state=running",
		"/jobs?state=queued", fmt.Sprintf("/jobs?run=%d", run.ID), "/?range=7d", "/errors?range=24h", "/queues/default"} {
		resp, body := get(t, base+p+sep(p)+"format=json")
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", p, body)
		require.NotContains(t, body, `"problems"`, "%s: %s", p, body)
	}
	_, body := get(t, base+"/workers?format=json")
	require.Contains(t, body, `"host-1"`)
}

// A read of the overview that fails (health, which this role may not call) is a
// problem line of its own: the reads after it on the same connection (the charts,
// the longest-running jobs) and those of the other lane still fill the page.
func TestUIOverviewReadFailureLeavesTheOthers(t *testing.T) {
	b := testkit.Setup(t)
	name, reader := testkit.NewRole(t, b, "")
	for _, stmt := range []string{
		`grant usage on schema pgrun to %q`,
		`grant select on pgrun.jobs, pgrun.queues, pgrun.workers, pgrun.queue_stats to %q`,
		`grant execute on function pgrun.queue_counts(), pgrun.stats_exact_limit(), pgrun.worker_alive(pgrun.workers, timestamptz),
		   pgrun.clock(), pgrun.outcome_error(pgrun.job_status, jsonb), pgrun.error_group(text), pgrun.typical_run_times(interval),
		   pgrun.job_series(interval, interval, text, text, text), pgrun.error_groups(interval, integer) to %q`,
	} {
		_, err := b.Pool.Exec(b.Ctx, fmt.Sprintf(stmt, name))
		require.NoError(t, err)
	}
	testkit.ExecAll(t, b,
		`select pgrun.enqueue_job('resize', '{}', queue => 'images') from generate_series(1, 3)`,
		`select pgrun.complete_job(c.id, c.attempt) from pgrun.claim_jobs('images', 'w-1', 2, '1 minute') c`,
		`select pgrun.claim_jobs('images', 'w-1', 1, '1 hour')`)
	base := serveUI(t, reader, ui.Options{ReadOnly: true})
	resp, body := get(t, base+"/?format=json")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	var o overviewJSON
	require.NoError(t, json.Unmarshal([]byte(body), &o), body)
	require.Len(t, o.Problems, 1, body)
	require.True(t, strings.HasPrefix(o.Problems[0], "health: "), o.Problems[0])
	var finished int64
	for _, bk := range o.Data.Charts.Buckets {
		finished += bk.Succeeded
	}
	require.Equal(t, int64(2), finished, "the charts, read after health on its connection")
	require.Len(t, o.Data.Running, 1, "the longest-running jobs, read after the charts")
	require.Contains(t, body, `"queue": "images"`, "the queues, in the other lane")
}

func sep(p string) string {
	if strings.Contains(p, "?") {
		return "&"
	}
	return "?"
}

// Live updates: an event stream gets a change when the engine notifies (an enqueue
// on pgrun_jobs, here), and at once a change that came after the page it belongs
// to was rendered but before the stream opened.
func TestUIEventStreamFollowsNotifications(t *testing.T) {
	b := testkit.Setup(t)
	base := serveUI(t, b.Pool, ui.Options{})
	_, page := get(t, base+"/")
	seq := regexp.MustCompile(`data-seq="(\d+)"`).FindStringSubmatch(page)
	require.NotNil(t, seq)

	stream, closeStream := openEvents(t, b, base, seq[1])
	defer closeStream()
	_, err := pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil, pgrun.Queue("live"))
	require.NoError(t, err)
	var data string
	for !strings.Contains(data, `"live"`) { // a fingerprint change may come first
		data = nextChange(t, stream)
	}
	require.Contains(t, data, "pgrun_jobs")

	late, closeLate := openEvents(t, b, base, seq[1]) // opened after a change the page did not show
	defer closeLate()
	require.Contains(t, nextChange(t, late), "missed")
}

// A change made before the server's first fingerprint reading still reaches a page
// served before it. A queued job that is cancelled sends no notification, so the
// reading is the only witness; taken first a second after the start, it used to
// count the cancel as the starting state, and the page never redrew (a browser test
// that cancelled a run within that second waited two minutes for it).
func TestUIEventStreamSeesAChangeBeforeTheFirstCheck(t *testing.T) {
	b := testkit.Setup(t)
	job, err := pgrun.Enqueue(b.Ctx, b.Pool, "noop", nil, pgrun.Queue("early"))
	require.NoError(t, err)
	base := serveUI(t, b.Pool, ui.Options{})
	_, page := get(t, base+"/")
	seq := regexp.MustCompile(`data-seq="(\d+)"`).FindStringSubmatch(page)
	require.NotNil(t, seq)
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.cancel_job($1, 'from the test')`, job.ID)
	require.NoError(t, err)
	stream, closeStream := openEvents(t, b, base, seq[1])
	defer closeStream()
	require.NotEmpty(t, nextChange(t, stream))
}

// openEvents opens the event stream of the UI at base, for a page rendered under
// change count since.
func openEvents(t *testing.T, b *testkit.DB, base, since string) (*bufio.Reader, func()) {
	t.Helper()
	req, err := http.NewRequestWithContext(b.Ctx, http.MethodGet, base+"/events?since="+since, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	return bufio.NewReader(resp.Body), func() { resp.Body.Close() }
}

// nextChange reads the stream up to the next change event and returns its data; it
// fails the test if none comes within 15 s.
func nextChange(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	done := make(chan string, 1)
	go func() {
		var event string
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				done <- "error: " + err.Error()
				return
			}
			if strings.HasPrefix(line, "event: ") {
				event = strings.TrimSpace(strings.TrimPrefix(line, "event: "))
			}
			if data, ok := strings.CutPrefix(line, "data: "); ok && event == "change" {
				done <- strings.TrimSpace(data)
				return
			}
		}
	}()
	select {
	case d := <-done:
		return d
	case <-time.After(15 * time.Second):
		t.Fatal("no change event within 15 s")
		return ""
	}
}
