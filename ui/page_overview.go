package ui

import (
	"context"
	"html/template"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgrun/pgrun/internal/sqlapi"
)

const (
	// throughputReadCap is how many finished rows each minute of the throughput
	// chart reads at most; a busier minute is scaled from the part those rows cover.
	throughputReadCap = 2000
	// latencySample is how many of the last finished jobs the percentiles cover.
	latencySample = 2000
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

	Latency *latencyRow `db:"-" json:"latency,omitempty"`
	// FailureRate1m is failed / (succeeded + failed) over the last minute, -1 if none.
	FailureRate1m float64 `db:"-" json:"failure_rate_1m"`
}

// latencyRow holds one queue's percentiles (sqlapi.DashboardLatency): p50, p95, p99.
type latencyRow struct {
	Queue string    `db:"queue" json:"queue"`
	N     int64     `db:"n" json:"n"`
	Wait  []float64 `db:"wait" json:"wait_p50_p95_p99"`
	Run   []float64 `db:"run" json:"run_p50_p95_p99"`
}

// minuteRow is one (minute, queue, status) count of sqlapi.DashboardThroughput.
type minuteRow struct {
	Minute time.Time  `db:"minute"`
	Queue  *string    `db:"queue"`
	Status *string    `db:"status"`
	N      int64      `db:"n"`
	Seen   *int64     `db:"seen"`
	LastAt *time.Time `db:"last_at"`
}

// minute is one bar of the throughput chart, over all queues.
type minute struct {
	At        time.Time `json:"at"`
	Succeeded float64   `json:"succeeded"`
	Failed    float64   `json:"failed"`
	Cancelled float64   `json:"cancelled"`
	Estimated bool      `json:"estimated,omitempty"`
	Partial   bool      `json:"partial,omitempty"` // the current minute, not over yet
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

type overviewData struct {
	Health     []healthRow   `json:"health"`
	Queues     []queueRow    `json:"queues"`
	Minutes    []minute      `json:"minutes"`
	Latency    []latencyRow  `json:"latency"`
	Throughput template.HTML `json:"-"`
	FailRate   template.HTML `json:"-"`
	Totals     queueRow      `json:"totals"`
}

// overview is the front page: the database's health warnings, queues, throughput,
// percentiles. Its four reads run at once, so the page takes as long as the slowest.
func (s *Server) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	var d overviewData
	var problems []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	run := func(section string, fn func(context.Context) error) {
		wg.Go(func() {
			if err := fn(ctx); err != nil {
				mu.Lock()
				problems = append(problems, problem(section, err))
				mu.Unlock()
			}
		})
	}
	run("health", func(ctx context.Context) (err error) {
		d.Health, err = collect[healthRow](ctx, s.pool, sqlapi.Health)
		return err
	})
	run("queues", func(ctx context.Context) (err error) {
		d.Queues, err = collect[queueRow](ctx, s.pool, sqlapi.DashboardQueues)
		return err
	})
	run("throughput", func(ctx context.Context) (err error) {
		d.Minutes, err = s.throughput(ctx)
		return err
	})
	run("latency", func(ctx context.Context) (err error) {
		d.Latency, err = collect[latencyRow](ctx, s.pool, sqlapi.DashboardLatency, latencySample)
		return err
	})
	wg.Wait()
	sort.Strings(problems)
	if d.Health == nil {
		d.Health = []healthRow{} // [] in JSON when healthy, not null
	}

	lat := map[string]*latencyRow{}
	for i := range d.Latency {
		lat[d.Latency[i].Queue] = &d.Latency[i]
	}
	for i := range d.Queues {
		q := &d.Queues[i]
		q.Latency = lat[q.Queue]
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
	d.Throughput = throughputChart(d.Minutes)
	d.FailRate = failureChart(d.Minutes)
	s.render(w, r, "overview", "Overview", d, problems...)
}

// throughput reads the last 16 minutes' endings and scales up a minute whose rows
// were capped: by the share of the minute (or, for the current one, of the time
// elapsed in it) that the rows read cover.
func (s *Server) throughput(ctx context.Context) ([]minute, error) {
	list, err := collect[minuteRow](ctx, s.pool, sqlapi.DashboardThroughput, throughputReadCap)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	start := now.Truncate(time.Minute).Add(-15 * time.Minute)
	out := make([]minute, 16)
	for i := range out {
		out[i].At = start.Add(time.Duration(i) * time.Minute)
		out[i].Partial = i == 15
	}
	for _, m := range list {
		i := int(m.Minute.Sub(start) / time.Minute)
		if i < 0 || i >= len(out) || m.Status == nil {
			continue
		}
		scale := 1.0
		if m.Seen != nil && *m.Seen >= throughputReadCap && m.LastAt != nil {
			span := time.Minute
			if out[i].Partial {
				span = now.Sub(m.Minute)
			}
			if covered := m.LastAt.Sub(m.Minute); covered > 0 && covered < span {
				scale = float64(span) / float64(covered)
				out[i].Estimated = true
			}
		}
		n := float64(m.N) * scale
		switch *m.Status {
		case "succeeded":
			out[i].Succeeded += n
		case "failed":
			out[i].Failed += n
		case "cancelled":
			out[i].Cancelled += n
		}
	}
	return out, nil
}

// collect runs sql and reads every row into a T by column name.
func collect[T any](ctx context.Context, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, sql string, args ...any) ([]T, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByName[T])
}
