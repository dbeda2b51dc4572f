package tests

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/sqlapi"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/ui"
)

// The jobs lists in orders of their own (running oldest start first, queued in
// claim order, a run's jobs with its map children), the flags on running jobs, and
// the run page's map progress and edge routing (issue 34).

// listJSON is a jobs page as ?format=json gives it.
type listJSON struct {
	Data struct {
		Jobs []struct {
			ID        int64      `json:"id"`
			Kind      string     `json:"kind"`
			Queue     string     `json:"queue"`
			Status    string     `json:"status"`
			Priority  int        `json:"priority"`
			RunAt     time.Time  `json:"run_at"`
			StartedAt *time.Time `json:"started_at"`
			ParentID  *int64     `json:"parent_id"`
			Flags     []struct {
				Kind string `json:"kind"`
				Why  string `json:"why"`
			} `json:"flags"`
		} `json:"jobs"`
		Order   string `json:"order"`
		Next    string `json:"next"`
		Stopped bool   `json:"stopped"`
		Older   int64  `json:"older"`
		Indexed bool   `json:"indexed"`
	} `json:"data"`
	Problems []string `json:"problems"`
}

func listJobsJSON(t *testing.T, base, query string) listJSON {
	t.Helper()
	resp, body := get(t, base+"/jobs?format=json&"+query)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	var p listJSON
	require.NoError(t, json.Unmarshal([]byte(body), &p), body)
	require.Empty(t, p.Problems, body)
	return p
}

