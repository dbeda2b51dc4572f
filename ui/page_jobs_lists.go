package ui

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgrun/pgrun/internal/sqlapi"
)

// The jobs lists that do not go newest first by id: running jobs oldest start
// first, queued jobs in claim order, a run's jobs with its map children; and the
// flags on running jobs.

const (
	// orderRunning lists running jobs, the one that started first first: the job that
	// has run for five hours is on the first page however many jobs the table holds.
	orderRunning = "running"
	// orderQueued lists queued jobs (due now or scheduled) in claim order: priority,
	// then run_at, then id, each queue as its claims take it (jobs_claim_idx), the
	// queues merged in that same order. Claim order rather than due time alone, because
	// it answers "what runs next" and needs no index beyond the claim's own.
	orderQueued = "queued"
	// keysetWindow is how many index entries one read of a running or queued list
	// covers when a filter (kind, args, error text...) may reject some: each queue
	// reads at most this many entries of its claim index, index only, and one job row
	// each is read for the first keysetWindow of them all (about 30 ms for six queues
	// from cache); without such a filter a read covers exactly the page.
	keysetWindow = 5_000
	// childStatesRead is how many children of each node of a run the run page counts
	// by state (DashboardRunChildStates): a map of 60,000 children costs that many
	// rows, and its done and failed counts come from the node's own counters.
	childStatesRead = 1_000
	// typicalSince is the span over which a kind's typical run time is taken.
	typicalSince = 24 * time.Hour
	// typicalMinRuns is how many runs of a queue and kind in typicalSince make their
	// p95 a fair bar: below it, one slow outlier would set it.
	typicalMinRuns = 20
	// typicalFresh is how long one read of the typical run times serves the pages:
	// over 24 hours they move little in a minute, and a read costs about 30 ms
	// beside 5 million jobs (the rollups of a day and the minutes not rolled up yet).
	typicalFresh = time.Minute
)

// order is the list f asks for: orderRunning or orderQueued for the state filter
// on running or on queued alone (other filters apply within it), "" otherwise
// (newest first by id, or by the parent or run index).
func (f jobFilter) order() string {
	if f.Parent > 0 || f.Run > 0 || f.ID > 0 || len(f.States) != 1 {
		return ""
	}
	switch f.States[0] {
	case orderRunning:
		return orderRunning
	case orderQueued:
		return orderQueued
	}
	return ""
}

// listCursor is a position in a running or queued list: the key of its last job.
// Its text (the "after" parameter) is "micros.id" for running (started_at in
// microseconds since 1970, UTC) and "priority.micros.id" for queued (run_at).
type listCursor struct {
	Priority int16
	At       time.Time
	ID       int64
}

// firstCursor is the position before every job of either list (a zero At is
// -infinity).
var firstCursor = listCursor{Priority: -32768}

func (c listCursor) text(order string) string {
	at := strconv.FormatInt(c.At.UnixMicro(), 10) + "." + strconv.FormatInt(c.ID, 10)
	if order == orderQueued {
		return strconv.Itoa(int(c.Priority)) + "." + at
	}
	return at
}

// parseCursor reads the "after" parameter of a list in order.
func parseCursor(order, s string) (listCursor, error) {
	bad := func() (listCursor, error) {
		return listCursor{}, fmt.Errorf("after %q is not a position of this list: follow its Next link, or leave it out "+
			"(it goes with the state filter on running, as micros.id, or on queued, as priority.micros.id)", s)
	}
	parts := strings.Split(s, ".")
	var c listCursor
	switch {
	case order == orderRunning && len(parts) == 2:
	case order == orderQueued && len(parts) == 3:
		p, err := strconv.ParseInt(parts[0], 10, 16)
		if err != nil {
			return bad()
		}
		c.Priority, parts = int16(p), parts[1:]
	default:
		return bad()
	}
	micros, err1 := strconv.ParseInt(parts[0], 10, 64)
	id, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err1 != nil || err2 != nil || id < 0 {
		return bad()
	}
	c.At, c.ID = time.UnixMicro(micros).UTC(), id
	return c, nil
}

