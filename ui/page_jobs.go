package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pgrun/pgrun/internal/sqlapi"
)

const (
	// jobsPageSize is how many jobs a page of the list shows.
	jobsPageSize = 50
	// jobsWindow is how many ids one read of the list covers: a primary-key range
	// scan of at most this many rows, 4-10 ms from cache on a 2-core machine (and
	// up to about 200 ms when the pages must come from disk).
	jobsWindow = 20_000
	// jobsBudget is how long one page may go on reading older windows when the
	// filters match few jobs; a window that would likely end past it is not
	// started, and the page offers to search further back instead.
	jobsBudget = 100 * time.Millisecond
)

// jobRow is a line of a jobs list (sqlapi dashboardJobColumns).
type jobRow struct {
	ID              int64      `db:"id" json:"id"`
	Kind            string     `db:"kind" json:"kind"`
	Queue           string     `db:"queue" json:"queue"`
	Status          string     `db:"status" json:"status"`
	Priority        int16      `db:"priority" json:"priority"`
	Attempt         int        `db:"attempt" json:"attempt"`
	MaxAttempts     int        `db:"max_attempts" json:"max_attempts"`
	CreatedAt       time.Time  `db:"created_at" json:"created_at"`
	RunAt           time.Time  `db:"run_at" json:"run_at"`
	StartedAt       *time.Time `db:"started_at" json:"started_at"`
	FinishedAt      *time.Time `db:"finished_at" json:"finished_at"`
	ProgressCurrent int64      `db:"progress_current" json:"progress_current"`
	ProgressTotal   *int64     `db:"progress_total" json:"progress_total"`
	ParentID        *int64     `db:"parent_id" json:"parent_id"`
	RunID           *int64     `db:"run_id" json:"run_id"`
	Node            *string    `db:"node" json:"node"`
	ClaimedBy       *string    `db:"claimed_by" json:"claimed_by"`
	ErrorClass      *string    `db:"error_class" json:"error_class"`
	ErrorMessage    *string    `db:"error_message" json:"error_message"`
	// Flags are what a running job's row warns of (flagRunning), with why.
	Flags []jobFlag `db:"-" json:"flags,omitempty"`
}

// jobFilter is the jobs page's query string.
type jobFilter struct {
	Queue    string    `json:"queue,omitempty"`
	Kind     string    `json:"kind,omitempty"`
	States   []string  `json:"states,omitempty"`
	From     time.Time `json:"from,omitzero"`
	To       time.Time `json:"to,omitzero"`
	ID       int64     `json:"id,omitempty"`
	Parent   int64     `json:"parent,omitempty"`
	Run      int64     `json:"run,omitempty"`
	Arg      string    `json:"arg,omitempty"` // "key" or "key=value"
	Error    string    `json:"error,omitempty"`
	Before   int64     `json:"before,omitempty"` // the keyset cursor: ids below it
	FromText string    `json:"-"`
	ToText   string    `json:"-"`

	// After is the cursor of the running and queued lists (listCursor): the jobs
	// after it in the list's order.
	After string `json:"after,omitempty"`

	// ErrorGroup is a group of the errors page: pgrun.error_group of the message.
	ErrorGroup string `json:"error_group,omitempty"`
}

// timeLayouts are what the time range fields accept, read as UTC unless they say.
var timeLayouts = []string{time.RFC3339, "2006-01-02T15:04", "2006-01-02T15:04:05", "2006-01-02 15:04", "2006-01-02"}

