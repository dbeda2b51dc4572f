package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/ui"
)

// The errors page, the overview's time-range charts and its short lists (issue 34:
// "the operator's incident", a burst of "smtp 421" failures mixed with permanent
// "550 mailbox unavailable" ones).

// errorBurst is an incident's failures in queue emails, kind echo: transient "smtp
// 421" failures, each message with its own queue id, and permanent "550" ones, each
// naming its own mailbox, interleaved as they arrive; and one job that failed with a
// 421 and then succeeded, whose row keeps the stale error.
type errorBurst struct {
	transient, permanent []int64
	recovered            int64
	// group421 and group550 are the two messages' groups (pgrun.error_group).
	group421, group550 string
}

// newErrorBurst fails n421 + n550 jobs of queue emails, kind echo: every ninth a 550
// until they run out (so n421 is at least 8 times n550).
func newErrorBurst(t testing.TB, b *testkit.DB, n421, n550 int) errorBurst {
	t.Helper()
	var e errorBurst
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id from pgrun.enqueue_job('echo', '{"n": 0}', queue => 'emails', max_attempts => 3)`).
		Scan(&e.recovered))
	testkit.ExecAll(t, b,
		`select pgrun.fail_job(c.id, c.attempt, '{"message": "smtp 421 4.7.0 try again later (queue id 5e1d0c0ffee7)"}', retryable => true)
		 from pgrun.claim_jobs('emails', 'w-burst', 10, '1 minute') c`,
		`update pgrun.jobs set run_at = now() where queue = 'emails'`,
		`select pgrun.complete_job(c.id, c.attempt) from pgrun.claim_jobs('emails', 'w-burst', 10, '1 minute') c`)
	testkit.ExecAll(t, b, fmt.Sprintf(`select pgrun.enqueue_job('echo', jsonb_build_object('n', g, 'permanent', g %% 9 = 0 and g / 9 <= %d),
		queue => 'emails') from generate_series(1, %d) g`, n550, n421+n550))
	for {
		var n int
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `
			select count(pgrun.fail_job(c.id, c.attempt,
			         jsonb_build_object('message', case when (c.args ->> 'permanent')::boolean
			           then '550 5.1.1 <user' || (c.args ->> 'n') || '@example.com>: mailbox unavailable'
			           else 'smtp 421 4.7.0 try again later (queue id ' || md5(c.args ->> 'n') || ')' end),
			         retryable => false))
			from pgrun.claim_jobs('emails', 'w-burst', 10000, '1 minute') c`).Scan(&n))
		if n == 0 {
			break
		}
	}
	e.permanent = idsOf(t, b.Pool, `select id from pgrun.jobs where queue = 'emails' and status = 'failed' and (args ->> 'permanent')::boolean`)
	e.transient = idsOf(t, b.Pool, `select id from pgrun.jobs where queue = 'emails' and status = 'failed' and not (args ->> 'permanent')::boolean`)
	require.Len(t, e.permanent, n550, "the burst's arithmetic")
	require.Len(t, e.transient, n421)
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select pgrun.error_group('smtp 421 4.7.0 try again later (queue id ' || md5('7') || ')'),
		pgrun.error_group('550 5.1.1 <user7@example.com>: mailbox unavailable')`).Scan(&e.group421, &e.group550))
	require.Contains(t, e.group421, "smtp 421 ")
	require.True(t, strings.HasPrefix(e.group550, "550 "), e.group550)
	return e
}

// errorsJSON is the errors page as ?format=json gives it.
type errorsJSON struct {
	Data struct {
		Range struct {
			Name string `json:"name"`
		} `json:"range"`
		Groups []struct {
			Queue      string    `json:"queue"`
			Kind       string    `json:"kind"`
			ErrorGroup *string   `json:"error_group"`
			Sample     string    `json:"sample"`
			N          int64     `json:"n"`
			FirstSeen  time.Time `json:"first_seen"`
			LastSeen   time.Time `json:"last_seen"`
			Spark      []int64   `json:"spark"`
			Open       string    `json:"open"`
		} `json:"groups"`
		Total int64 `json:"total"`
	} `json:"data"`
	Problems []string `json:"problems"`
}