// cursorOf is the position of row j in a list in order.
func cursorOf(order string, j jobRow) listCursor {
	if order == orderQueued {
		return listCursor{Priority: j.Priority, At: j.RunAt, ID: j.ID}
	}
	c := listCursor{ID: j.ID}
	if j.StartedAt != nil {
		c.At = *j.StartedAt
	}
	return c
}

// keysetRow is a row of sqlapi.JobsMatchingRunning or JobsMatchingQueued.
type keysetRow struct {
	jobRow
	Seen    int64 `db:"seen"`
	Matched bool  `db:"matched"`
}

// listKeyset reads the page of a running or queued list after f's cursor: windows
// of the list's index, until the page is full, the list is done or the time budget
// (jobsBudget) is spent; then Next says where the next page, or the search, goes on.
func (s *Server) listKeyset(ctx context.Context, f jobFilter, size int) (jobsPage, error) {
	order := f.order()
	p := jobsPage{Filter: f, Order: order, Indexed: true}
	cur := firstCursor
	if f.After != "" {
		var err error
		if cur, err = parseCursor(order, f.After); err != nil {
			return p, err
		}
	}
	// A filter of the state alone (and the queue, for queued) takes every entry: a
	// window of the page's size is the page.
	rest := f
	rest.States, rest.After = nil, ""
	if order == orderQueued {
		rest.Queue = ""
	}
	window := keysetWindow
	if !rest.HasFilter() {
		window = size
	}
	match := f.matchJSON()
	start := time.Now()
	var slowest time.Duration
	for {
		began := time.Now()
		at := pgtype.Timestamptz{Time: cur.At, Valid: true}
		if cur.At.IsZero() {
			at = pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
		}
		var rows []keysetRow
		var err error
		if order == orderRunning {
			rows, err = collect[keysetRow](ctx, s.pool, sqlapi.JobsMatchingRunning, match, at, cur.ID, window, size-len(p.Jobs))
		} else {
			rows, err = collect[keysetRow](ctx, s.pool, sqlapi.JobsMatchingQueued, match, nilIfEmpty(f.Queue),
				cur.Priority, at, cur.ID, window, size-len(p.Jobs))
		}
		if err != nil {
			return p, err
		}
		var seen int64
		for _, r := range rows {
			seen = r.Seen
			if r.Matched && len(p.Jobs) < size {
				p.Jobs = append(p.Jobs, r.jobRow)
			}
		}
		if len(p.Jobs) == size {
			p.Next = cursorOf(order, p.Jobs[size-1]).text(order)
			return p, nil
		}
		if seen < int64(window) {
			return p, nil // the list is done
		}
		// The window's last entry is the last row: the next window starts after it.
		cur = cursorOf(order, rows[len(rows)-1].jobRow)
		slowest = max(slowest, time.Since(began))
		if time.Since(start)+slowest > jobsBudget {
			p.Next, p.Stopped = cur.text(order), true
			return p, nil
		}
	}
}

// listRunTree reads a page of run f.Run's jobs, newest first: its nodes and their
// children (map children have a parent but no run_id), each by its index.
func (s *Server) listRunTree(ctx context.Context, f jobFilter, size int) (jobsPage, error) {
	p := jobsPage{Filter: f, Indexed: true}
	cursor := int64(1) << 62
	if f.Before > 0 {
		cursor = f.Before
	}
	rest := f
	rest.Run = 0 // the statement's own rule: nodes by run_id, children by parent
	rows, err := collect[jobRow](ctx, s.pool, sqlapi.JobsMatchingRunTree, cursor, f.Run, rest.matchJSON(), size)
	if err != nil {
		return p, err
	}
	p.Jobs = rows
	if len(rows) == size {
		p.Older = rows[len(rows)-1].ID
	}
	return p, nil
}

// RunningFor is how long a running job has run ("" for a job that is not running).
func (j jobRow) RunningFor() string {
	if j.Status != "running" || j.StartedAt == nil {
		return ""
	}
	return short(max(0, time.Since(*j.StartedAt)))
}

// jobFlag is a warning on a running job's row: Kind is its class (slow, slots),
// Label the badge, Why the tooltip.
type jobFlag struct {
	Kind  string `json:"kind"`
	Label string `json:"label"`
	Why   string `json:"why"`
}

