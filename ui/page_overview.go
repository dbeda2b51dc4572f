package ui

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgrun/pgrun/internal/sqlapi"
)

// queueRow is one line of the overview (sqlapi.DashboardQueues).
type queueRow struct {
	Queue            string   `db:"queue" json:"queue"`
	Paused           bool     `db:"paused" json:"paused"`
	Queued           int64    `db:"queued" json:"queued"`
	Scheduled        int64    `db:"scheduled" json:"scheduled"`
	Running          int64    `db:"running" json:"running"`
	Pending          int64    `db:"pending" json:"pending"`
	Waiting          int64    `db:"waiting" json:"waiting"`
	OldestQueuedSecs *float64 `db:"oldest_queued_secs" json:"oldest_queued_secs"`
	Succeeded1m      int64    `db:"succeeded_1m" json:"succeeded_1m"`
	Failed1m         int64    `db:"failed_1m" json:"failed_1m"`
	Cancelled1m      int64    `db:"cancelled_1m" json:"cancelled_1m"`
	Unhandled        int64    `db:"unhandled" json:"unhandled"`
	Estimated        bool     `db:"estimated" json:"estimated"`
	LiveWorkers      int64    `db:"live_workers" json:"live_workers"`

	// FailureRate1m is failed / (succeeded + failed) over the last minute, -1 if none.
	FailureRate1m float64 `db:"-" json:"failure_rate_1m"`
}

// healthRow is one warning about the database under the queue (sqlapi.Health): what
// is wrong and what to do about it.
type healthRow struct {
	Check    string         `db:"check_name" json:"check"`
	Severity string         `db:"severity" json:"severity"`
	Message  string         `db:"message" json:"message"`
	Hint     string         `db:"hint" json:"hint"`
	Fields   map[string]any `db:"fields" json:"fields"`
}

// seriesRow is one row of sqlapi.DashboardJobSeries; grouped by 'all', queue and
// kind are NULL and there is one row per bucket.
type seriesRow struct {
	bucket
	Queue *string `db:"queue"`
	Kind  *string `db:"kind"`
}

// rangeLink is a link of a range switch: the page with another range, the rest of
// its query kept.
type rangeLink struct {
	chartRange
	Href string
	On   bool
}

// chartsData is the overview's time-range charts: throughput, failure rate, and
// wait and run percentiles over Range, for Queue and Kind when chosen, each with its
// sample size (n) in its legend and per bucket in its tooltips.
type chartsData struct {
	Range      chartRange  `json:"range"`
	Queue      string      `json:"queue,omitempty"`
	Kind       string      `json:"kind,omitempty"`
	Buckets    []bucket    `json:"buckets"`
	Throughput chart       `json:"throughput"`
	Failures   chart       `json:"failures"`
	Wait       chart       `json:"wait"`
	Run        chart       `json:"run"`
	Ranges     []rangeLink `json:"-"`
	Queues     []string    `json:"-"` // the queue selector's choices
	Kinds      []string    `json:"-"` // the kind selector's: kinds that ended over typicalSince
}

// runningJob is one of the longest-running jobs (sqlapi.DashboardRunningOldest).
type runningJob struct {
	jobRow
	RunningSecs float64 `json:"running_secs"`
}

type overviewData struct {
	Health    []healthRow     `json:"health"`
	Queues    []queueRow      `json:"queues"`
	Totals    queueRow        `json:"totals"`
	Charts    chartsData      `json:"charts"`
	TopErrors []errorGroupRow `json:"top_errors"`
	Running   []runningJob    `json:"longest_running"`
}

// overviewSection is one of a page's reads (the overview's, a queue's; readLanes):
// its name in a problem line, and the read, on the connection of its lane.
type overviewSection struct {
	name string
	read func(context.Context, queryer) error
}