func errorsPage(t *testing.T, base, query string) errorsJSON {
	t.Helper()
	resp, body := get(t, base+"/errors?format=json&"+query)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	var e errorsJSON
	require.NoError(t, json.Unmarshal([]byte(body), &e), body)
	require.Empty(t, e.Problems)
	return e
}

// groupCounts sums up an errors page: failures by group, and each group's open link.
func groupCounts(t *testing.T, e errorsJSON) (map[string]int64, map[string]string) {
	t.Helper()
	n, open := map[string]int64{}, map[string]string{}
	for _, g := range e.Data.Groups {
		require.NotNil(t, g.ErrorGroup)
		key := g.Queue + "/" + g.Kind + "/" + *g.ErrorGroup
		n[key] = g.N
		open[key] = g.Open
		var spark int64
		for _, c := range g.Spark {
			spark += c
		}
		require.Equal(t, g.N, spark, "the sparkline of %s sums to its count", key)
		require.Len(t, g.Spark, 24)
		require.False(t, g.LastSeen.Before(g.FirstSeen))
		require.NotEmpty(t, g.Sample)
	}
	return n, open
}

// The errors page groups a burst by queue, kind and normalised message: the 421s,
// whose messages differ in their ids, are one group, the 550s another, with their
// counts, before the minutes are rolled up (counted live) and after (from
// error_minutes) alike; a job that failed and then succeeded is not among them.
// "open" lists exactly the group's failed jobs, and "retry this group" (the
// filter-wide retry, counted first) retries those and leaves the other group failed.
func TestUIErrorsPageGroupsABurstAndRetriesOneGroup(t *testing.T) {
	b := testkit.Setup(t)
	e := newErrorBurst(t, b, 157, 17)
	base := serveUI(t, testkit.AsRole(t, b, "pgrun_admin"), ui.Options{})
	k421, k550 := "emails/echo/"+e.group421, "emails/echo/"+e.group550

	live := errorsPage(t, base, "")
	require.Equal(t, "1h", live.Data.Range.Name, "the last hour by default")
	n, open := groupCounts(t, live)
	require.Equal(t, map[string]int64{k421: 157, k550: 17}, n, "counted live")
	require.Equal(t, int64(174), live.Data.Total)

	var moved int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select pgrun.rollup_minutes(now() + interval '2 minutes')`).Scan(&moved))
	require.Positive(t, moved)
	for _, rg := range []string{"1h", "24h", "7d"} {
		rolled := errorsPage(t, base, "range="+rg)
		require.Equal(t, rg, rolled.Data.Range.Name)
		n, _ = groupCounts(t, rolled)
		require.Equal(t, map[string]int64{k421: 157, k550: 17}, n, "from the rollups, over %s", rg)
	}
	resp, body := get(t, base+"/errors?range=2w")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, "2w")

	// The HTML page: a row per group, with its count and its two ways in.
	_, page := get(t, base+"/errors")
	for _, g := range []struct {
		group string
		n     string
	}{{e.group421, "157"}, {e.group550, "17"}} {
		row := regexp.MustCompile(`(?s)<tr [^>]*data-queue="emails" data-kind="echo" data-group="` + regexp.QuoteMeta(htmlAttr(g.group)) +
			`">.*?</tr>`).FindString(page)
		require.NotEmpty(t, row, "a row for %q in %s", g.group, page)
		require.Contains(t, row, `<td class="n count">`+g.n+`</td>`)
		require.Contains(t, row, `<svg class="spark"`)
		require.Contains(t, row, `data-action="retry-matching"`)
		require.Contains(t, row, `name="error_group" value="`+htmlAttr(g.group)+`"`)
	}
	require.Contains(t, page, `href="/errors" aria-current="page"`, "the nav marks the page")

	// open: the jobs list filtered to the group, exactly its failed jobs.
	require.Equal(t, "/jobs?"+url.Values{"queue": {"emails"}, "kind": {"echo"}, "state": {"failed"},
		"error_group": {e.group550}}.Encode(), open[k550])
	list := listPage(t, base, strings.TrimPrefix(open[k550], "/jobs?"))
	var shown []int64
	for _, j := range list.Data.Jobs {
		shown = append(shown, j.ID)
	}
	require.ElementsMatch(t, e.permanent, shown)
	_, jobsPage := get(t, base+open[k550])
	require.Contains(t, jobsPage, `error group <input name="error_group" value="`+htmlAttr(e.group550)+`"`,
		"the list's filter form shows the group, and keeps it")

	// retry this group: asked with the count first, then exactly the 421s.
	token := csrfFrom(t, page)
	form := url.Values{"csrf": {token}, "return": {"/errors"}, "queue": {"emails"}, "kind": {"echo"}, "state": {"failed"},
		"error_group": {e.group421}}
	resp, body = post(t, base+"/actions/retry-matching", form)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, fmt.Sprintf("Retry the 157 jobs this filter matches (queue emails, kind echo, state failed, error group %s)?",
		htmlAttr(fmt.Sprintf("%q", e.group421))))
	upto := regexp.MustCompile(`name="upto" value="(\d+)"`).FindStringSubmatch(body)
	require.NotNil(t, upto, body)
	require.Len(t, idsOf(t, b.Pool, `select id from pgrun.jobs where queue = 'emails' and status = 'failed'`), 174,
		"nothing happens before the confirmation")
	form.Set("upto", upto[1])
	resp, _ = post(t, base+"/actions/retry-matching", withConfirmed(form, token))
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/errors", resp.Header.Get("Location"))
	require.Equal(t, e.transient, idsOf(t, b.Pool, `select id from pgrun.jobs where queue = 'emails' and status = 'queued'`))
	require.Equal(t, e.permanent, idsOf(t, b.Pool, `select id from pgrun.jobs where queue = 'emails' and status = 'failed'`),
		"the 550s stay failed")
}