// Issue 34: a job running for five hours is on the first page of the running list
// however much history the table holds (a million jobs here), and the oldest due
// job first on the queued list; both go by an index in their own order, page by
// keyset to the end, and show in a browser with how long each has run.
func TestUIRunningAndQueuedListsFindTheOldestAtAMillionJobs(t *testing.T) {
	b := testkit.Setup(t)
	// The old ones first, so that they have the lowest ids.
	testkit.ExecAll(t, b,
		`select pgrun.enqueue_job('etl', queue => 'long')`,
		`select pgrun.enqueue_job('late', queue => 'backlog', run_at => now() - interval '5 hours')`)
	long := testkit.ClaimN(t, b.Pool, "long", "w-long", 1, "1 hour")[0]
	var stuck int64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select id from pgrun.jobs where kind = 'late'`).Scan(&stuck))

	// A million finished jobs after them.
	writeHistory(t, b, `insert into pgrun.queues (name) values ('hist') on conflict do nothing`,
		`insert into pgrun.jobs (kind, queue, status, attempt, max_attempts, created_at, run_at, started_at, finished_at)
		 select 'hist', 'hist', (case when g % 50 = 0 then 'failed' else 'succeeded' end)::pgrun.job_status, 1, 25,
		        t.at, t.at, t.at, t.at + interval '20 ms'
		 from generate_series(1, 1000000) g,
		      lateral (select now() - interval '4 hours' + g * interval '10 ms' as at) t`)
	// Then 80 running jobs started in the last minutes, and 100 queued jobs due now.
	testkit.ExecAll(t, b, `select pgrun.enqueue_job('etl', queue => 'long') from generate_series(1, 80)`,
		`select pgrun.enqueue_job('late', queue => 'backlog') from generate_series(1, 100)`)
	testkit.ClaimN(t, b.Pool, "long", "w-now", 80, "1 hour")
	testkit.ExecAll(t, b, `update pgrun.jobs set started_at = now() - interval '5 hours' where id = `+strconv.FormatInt(long.ID, 10))

	base := serveUI(t, b.Pool, ui.Options{})
	began := time.Now()
	first := listJobsJSON(t, base, "state=running")
	t.Logf("running list, first page: %s", time.Since(began))
	require.Equal(t, "running", first.Data.Order)
	require.True(t, first.Data.Indexed)
	require.False(t, first.Data.Stopped)
	require.Len(t, first.Data.Jobs, 50)
	require.Equal(t, long.ID, first.Data.Jobs[0].ID, "the job running for five hours comes first")
	require.NotEmpty(t, first.Data.Next)
	second := listJobsJSON(t, base, "state=running&after="+first.Data.Next)
	require.Len(t, second.Data.Jobs, 31)
	require.Empty(t, second.Data.Next, "the end")
	seen := map[int64]bool{}
	var last time.Time
	for _, j := range append(first.Data.Jobs, second.Data.Jobs...) {
		require.False(t, seen[j.ID], "job %d twice", j.ID)
		seen[j.ID] = true
		require.Equal(t, "running", j.Status)
		require.False(t, j.StartedAt.Before(last), "oldest start first")
		last = *j.StartedAt
	}

	queued := listJobsJSON(t, base, "state=queued&queue=backlog")
	require.Equal(t, "queued", queued.Data.Order)
	require.Equal(t, stuck, queued.Data.Jobs[0].ID, "due five hours ago, claimed first")
	all := listJobsJSON(t, base, "state=queued")
	require.Equal(t, stuck, all.Data.Jobs[0].ID, "every queue merged in claim order")
	for i := 1; i < len(all.Data.Jobs); i++ {
		p, q := all.Data.Jobs[i-1], all.Data.Jobs[i]
		require.True(t, p.Priority < q.Priority || p.Priority == q.Priority && !q.RunAt.Before(p.RunAt), "claim order")
	}
	for _, bad := range []string{"state=running&after=bogus", "state=queued&after=" + first.Data.Next, "after=1.2"} {
		resp, body := get(t, base+"/jobs?"+bad)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, bad)
		require.Contains(t, body, "is not a position of this list", bad)
	}
	rare := listJobsJSON(t, base, "state=queued&kind=nothing-of-the-sort")
	require.Empty(t, rare.Data.Jobs)
	require.Empty(t, rare.Data.Next)

	// Each goes by its index, never by the history.
	requirePlanUses(t, b, "jobs_running_started_idx", sqlapi.JobsMatchingRunning,
		`{"states": ["running"]}`, negInfinity(), int64(0), 51, 50)
	requirePlanUses(t, b, "jobs_claim_idx", sqlapi.JobsMatchingQueued,
		`{"states": ["queued"]}`, nil, int16(-32768), negInfinity(), int64(0), 51, 50)
	requirePlanUses(t, b, "jobs_running_started_idx", sqlapi.DashboardRunningOldest, 10)

	// In a browser: the first row is the five-hour job, with how long it has run.
	ctx := browser(t)
	var runningFor string
	row := fmt.Sprintf(`table.jobs tbody tr:first-child[data-job="%d"]`, long.ID)
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(base+"/jobs?state=running"),
		chromedp.WaitVisible(row, chromedp.ByQuery),
		chromedp.Text(row+` td.running-for`, &runningFor, chromedp.ByQuery),
	))
	require.True(t, strings.HasPrefix(runningFor, "5h"), "running for %q", runningFor)
}

// writeHistory runs stmts as the server's user with the insert triggers off (as the
// bench fill does), so that finished jobs can be written directly and fast; then
// analyzes pgrun.jobs.
func writeHistory(t *testing.T, b *testkit.DB, stmts ...string) {
	t.Helper()
	admin := testkit.AsServerUser(t, b.URL)
	stmts = append(append([]string{`set session_replication_role = replica`}, stmts...),
		`reset session_replication_role`, `analyze pgrun.jobs`)
	for _, stmt := range stmts {
		_, err := admin.Exec(b.Ctx, stmt)
		require.NoError(t, err, stmt)
	}
}

func negInfinity() pgtype.Timestamptz {
	return pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
}

// requirePlanUses explains stmt with args and fails unless its plan reads index
// and never reads pgrun.jobs sequentially.
func requirePlanUses(t *testing.T, b *testkit.DB, index, stmt string, args ...any) {
	t.Helper()
	rows, err := b.Pool.Query(b.Ctx, "explain "+stmt, args...)
	require.NoError(t, err)
	var plan strings.Builder
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		plan.WriteString(line + "\n")
	}
	require.NoError(t, rows.Err())
	require.Contains(t, plan.String(), index, plan.String())
	require.NotRegexp(t, `Seq Scan on jobs`, plan.String())
}

// A running job is flagged slow past the p95 run time of its queue and kind over
// 24 hours (given at least 20 runs), and every running job of a queue that holds
// all its max_running slots is flagged; each flag says why in its tooltip.
func TestUIFlagsSlowJobsAndQueuesThatHoldAllTheirSlots(t *testing.T) {
	b := testkit.Setup(t)
	// History: 30 runs of resize in queue flag, a second each, and 5 of rare (too
	// few to judge by), finished a few minutes ago and rolled up.
	writeHistory(t, b, `insert into pgrun.queues (name) values ('flag') on conflict do nothing`,
		`insert into pgrun.jobs (kind, queue, status, attempt, max_attempts, created_at, run_at, started_at, finished_at)
		 select k, 'flag', 'succeeded', 1, 25, t.at, t.at, t.at, t.at + interval '1 second'
		 from (select 'resize' as k, g from generate_series(1, 30) g union all select 'rare', g from generate_series(1, 5) g) s,
		      lateral (select date_trunc('minute', now()) - interval '5 minutes' + s.g * interval '2 seconds' as at) t`)
	testkit.ExecAll(t, b, `select pgrun.rollup_minutes()`,
		`select pgrun.set_queue('full', max_running => 2)`,
		`select pgrun.set_queue('roomy', max_running => 5)`,
		`select pgrun.enqueue_job('resize', queue => 'flag') from generate_series(1, 2)`,
		`select pgrun.enqueue_job('rare', queue => 'flag')`,
		`select pgrun.enqueue_job('mail', queue => 'full') from generate_series(1, 3)`,
		`select pgrun.enqueue_job('mail', queue => 'roomy')`)
	slow := testkit.ClaimN(t, b.Pool, "flag", "w1", 3, "1 hour")
	require.Len(t, testkit.ClaimN(t, b.Pool, "full", "w1", 3, "1 hour"), 2, "max_running holds the third")
	testkit.ClaimN(t, b.Pool, "roomy", "w1", 1, "1 hour")
	// The first resize has run for ten minutes, the second just started; rare too.
	testkit.ExecAll(t, b, fmt.Sprintf(`update pgrun.jobs set started_at = now() - interval '10 minutes' where id in (%d, %d)`,
		slow[0].ID, slow[2].ID))

	base := serveUI(t, b.Pool, ui.Options{})
	p := listJobsJSON(t, base, "state=running")
	flags := map[string][]string{} // "queue/kind/old|new" -> flag kinds
	for _, j := range p.Data.Jobs {
		key := j.Queue + "/" + j.Kind
		if j.Queue == "flag" {
			key += map[bool]string{true: "/old", false: "/new"}[time.Since(*j.StartedAt) > 5*time.Minute]
		}
		for _, f := range j.Flags {
			flags[key] = append(flags[key], f.Kind)
			switch f.Kind {
			case "slow":
				require.Contains(t, f.Why, "95% of the 30 runs of resize in queue flag")
			case "slots":
				require.Contains(t, f.Why, "queue full runs 2 jobs and its max_running is 2")
			}
		}
	}
	require.Equal(t, map[string][]string{"flag/resize/old": {"slow"}, "full/mail": {"slots", "slots"}}, flags,
		"the new resize is within its p95, rare has too few runs, roomy has room")

	_, html := get(t, base+"/jobs?state=running")
	require.Regexp(t, `<span class="flag flag-slow" title="running for 10m\d\ds: 95% of the 30 runs`, html)
	require.Contains(t, html, `<span class="flag flag-slots" title="queue full runs 2 jobs`)
	_, html = get(t, base+"/jobs")
	require.Contains(t, html, `flag-slow`, "the newest-first list flags its running jobs too")
}

