package ui

import (
	"context"
	"html/template"
	"net/http"
	"net/url"
	"time"

	"github.com/pgrun/pgrun/internal/sqlapi"
)

const (
	// errorGroupsShown is how many groups the errors page lists, largest first: an
	// incident has a handful; past a hundred the rest is noise to a reader, and each
	// row draws a sparkline.
	errorGroupsShown = 100
	// overviewGroupsShown and overviewRunningShown are the overview's short lists:
	// the top failing groups of the last hour and the longest-running jobs.
	overviewGroupsShown  = 5
	overviewRunningShown = 5
)

// errorRanges are the ranges the errors page offers: an incident's hour, the day,
// the week the rollups keep.
var errorRanges = []string{"1h", "24h", "7d"}

// errorGroupRow is one group of failures (sqlapi.DashboardErrorGroups): the failed
// endings of a queue and kind whose messages normalise to the same text
// (pgrun.error_group: numbers, ids and quoted values folded), with a raw sample.
type errorGroupRow struct {
	Queue      string    `db:"queue" json:"queue"`
	Kind       string    `db:"kind" json:"kind"`
	ErrorGroup *string   `db:"error_group" json:"error_group"` // nil: failures without a message
	Sample     *string   `db:"sample" json:"sample"`
	N          int64     `db:"n" json:"n"`
	FirstSeen  time.Time `db:"first_seen" json:"first_seen"`
	LastSeen   time.Time `db:"last_seen" json:"last_seen"`
	// Spark is the count in each of 24 equal slices of the range, oldest first.
	Spark []int64 `db:"spark" json:"spark"`

	// Open is the jobs list filtered to this group's failed jobs, which "retry this
	// group" retries (the filter-wide action on the same filter); empty for a group
	// the filter cannot name (Label says which).
	Open      string        `db:"-" json:"open,omitempty"`
	Label     string        `db:"-" json:"-"`
	Sparkline template.HTML `db:"-" json:"-"`
}

// otherGroups is the group under which error_minutes counts a minute's failures past
// its most groups (pgrun.max_error_groups_a_minute): many groups, no one message.
const otherGroups = "<other groups>"

// Filter is the group as the jobs list's filter: the fields of its filter-wide
// retry.
func (g errorGroupRow) Filter() jobFilter {
	return jobFilter{Queue: g.Queue, Kind: g.Kind, States: []string{"failed"}, ErrorGroup: deref(g.ErrorGroup)}
}

// name fills the group's label and, when the bulk filter can name it (a message
// with a group of its own), its link.
func (g *errorGroupRow) name() {
	switch {
	case g.ErrorGroup == nil:
		g.Label = "(no error message)"
	case *g.ErrorGroup == otherGroups:
		g.Label = otherGroups
	default:
		g.Label = *g.ErrorGroup
		g.Open = "/jobs?" + url.Values{"queue": {g.Queue}, "kind": {g.Kind}, "state": {"failed"},
			"error_group": {*g.ErrorGroup}}.Encode()
	}
}

type errorsData struct {
	Range  chartRange      `json:"range"`
	Ranges []chartRange    `json:"-"`
	From   time.Time       `json:"from"`
	To     time.Time       `json:"to"`
	Groups []errorGroupRow `json:"groups"`
	// Total is the failures of the groups shown; Capped says more groups exist.
	Total  int64 `json:"total"`
	Capped bool  `json:"capped"`
}

// errorsPage is the errors page: the failures of the range grouped by queue, kind and
// normalised message, largest first, each with its burst as a sparkline, a link to
// its failed jobs and the filter-wide retry of them. It reads pgrun.error_groups,
// the per-minute rollups plus the minutes not rolled up yet, so its cost does not
// grow with the jobs table.
func (s *Server) errorsPage(w http.ResponseWriter, r *http.Request) {
	rg, err := pickRange(r.URL.Query().Get("range"), errorRanges, "1h")
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err)
		return
	}
	d := errorsData{Range: rg, Ranges: rangesNamed(errorRanges)}
	d.Groups, d.To, err = s.errorGroups(r.Context(), s.pool, rg.Span, errorGroupsShown)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	d.From = d.To.Add(-rg.Span)
	for _, g := range d.Groups {
		d.Total += g.N
	}
	d.Capped = len(d.Groups) == errorGroupsShown
	s.render(w, r, "errors", "Errors", d)
}

// errorGroups reads the largest groups of failures over the last span, with their
// links and sparklines, and the time the window ends.
func (s *Server) errorGroups(ctx context.Context, db queryer, span time.Duration, limit int) ([]errorGroupRow, time.Time, error) {
	to := time.Now()
	groups, err := collect[errorGroupRow](ctx, db, sqlapi.DashboardErrorGroups, interval(span), limit)
	if err != nil {
		return nil, to, err
	}
	if groups == nil {
		groups = []errorGroupRow{} // [] in JSON, not null
	}
	for i := range groups {
		g := &groups[i]
		g.name()
		g.Sparkline = sparkline(g.Spark, to.Add(-span), to)
	}
	return groups, to, nil
}

// rangesNamed returns the chart ranges named, in that order.
func rangesNamed(names []string) []chartRange {
	var out []chartRange
	for _, n := range names {
		if rg, err := pickRange(n, names, n); err == nil {
			out = append(out, rg)
		}
	}
	return out
}