// htmlAttr is s as html/template writes it in an attribute or text.
func htmlAttr(s string) string {
	return strings.NewReplacer(`&`, "&amp;", `<`, "&lt;", `>`, "&gt;", `"`, "&#34;", `'`, "&#39;", `+`, "&#43;").Replace(s)
}

// overviewJSON is the overview as ?format=json gives it: its charts and lists.
type overviewJSON struct {
	Data struct {
		Charts struct {
			Range struct {
				Name   string `json:"name"`
				Bucket string `json:"bucket"`
			} `json:"range"`
			Queue   string `json:"queue"`
			Kind    string `json:"kind"`
			Buckets []struct {
				At        time.Time `json:"at"`
				Succeeded int64     `json:"succeeded"`
				Failed    int64     `json:"failed"`
				Cancelled int64     `json:"cancelled"`
				WaitN     int64     `json:"wait_n"`
				RunN      int64     `json:"run_n"`
				RunP50    *float64  `json:"run_p50"`
				RunP95    *float64  `json:"run_p95"`
			} `json:"buckets"`
			Throughput struct{ N int64 } `json:"throughput"`
			Failures   struct{ N int64 } `json:"failures"`
			Wait       struct{ N int64 } `json:"wait"`
			Run        struct{ N int64 } `json:"run"`
		} `json:"charts"`
		TopErrors []struct {
			ErrorGroup string `json:"error_group"`
			N          int64  `json:"n"`
		} `json:"top_errors"`
		Running []struct {
			ID          int64   `json:"id"`
			RunningSecs float64 `json:"running_secs"`
		} `json:"longest_running"`
	} `json:"data"`
	Problems []string `json:"problems"`
}

func overviewPage(t *testing.T, base, query string) overviewJSON {
	t.Helper()
	resp, body := get(t, base+"/?format=json&"+query)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	var o overviewJSON
	require.NoError(t, json.Unmarshal([]byte(body), &o), body)
	require.Empty(t, o.Problems)
	return o
}