// typicalRun is a row of sqlapi.DashboardTypicalRunTimes: run times in seconds.
type typicalRun struct {
	Queue string   `db:"queue"`
	Kind  string   `db:"kind"`
	N     int64    `db:"n"`
	P50   *float64 `db:"p50"`
	P95   *float64 `db:"p95"`
}

// queueSlots is a row of sqlapi.DashboardQueueSlots.
type queueSlots struct {
	Queue      string `db:"queue"`
	MaxRunning int64  `db:"max_running"`
	Running    int64  `db:"running"`
}

// flagRunning flags the running jobs among rows: "slow" when one has run longer
// than the p95 of its queue and kind over typicalSince (with at least typicalMinRuns
// runs there: pgrun.typical_run_times), "slots" when its queue runs as many jobs as
// its max_running allows, so that its due jobs wait for one of these. Nothing is
// read when no row is running.
func (s *Server) flagRunning(ctx context.Context, rows []jobRow) error {
	var queues []string
	for _, j := range rows {
		if j.Status == "running" && !slices.Contains(queues, j.Queue) {
			queues = append(queues, j.Queue)
		}
	}
	if len(queues) == 0 {
		return nil
	}
	slots, err := collect[queueSlots](ctx, s.pool, sqlapi.DashboardQueueSlots, queues)
	if err != nil {
		return err
	}
	full := map[string]queueSlots{}
	for _, q := range slots {
		if q.Running >= q.MaxRunning {
			full[q.Queue] = q
		}
	}
	typical, err := s.typical.read(ctx, s.pool)
	if err != nil {
		return err
	}
	p95 := typical.p95
	now := time.Now()
	for i := range rows {
		j := &rows[i]
		if j.Status != "running" || j.StartedAt == nil {
			continue
		}
		ran := now.Sub(*j.StartedAt)
		if t, ok := p95[[2]string{j.Queue, j.Kind}]; ok {
			if bar := time.Duration(*t.P95 * float64(time.Second)); ran > bar {
				j.Flags = append(j.Flags, jobFlag{Kind: "slow", Label: "slow",
					Why: fmt.Sprintf("running for %s: 95%% of the %s runs of %s in queue %s over the last %s took at most %s",
						short(ran), num(t.N), j.Kind, j.Queue, short(typicalSince), short(bar))})
			}
		}
		if q, ok := full[j.Queue]; ok {
			j.Flags = append(j.Flags, jobFlag{Kind: "slots", Label: "queue full",
				Why: fmt.Sprintf("queue %s runs %s jobs and its max_running is %s: it holds all its slots, "+
					"so its due jobs wait until one of these finishes", q.Queue, num(q.Running), num(q.MaxRunning))})
		}
	}
	return nil
}

// typicalRuns is one read of the typical run times (sqlapi.DashboardTypicalRunTimes
// over typicalSince).
type typicalRuns struct {
	all []typicalRun             // every queue and kind that ended, by queue and kind
	p95 map[[2]string]typicalRun // by queue and kind: those with a p95 to judge by (typicalMinRuns or more)
}

// typicalCache holds a Server's last read of the typical run times, at most
// typicalFresh old: the running lists' flags judge by it, and the overview's kind
// selector offers its kinds, so that neither page pays for the read more than once
// a minute.
type typicalCache struct {
	mu   sync.Mutex
	at   time.Time
	runs *typicalRuns
}

// read returns the cached runs, reading them again through db when they are stale;
// pages that ask meanwhile wait for that one read.
func (c *typicalCache) read(ctx context.Context, db queryer) (*typicalRuns, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runs != nil && time.Since(c.at) < typicalFresh {
		return c.runs, nil
	}
	rows, err := collect[typicalRun](ctx, db, sqlapi.DashboardTypicalRunTimes, typicalSince)
	if err != nil {
		return nil, err
	}
	runs := &typicalRuns{all: rows, p95: map[[2]string]typicalRun{}}
	for _, t := range rows {
		if t.N >= typicalMinRuns && t.P95 != nil {
			runs.p95[[2]string{t.Queue, t.Kind}] = t
		}
	}
	c.at, c.runs = time.Now(), runs
	return runs, nil
}