// parseJobFilter reads a jobs filter from q; a bad value is an error naming it.
func parseJobFilter(q url.Values) (jobFilter, error) {
	f := jobFilter{Queue: strings.TrimSpace(q.Get("queue")), Kind: strings.TrimSpace(q.Get("kind")),
		Arg: strings.TrimSpace(q.Get("arg")), Error: strings.TrimSpace(q.Get("error")),
		FromText: strings.TrimSpace(q.Get("from")), ToText: strings.TrimSpace(q.Get("to"))}
	f.ErrorGroup = strings.TrimSpace(q.Get("error_group"))
	for _, st := range q["state"] {
		for _, one := range strings.Split(st, ",") {
			switch one = strings.TrimSpace(one); {
			case one == "":
			case slices.Contains(allStates, one):
				if !slices.Contains(f.States, one) {
					f.States = append(f.States, one)
				}
			default:
				return f, fmt.Errorf("state %q is not a job state: use one of %s", one, strings.Join(allStates, ", "))
			}
		}
	}
	for _, p := range []struct {
		key string
		dst *int64
	}{{"id", &f.ID}, {"parent", &f.Parent}, {"run", &f.Run}, {"before", &f.Before}} {
		v := strings.TrimSpace(q.Get(p.key))
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return f, fmt.Errorf("%s %q is not a job id: use a positive whole number", p.key, v)
		}
		*p.dst = n
	}
	if last := q.Get("last"); last != "" && f.FromText == "" {
		d, err := time.ParseDuration(last)
		if err != nil || d <= 0 {
			return f, fmt.Errorf("last %q is not a duration: use 15m, 1h or 24h", last)
		}
		f.From = time.Now().Add(-d)
	}
	for _, t := range []struct {
		text string
		dst  *time.Time
		name string
	}{{f.FromText, &f.From, "from"}, {f.ToText, &f.To, "to"}} {
		if t.text == "" {
			continue
		}
		var err error
		for _, layout := range timeLayouts {
			var v time.Time
			if v, err = time.ParseInLocation(layout, t.text, time.UTC); err == nil {
				*t.dst = v
				break
			}
		}
		if err != nil {
			return f, fmt.Errorf("%s %q is not a time: use 2026-11-24T10:00 (UTC) or RFC 3339", t.name, t.text)
		}
	}
	if f.After = strings.TrimSpace(q.Get("after")); f.After != "" {
		if _, err := parseCursor(f.order(), f.After); err != nil {
			return f, err
		}
	}
	return f, nil
}

// match is the filter as pgrun.job_matches reads it (52_bulk.sql's keys): the rule
// of the list and of the filter-wide actions alike. The cursor (Before) is paging,
// not filtering, and is left out, as is After.
func (f jobFilter) match() map[string]any {
	m := map[string]any{}
	put := func(key, v string) {
		if v != "" {
			m[key] = v
		}
	}
	put("queue", f.Queue)
	put("kind", f.Kind)
	put("error", f.Error)
	put("error_group", f.ErrorGroup)
	if len(f.States) > 0 {
		m["states"] = f.States
	}
	if f.Arg != "" {
		k, v, hasValue := strings.Cut(f.Arg, "=")
		m["arg"] = k
		if hasValue {
			m["arg_value"] = v
		}
	}
	if !f.From.IsZero() {
		m["created_from"] = f.From.UTC().Format(time.RFC3339Nano)
	}
	if !f.To.IsZero() {
		m["created_to"] = f.To.UTC().Format(time.RFC3339Nano)
	}
	if f.ID > 0 {
		m["id_min"], m["id_max"] = f.ID, f.ID
	}
	if f.Parent > 0 {
		m["parent"] = f.Parent
	}
	if f.Run > 0 {
		m["run"] = f.Run
	}
	return m
}

// matchJSON is match as the jsonb parameter of the sqlapi.JobsMatching statements.
func (f jobFilter) matchJSON() string {
	b, _ := json.Marshal(f.match()) // strings, ints and a []string: never fails
	return string(b)
}

// HasFilter reports whether f filters at all: the filter-wide actions are offered
// only then, so that none acts on every job of the database by a slip.
func (f jobFilter) HasFilter() bool { return len(f.match()) > 0 }