// The overview's charts cover each range in buckets of their own size, from the
// rollups and the live minutes, with n in each legend and each column's tooltip;
// the queue and kind selectors narrow them. Its short lists show the top failing
// groups of the hour and the longest-running jobs, oldest start first.
func TestUIOverviewChartsAndLists(t *testing.T) {
	b := testkit.Setup(t)
	e := newErrorBurst(t, b, 48, 6)
	testkit.ExecAll(t, b,
		`select pgrun.enqueue_job('resize', '{}', queue => 'images') from generate_series(1, 40)`,
		`select pgrun.complete_job(c.id, c.attempt) from pgrun.claim_jobs('images', 'w-img', 40, '1 minute') c`,
		`select pgrun.enqueue_job('long', '{}', queue => 'slow') from generate_series(1, 3)`,
		`select pgrun.claim_jobs('slow', 'w-slow', 3, '1 hour')`)
	testkit.ExecAll(t, b, `update pgrun.jobs set started_at = now() - (id % 7 + 1) * interval '1 hour' where queue = 'slow'`)
	oldest := idsOf(t, b.Pool, `select id from pgrun.jobs where queue = 'slow' order by started_at limit 1`)[0]
	base := serveUI(t, b.Pool, ui.Options{})

	check := func(o overviewJSON, finished, failed int64) {
		t.Helper()
		var sf, ff, fin, runN int64
		for _, bk := range o.Data.Charts.Buckets {
			fin += bk.Succeeded + bk.Failed + bk.Cancelled
			ff += bk.Failed
			sf += bk.Succeeded + bk.Failed
			runN += bk.RunN
		}
		require.Equal(t, finished, fin)
		require.Equal(t, failed, ff)
		require.Equal(t, finished, o.Data.Charts.Throughput.N, "the throughput legend's n")
		require.Equal(t, sf, o.Data.Charts.Failures.N, "the failure chart's n: succeeded or failed")
		require.Equal(t, runN, o.Data.Charts.Run.N)
	}
	// 54 failed and the recovered job's success (emails), 40 succeeded (images).
	o := overviewPage(t, base, "")
	require.Equal(t, "1h", o.Data.Charts.Range.Name)
	check(o, 95, 54)
	require.Len(t, o.Data.TopErrors, 2)
	require.Equal(t, e.group421, o.Data.TopErrors[0].ErrorGroup)
	require.Equal(t, int64(48), o.Data.TopErrors[0].N)
	require.Len(t, o.Data.Running, 3)
	require.Equal(t, oldest, o.Data.Running[0].ID, "the longest-running job first")
	require.Greater(t, o.Data.Running[0].RunningSecs, 3600.0)

	var moved int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select pgrun.rollup_minutes(now() + interval '2 minutes')`).Scan(&moved))
	for _, rg := range []struct{ name, bucket string }{{"1h", "minute"}, {"6h", "5 minutes"}, {"24h", "15 minutes"}, {"7d", "2 hours"}} {
		o = overviewPage(t, base, "range="+rg.name)
		require.Equal(t, rg.bucket, o.Data.Charts.Range.Bucket)
		check(o, 95, 54)
	}
	o = overviewPage(t, base, "range=24h&queue=images")
	check(o, 40, 0)
	o = overviewPage(t, base, "queue=emails&kind=echo")
	check(o, 55, 54)
	require.Equal(t, "emails", o.Data.Charts.Queue)

	resp, body := get(t, base+"/?range=1y")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, "1y")

	// The HTML: four charts, n in each legend, a tooltip per column with its n.
	_, page := get(t, base+"/?range=6h")
	for _, c := range []string{"throughput", "failures", "wait", "run"} {
		require.Contains(t, page, `<figure data-chart="`+c+`">`)
	}
	require.Contains(t, page, `<span class="n-total">n = 95</span>`)
	require.Regexp(t, `<title>[^<]*UTC[^:<]*: n = \d+ finished: \d+ succeeded, \d+ failed, 0 cancelled</title>`, page)
	require.Regexp(t, `<title>[^<]*UTC[^:<]*: run p50 [^<]+, p95 [^<]+ \(n = \d+\)</title>`, page)
	require.Contains(t, page, `<a href="/?range=7d#charts">7 days</a>`)
	_, page = get(t, base+"/?queue=emails")
	require.Contains(t, page, `<option selected>emails</option>`, "the queue selector shows the choice")
	require.Contains(t, page, `<option>echo</option>`, "the kind selector offers the queue's kinds")
}

// In the browser: the errors page shows both groups of a burst with their counts,
// and "retry this group", asked in the dialog with the count, retries the 421s and
// leaves the 550s failed; the reloaded page says what it did.
func TestUIErrorsPageRetryThisGroupInTheBrowser(t *testing.T) {
	b := testkit.Setup(t)
	e := newErrorBurst(t, b, 1570, 177) // the incident's numbers: two batches of the page's script
	base := serveUI(t, testkit.AsRole(t, b, "pgrun_admin"), ui.Options{})

	ctx := browser(t)
	row := func(group string) string {
		return `tr[data-group="` + strings.ReplaceAll(group, `"`, `\"`) + `"]`
	}
	var n421, n550, question, flash string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(base+"/errors"),
		chromedp.WaitVisible(row(e.group421), chromedp.ByQuery),
		chromedp.Text(row(e.group421)+` td.count`, &n421, chromedp.ByQuery),
		chromedp.Text(row(e.group550)+` td.count`, &n550, chromedp.ByQuery),
	))
	require.Equal(t, "1,570", n421)
	require.Equal(t, "177", n550)
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Click(row(e.group421)+` button[data-action="retry-matching"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#confirm[open]`, chromedp.ByQuery),
		chromedp.Text(`#confirm-text`, &question, chromedp.ByQuery),
	))
	require.Equal(t, fmt.Sprintf("Retry the 1,570 jobs this filter matches (queue emails, kind echo, state failed, error group %q)?", e.group421),
		question)
	require.Len(t, idsOf(t, b.Pool, `select id from pgrun.jobs where queue = 'emails' and status = 'failed'`), 1747,
		"nothing happens before the confirmation")
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Click(`#confirm-ok`, chromedp.ByQuery),
		chromedp.WaitVisible(`.flash`, chromedp.ByQuery),
		chromedp.Text(`.flash`, &flash, chromedp.ByQuery),
	))
	require.Equal(t, fmt.Sprintf("1,570 jobs matched (queue emails, kind echo, state failed, error group %q): 1,570 queued again.", e.group421), flash)
	require.Equal(t, e.transient, idsOf(t, b.Pool, `select id from pgrun.jobs where queue = 'emails' and status = 'queued'`))
	require.Equal(t, e.permanent, idsOf(t, b.Pool, `select id from pgrun.jobs where queue = 'emails' and status = 'failed'`),
		"the 550s stay failed")
}