// The run page's DAG shows a map node's children done of all, and failed, and the
// run's job list holds the map children, which have a parent but no run_id.
func TestUIRunShowsMapProgressAndListsItsMapChildren(t *testing.T) {
	b := testkit.Setup(t)
	testkit.DefineWorkflow(t, b, "fan", `{"nodes": [
	  {"name": "fetch", "kind": "fetch"},
	  {"name": "embed", "kind": "embed", "deps": ["fetch"], "map": {"$from": "fetch.output.docs"}},
	  {"name": "report", "kind": "report", "deps": ["embed"]}]}`)
	run, err := pgrun.StartRun(b.Ctx, b.Pool, "fan", map[string]any{}, "")
	require.NoError(t, err)
	fetch := claimOneClaimed(t, b)
	testkit.Report(t, b, fetch, testkit.Outcome{Result: map[string]any{"docs": []string{"a", "b", "c", "d", "e"}}})
	// Three children succeed, one fails for good, one is left queued.
	kids := testkit.ClaimN(t, b.Pool, "default", "w", 4, "1 hour")
	require.Len(t, kids, 4)
	for i, k := range kids {
		o := testkit.Outcome{Result: "ok"}
		if i == 3 {
			o = testkit.Outcome{Fail: "bad doc", Permanent: true}
		}
		testkit.Report(t, b, testkit.Claimed{ID: k.ID, Attempt: int(k.Attempt)}, o)
	}

	base := serveUI(t, b.Pool, ui.Options{})
	resp, body := get(t, fmt.Sprintf("%s/runs/%d?format=json", base, run.ID))
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	var page struct {
		Data struct {
			Nodes []struct {
				Name           string           `json:"name"`
				Status         string           `json:"status"`
				Done           int64            `json:"done"`
				Total          int64            `json:"total"`
				ChildrenFailed int64            `json:"children_failed"`
				Children       map[string]int64 `json:"children"`
			} `json:"nodes"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &page))
	embed := page.Data.Nodes[1]
	require.Equal(t, "embed", embed.Name)
	require.Equal(t, "waiting", embed.Status)
	require.Equal(t, [3]int64{3, 5, 1}, [3]int64{embed.Done, embed.Total, embed.ChildrenFailed})
	require.Equal(t, map[string]int64{"succeeded": 3, "failed": 1, "queued": 1}, embed.Children)

	_, html := get(t, fmt.Sprintf("%s/runs/%d", base, run.ID))
	require.Regexp(t, `data-node="embed"[^>]*><title>embed: waiting — 3 of 5 children done, 1 failed</title>`, html)
	require.Contains(t, html, `waiting · 3/5 · <tspan class="failed">1 failed</tspan>`)

	// The run's jobs: its three nodes and the five children, newest first.
	list := listJobsJSON(t, base, fmt.Sprintf("run=%d", run.ID))
	require.Len(t, list.Data.Jobs, 8)
	var children int
	for i, j := range list.Data.Jobs {
		if i > 0 {
			require.Less(t, j.ID, list.Data.Jobs[i-1].ID)
		}
		if j.ParentID != nil {
			children++
		}
	}
	require.Equal(t, 5, children)
	failed := listJobsJSON(t, base, fmt.Sprintf("run=%d&state=failed", run.ID))
	require.Len(t, failed.Data.Jobs, 1, "the filter applies to the children too")
	// The filter-wide actions mean what the list shows: a run's map children too.
	var matched, todo int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select matched, changed from pgrun.retry_matching($1, dry_run => true)`,
		fmt.Sprintf(`{"run": %d}`, run.ID)).Scan(&matched, &todo))
	require.Equal(t, [2]int{8, 1}, [2]int{matched, todo}, "the run's 8 jobs match; its one failed child would be retried")
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select changed from pgrun.retry_matching($1)`,
		fmt.Sprintf(`{"run": %d, "states": ["failed"]}`, run.ID)).Scan(&todo))
	require.Equal(t, 1, todo)
	require.Equal(t, pgrun.StatusQueued, testkit.JobStatus(t, b, kids[3].ID), "the failed map child was retried")
	paged := listJobsJSON(t, base, fmt.Sprintf("run=%d&before=%d", run.ID, list.Data.Jobs[3].ID))
	require.Equal(t, list.Data.Jobs[4:], paged.Data.Jobs, "keyset by id")
}

// An edge that skips a layer goes around the nodes of the layers it crosses: in the
// drawn SVG, no point of any edge lies inside a node it does not connect. Here
// ledger -> notify skips the layer of invoices (and tax), which a straight curve
// drew straight through invoices.
func TestUIDAGEdgesGoAroundTheNodesTheySkip(t *testing.T) {
	b := testkit.Setup(t)
	testkit.DefineWorkflow(t, b, "billing", `{"nodes": [
	  {"name": "orders", "kind": "noop"},
	  {"name": "ledger", "kind": "noop", "deps": ["orders"]},
	  {"name": "invoices", "kind": "noop", "deps": ["ledger"]},
	  {"name": "tax", "kind": "noop", "deps": ["ledger", "orders"]},
	  {"name": "archive", "kind": "noop", "deps": ["orders"]},
	  {"name": "notify", "kind": "noop", "deps": ["invoices", "ledger", "orders"]}]}`)
	run, err := pgrun.StartRun(b.Ctx, b.Pool, "billing", map[string]any{}, "")
	require.NoError(t, err)
	base := serveUI(t, b.Pool, ui.Options{})
	_, html := get(t, fmt.Sprintf("%s/runs/%d", base, run.ID))

	type box struct{ x, y, w, h float64 }
	nodes := map[string]box{}
	for _, m := range regexp.MustCompile(`data-node="([^"]+)" data-status="[^"]*" transform="translate\((\d+),(\d+)\)"><title>[^<]*</title><rect width="(\d+)" height="(\d+)"`).
		FindAllStringSubmatch(html, -1) {
		nodes[m[1]] = box{atof(t, m[2]), atof(t, m[3]), atof(t, m[4]), atof(t, m[5])}
	}
	require.Len(t, nodes, 6, html)
	edges := regexp.MustCompile(`<path class="edge[^"]*" data-from="([^"]+)" data-to="([^"]+)" d="([^"]+)"`).FindAllStringSubmatch(html, -1)
	require.Len(t, edges, 8)
	skipping := 0
	for _, e := range edges {
		pts := pathPoints(t, e[3])
		if e[1] == "ledger" && e[2] == "notify" {
			skipping++
			require.Greater(t, len(pts), 40, "ledger -> notify goes through a slot of the layer it skips")
		}
		for name, n := range nodes {
			if name == e[1] || name == e[2] {
				continue
			}
			for _, p := range pts {
				inside := p[0] > n.x+0.5 && p[0] < n.x+n.w-0.5 && p[1] > n.y+0.5 && p[1] < n.y+n.h-0.5
				require.False(t, inside, "edge %s -> %s passes behind node %s at (%.1f, %.1f)", e[1], e[2], name, p[0], p[1])
			}
		}
	}
	require.Equal(t, 1, skipping)
}

func atof(t *testing.T, s string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(s, 64)
	require.NoError(t, err)
	return f
}

// pathPoints samples an SVG path of M, L and C commands (absolute, "x,y" pairs):
// every line and cubic Bézier at 50 points each.
func pathPoints(t *testing.T, d string) [][2]float64 {
	t.Helper()
	var pts [][2]float64
	var cur [2]float64
	fields := strings.Fields(d)
	pair := func(s string) [2]float64 {
		x, y, ok := strings.Cut(s, ",")
		require.True(t, ok, d)
		return [2]float64{atof(t, x), atof(t, y)}
	}
	for i := 0; i < len(fields); {
		cmd, first := fields[i][0], fields[i][1:]
		switch cmd {
		case 'M':
			cur = pair(first)
			pts = append(pts, cur)
			i++
		case 'L':
			to := pair(first)
			for s := 1; s <= 50; s++ {
				f := float64(s) / 50
				pts = append(pts, [2]float64{cur[0] + f*(to[0]-cur[0]), cur[1] + f*(to[1]-cur[1])})
			}
			cur = to
			i++
		case 'C':
			c1, c2, to := pair(first), pair(fields[i+1]), pair(fields[i+2])
			for s := 1; s <= 50; s++ {
				f := float64(s) / 50
				g := 1 - f
				pt := [2]float64{}
				for k := range 2 {
					pt[k] = g*g*g*cur[k] + 3*g*g*f*c1[k] + 3*g*f*f*c2[k] + f*f*f*to[k]
				}
				pts = append(pts, pt)
			}
			cur = to
			i += 3
		default:
			t.Fatalf("path command %q in %s", cmd, d)
		}
	}
	require.False(t, math.IsNaN(cur[0]))
	return pts
}

// The read-only role as docs/ui.md grants it lists every order by the filter rule
// (pgrun.job_matches, no fallback): the running, queued and run lists, and an error
// filter that reads the outcome's error, so a job that failed and then succeeded
// does not match its old error.
func TestUIReadOnlyRecipeListsByTheFilterRule(t *testing.T) {
	b := testkit.Setup(t)
	name, reader := testkit.NewRole(t, b, "")
	doc, err := os.ReadFile("../docs/ui.md")
	require.NoError(t, err)
	recipe := regexp.MustCompile(`(?s)CREATE ROLE pgrun_ui_reader NOLOGIN;\n(.*?)\nCREATE ROLE dashboard`).FindSubmatch(doc)
	require.NotNil(t, recipe, "docs/ui.md has the read-only role's recipe")
	for _, stmt := range strings.Split(string(recipe[1]), ";") {
		if stmt = strings.TrimSpace(stmt); stmt != "" {
			testkit.ExecAll(t, b, strings.ReplaceAll(stmt, "pgrun_ui_reader", `"`+name+`"`))
		}
	}
	testkit.ExecAll(t, b, `select pgrun.enqueue_job('mail', queue => 'stale') from generate_series(1, 2)`,
		`select pgrun.enqueue_job('mail', queue => 'stale', run_at => now() + interval '1 hour')`)
	two := testkit.ClaimN(t, b.Pool, "stale", "w", 2, "1 hour")
	// The first fails with "smtp 421" and is retried; the second fails the same way and
	// then succeeds: its row keeps the old error.
	for _, c := range two {
		testkit.ExecAll(t, b, fmt.Sprintf(`select pgrun.fail_job(%d, %d, '{"message": "smtp 421 try later"}', true)`, c.ID, c.Attempt))
	}
	testkit.ExecAll(t, b, `update pgrun.jobs set run_at = now() where queue = 'stale' and status = 'queued' and attempt > 0`)
	again := testkit.ClaimN(t, b.Pool, "stale", "w", 2, "1 hour")
	require.Len(t, again, 2)
	testkit.Report(t, b, testkit.Claimed{ID: again[1].ID, Attempt: int(again[1].Attempt)}, testkit.Outcome{Result: "ok"})

	base := serveUI(t, reader, ui.Options{ReadOnly: true})
	matched := listJobsJSON(t, base, "queue=stale&error=421")
	require.Len(t, matched.Data.Jobs, 1, "the succeeded job's error is stale")
	require.Equal(t, again[0].ID, matched.Data.Jobs[0].ID, "the running retry's is its last attempt's")
	running := listJobsJSON(t, base, "state=running&queue=stale")
	require.Len(t, running.Data.Jobs, 1)
	require.Equal(t, again[0].ID, running.Data.Jobs[0].ID)
	queued := listJobsJSON(t, base, "state=queued&queue=stale")
	require.Len(t, queued.Data.Jobs, 1, "the one scheduled in an hour")
	testkit.DefineWorkflow(t, b, "one", `{"nodes": [{"name": "a", "kind": "noop"}]}`)
	run, err := pgrun.StartRun(b.Ctx, b.Pool, "one", map[string]any{}, "")
	require.NoError(t, err)
	require.Len(t, listJobsJSON(t, base, fmt.Sprintf("run=%d", run.ID)).Data.Jobs, 1)
}