// Fields are f's fields as the form of a filter-wide action posts them: the time
// range as absolute times (a "last 1h" would move between the count and the
// action), without the page's cursor.
func (f jobFilter) Fields() [][2]string {
	var out [][2]string
	add := func(k, v string) {
		if v != "" {
			out = append(out, [2]string{k, v})
		}
	}
	add("queue", f.Queue)
	add("kind", f.Kind)
	for _, st := range f.States {
		add("state", st)
	}
	if !f.From.IsZero() {
		add("from", f.From.UTC().Format(time.RFC3339Nano))
	}
	if !f.To.IsZero() {
		add("to", f.To.UTC().Format(time.RFC3339Nano))
	}
	for _, p := range []struct {
		key string
		v   int64
	}{{"id", f.ID}, {"parent", f.Parent}, {"run", f.Run}} {
		if p.v > 0 {
			add(p.key, strconv.FormatInt(p.v, 10))
		}
	}
	add("arg", f.Arg)
	add("error", f.Error)
	add("error_group", f.ErrorGroup)
	return out
}

// Describe says in words what f selects: "queue emails, kind echo, state failed,
// error text "421"" ("every job" for no filter).
func (f jobFilter) Describe() string {
	var what []string
	add := func(label, v string) {
		if v != "" {
			what = append(what, label+" "+v)
		}
	}
	add("queue", f.Queue)
	add("kind", f.Kind)
	if len(f.States) > 0 {
		add("state", strings.Join(f.States, " or "))
	}
	if !f.From.IsZero() {
		add("enqueued from", f.From.UTC().Format("2006-01-02 15:04:05 UTC"))
	}
	if !f.To.IsZero() {
		add("enqueued before", f.To.UTC().Format("2006-01-02 15:04:05 UTC"))
	}
	if f.ID > 0 {
		add("id", strconv.FormatInt(f.ID, 10))
	}
	if f.Parent > 0 {
		add("parent", strconv.FormatInt(f.Parent, 10))
	}
	if f.Run > 0 {
		add("run", strconv.FormatInt(f.Run, 10))
	}
	if f.Arg != "" {
		add("args", strconv.Quote(f.Arg))
	}
	if f.Error != "" {
		add("error text", strconv.Quote(f.Error))
	}
	if f.ErrorGroup != "" {
		add("error group", strconv.Quote(f.ErrorGroup))
	}
	if len(what) == 0 {
		return "every job"
	}
	return strings.Join(what, ", ")
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// jobsPage is one page of a jobs list.
type jobsPage struct {
	Filter jobFilter `json:"filter"`
	Jobs   []jobRow  `json:"jobs"`
	// Order is the list's order: "" newest first by id; orderRunning, running jobs
	// oldest start first; orderQueued, queued jobs in claim order (listKeyset).
	Order string `json:"order,omitempty"`
	// Older is the cursor of the next page (ids below it), 0 at the end.
	Older int64 `json:"older,omitempty"`
	// SearchedTo is set when the page ran out of time before it filled: no match
	// among ids at or above it (down to the cursor); Older continues from there.
	SearchedTo int64 `json:"searched_to,omitempty"`
	// Next is the cursor of the next page of a running or queued list ("after"), ""
	// at the end; with Stopped, the page ran out of time before it filled, and Next
	// continues the search from where it stopped.
	Next    string `json:"next,omitempty"`
	Stopped bool   `json:"stopped,omitempty"`
	// Indexed says the page went by an index that holds only its matches (parent,
	// run, failed, running, queued), so it never reads unrelated history.
	Indexed bool `json:"indexed"`
}

// listJobs reads the page of f by the narrowest index that answers it, by the
// filter rule (pgrun.job_matches) of the filter-wide actions: what the list shows is
// what they touch. (The read-only role may call it too: docs/ui.md.)
func (s *Server) listJobs(ctx context.Context, f jobFilter, size int) (jobsPage, error) {
	switch {
	case f.Run > 0 && f.Parent == 0:
		return s.listRunTree(ctx, f, size)
	case f.order() != "":
		return s.listKeyset(ctx, f, size)
	}
	p := jobsPage{Filter: f}
	var minID, maxID *int64
	if err := s.pool.QueryRow(ctx, sqlapi.DashboardJobIDBounds).Scan(&minID, &maxID); err != nil {
		return p, err
	}
	if minID == nil {
		return p, nil // no jobs at all
	}
	cursor := *maxID + 1
	if f.Before > 0 {
		cursor = min(cursor, f.Before)
	}
	low := *minID
	if f.ID > 0 {
		cursor, low = min(cursor, f.ID+1), max(low, f.ID)
	}
	if !f.To.IsZero() {
		hi, err := s.idAt(ctx, f.To, *minID, *maxID)
		if err != nil {
			return p, err
		}
		cursor = min(cursor, hi)
	}
	if !f.From.IsZero() {
		lo, err := s.idAt(ctx, f.From, *minID, *maxID)
		if err != nil {
			return p, err
		}
		low = max(low, lo)
	}
	var stmt string
	var second int64
	switch {
	case f.Parent > 0:
		stmt, second, p.Indexed = sqlapi.JobsMatchingByParent, f.Parent, true
	case len(f.States) == 1 && f.States[0] == "failed":
		stmt, second, p.Indexed = sqlapi.JobsMatchingFailed, low, true
	}
	if p.Indexed {
		if cursor <= low && stmt == sqlapi.JobsMatchingFailed {
			return p, nil
		}
		rows, err := collect[jobRow](ctx, s.pool, stmt, cursor, second, f.matchJSON(), size)
		if err != nil {
			return p, err
		}
		p.Jobs = rows
		if len(rows) == size {
			p.Older = rows[len(rows)-1].ID
		}
		return p, nil
	}
	// Windows of ids, newest first, until the page is full, the range is done or
	// the time budget is spent.
	start := time.Now()
	var slowest time.Duration
	for cursor > low {
		lo := max(low, cursor-jobsWindow)
		began := time.Now()
		rows, err := collect[jobRow](ctx, s.pool, sqlapi.JobsMatching, cursor, lo, f.matchJSON(), size-len(p.Jobs))
		if err != nil {
			return p, err
		}
		p.Jobs = append(p.Jobs, rows...)
		if len(p.Jobs) == size {
			p.Older = p.Jobs[len(p.Jobs)-1].ID
			return p, nil
		}
		cursor = lo
		slowest = max(slowest, time.Since(began))
		if cursor > low && time.Since(start)+slowest > jobsBudget {
			p.SearchedTo, p.Older = cursor, cursor
			return p, nil
		}
	}
	return p, nil
}

// idAt finds the first job id enqueued at or after t, by binary search over ids
// (ids grow with enqueue time; a job whose transaction stayed open across t may
// land on the other side). Each step is one primary-key probe: about 23 for 5
// million jobs. It returns maxID + 1 when every job is older.
func (s *Server) idAt(ctx context.Context, t time.Time, minID, maxID int64) (int64, error) {
	lo, hi := minID, maxID+1
	for lo < hi {
		mid := lo + (hi-lo)/2
		var id int64
		var created time.Time
		err := s.pool.QueryRow(ctx, sqlapi.DashboardJobProbe, mid).Scan(&id, &created)
		if err != nil && !isNoRows(err) {
			return 0, err
		}
		switch {
		case err != nil || id >= hi: // no job in [mid, hi): any cut there is the same
			hi = mid
		case created.Before(t):
			lo = id + 1
		default:
			hi = id
		}
	}
	return lo, nil
}

// jobs is the jobs page: filters, a keyset-paged list, bulk actions.
func (s *Server) jobs(w http.ResponseWriter, r *http.Request) {
	f, err := parseJobFilter(r.URL.Query())
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err)
		return
	}
	p, err := s.listJobs(r.Context(), f, jobsPageSize)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	var problems []string
	if err := s.flagRunning(r.Context(), p.Jobs); err != nil {
		problems = append(problems, problem("flags on running jobs", err))
	}
	s.render(w, r, "jobs", "Jobs", p, problems...)
}