// BenchmarkUIErrorsAndCharts times the pages of this file against the database
// PGRUN_UI_BENCH_URL names (5 million jobs, scripts/ui-bench.sh), connected as
// runner ui connects (JIT off), after rolling up
// its week of endings (pgrun.rollup_minutes, in its bounded steps): the overview in
// each range, narrowed to a queue and a kind, the errors page in each range, and a
// group's "open" link (the failed jobs of one group).
func BenchmarkUIErrorsAndCharts(b *testing.B) {
	dbURL := os.Getenv("PGRUN_UI_BENCH_URL")
	if dbURL == "" {
		b.Skip("set PGRUN_UI_BENCH_URL to a database filled by scripts/ui-bench.sh")
	}
	ctx := b.Context()
	cfg, err := pgxpool.ParseConfig(dbURL)
	require.NoError(b, err)
	ui.TunePool(cfg) // as runner ui connects
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(b, err)
	defer pool.Close()
	for {
		var moved int
		require.NoError(b, pool.QueryRow(ctx, `select pgrun.rollup_minutes()`).Scan(&moved))
		if moved == 0 {
			break
		}
	}
	var group string
	require.NoError(b, pool.QueryRow(ctx, `select error_group from pgrun.error_groups('7 days', 1)`).Scan(&group))
	base := serveUI(b, pool, ui.Options{})
	for _, p := range []struct{ name, path string }{
		{"overview_1h", "/"},
		{"overview_6h", "/?range=6h"},
		{"overview_24h", "/?range=24h"},
		{"overview_7d", "/?range=7d"},
		{"overview_7d_queue_kind", "/?range=7d&queue=default&kind=sync"},
		{"errors_1h", "/errors"},
		{"errors_24h", "/errors?range=24h"},
		{"errors_7d", "/errors?range=7d"},
		{"group_open", "/jobs?" + url.Values{"queue": {"default"}, "kind": {"sync"}, "state": {"failed"}, "error_group": {group}}.Encode()},
	} {
		fetch := func(b *testing.B) {
			resp, err := http.Get(base + p.path)
			if err != nil {
				b.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("%s: %s", p.path, resp.Status)
			}
		}
		b.Run(p.name, func(b *testing.B) {
			fetch(b)
			for b.Loop() {
				fetch(b)
			}
		})
	}
}