// overview is the front page: the database's health warnings, queues, the
// time-range charts, the top failing groups of the last hour and the
// longest-running jobs. Its reads go in two lanes at once, each lane one read after
// another on one connection of the pool: a new connection's first statements pay
// for filling its caches (plans, catalogs), which reads sharing one pay once, so
// the page costs the server some 15% less than with a connection a read, no slower
// on two cores, and leaves the pool's other connections to other pages
// (docs/benchmarks-log.md, "2026-11-27 — overview at 5M jobs"). The lanes cost
// about the same: queue_stats with the failing groups, and health with the charts
// and the longest-running jobs. The charts and the error groups read the per-minute
// rollups (74_rollups.sql), never the jobs table at large, so their cost does not
// grow with it; the kind selector's kinds are the Server's typical run times, read
// at most once a minute (typicalCache).
func (s *Server) overview(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	rg, err := pickRange(q.Get("range"), rangeNames(), "1h")
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err)
		return
	}
	ctx := r.Context()
	now := time.Now()
	d := overviewData{Charts: chartsData{Range: rg, Queue: q.Get("queue"), Kind: q.Get("kind")}}
	var series []seriesRow
	var typical *typicalRuns
	var running []jobRow
	lanes := [][]overviewSection{{
		{"queues", func(ctx context.Context, db queryer) (err error) {
			d.Queues, err = collect[queueRow](ctx, db, sqlapi.DashboardQueues)
			return err
		}},
		{"top failing groups", func(ctx context.Context, db queryer) (err error) {
			d.TopErrors, _, err = s.errorGroups(ctx, db, time.Hour, overviewGroupsShown)
			return err
		}},
		{"kinds", func(ctx context.Context, db queryer) (err error) {
			typical, err = s.typical.read(ctx, db)
			return err
		}},
	}, {
		{"health", func(ctx context.Context, db queryer) (err error) {
			d.Health, err = collect[healthRow](ctx, db, sqlapi.Health)
			return err
		}},
		{"charts", func(ctx context.Context, db queryer) (err error) {
			series, err = collect[seriesRow](ctx, db, sqlapi.DashboardJobSeries, interval(rg.Span), interval(rg.Bucket),
				nilIfEmpty(d.Charts.Queue), nilIfEmpty(d.Charts.Kind), "all")
			return err
		}},
		{"longest-running jobs", func(ctx context.Context, db queryer) (err error) {
			running, err = collect[jobRow](ctx, db, sqlapi.DashboardRunningOldest, overviewRunningShown)
			return err
		}},
	}}
	problems := s.readLanes(ctx, lanes)
	if d.Health == nil {
		d.Health = []healthRow{} // [] in JSON when healthy, not null
	}
	for i := range d.Queues {
		q := &d.Queues[i]
		q.FailureRate1m = -1
		if done := q.Succeeded1m + q.Failed1m; done > 0 {
			q.FailureRate1m = float64(q.Failed1m) / float64(done)
		}
		t := &d.Totals
		t.Queued += q.Queued
		t.Scheduled += q.Scheduled
		t.Running += q.Running
		t.Pending += q.Pending
		t.Waiting += q.Waiting
		t.Succeeded1m += q.Succeeded1m
		t.Failed1m += q.Failed1m
		t.Cancelled1m += q.Cancelled1m
		t.Estimated = t.Estimated || q.Estimated
	}
	for _, j := range running {
		rj := runningJob{jobRow: j}
		if j.StartedAt != nil {
			rj.RunningSecs = now.Sub(*j.StartedAt).Seconds()
		}
		d.Running = append(d.Running, rj)
	}
	if d.Running == nil {
		d.Running = []runningJob{}
	}
	if d.TopErrors == nil {
		d.TopErrors = []errorGroupRow{}
	}
	d.Charts.draw(series, now)
	var kinds []typicalRun
	if typical != nil {
		kinds = typical.all
	}
	d.Charts.choices(r.URL, d.Queues, kinds)
	s.render(w, r, "overview", "Overview", d, problems...)
}

// draw places the series' buckets on the range's axis, ending now, and draws the
// four charts.
func (c *chartsData) draw(rows []seriesRow, now time.Time) {
	c.Buckets = make([]bucket, 0, len(rows))
	for _, r := range rows {
		c.Buckets = append(c.Buckets, r.bucket)
	}
	a := axisFor(c.Range, now)
	c.Throughput = throughputRangeChart(a, c.Buckets)
	c.Failures = failureRangeChart(a, c.Buckets)
	c.Wait = latencyRangeChart(a, c.Buckets, "wait")
	c.Run = latencyRangeChart(a, c.Buckets, "run")
}

// choices fills the range links (page's query kept) and the selectors' options:
// every queue, and the kinds that ended over the last typicalSince, whatever the
// range (of the chosen queue, if one is), each list with the chosen value in it.
// The kinds come from the Server's typical run times, read at most once a minute
// (typicalCache): a kind's first ending may take that long to be offered.
func (c *chartsData) choices(page *url.URL, queues []queueRow, kinds []typicalRun) {
	for _, rg := range chartRanges {
		q := page.Query()
		q.Set("range", rg.Name)
		q.Del("format")
		c.Ranges = append(c.Ranges, rangeLink{chartRange: rg, Href: "/?" + q.Encode() + "#charts", On: rg.Name == c.Range.Name})
	}
	for _, q := range queues {
		c.Queues = append(c.Queues, q.Queue)
	}
	for _, k := range kinds {
		if (c.Queue == "" || k.Queue == c.Queue) && !slices.Contains(c.Kinds, k.Kind) {
			c.Kinds = append(c.Kinds, k.Kind)
		}
	}
	for _, chosen := range []struct {
		v    string
		list *[]string
	}{{c.Queue, &c.Queues}, {c.Kind, &c.Kinds}} {
		if chosen.v != "" && !slices.Contains(*chosen.list, chosen.v) {
			*chosen.list = append(*chosen.list, chosen.v)
		}
		slices.Sort(*chosen.list)
	}
}

// rangeNames are the names of every chart range.
func rangeNames() []string {
	names := make([]string, len(chartRanges))
	for i, r := range chartRanges {
		names[i] = r.Name
	}
	return names
}

// queryer is what sends the dashboard's statements: the pool, or one of its
// connections.
type queryer interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}

// collect runs sql and reads every row into a T by column name.
func collect[T any](ctx context.Context, db queryer, sql string, args ...any) ([]T, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByName[T])
}
