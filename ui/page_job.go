package ui

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/sqlapi"
)

// childrenShown is how many children the job page lists (newest first); their
// counts by state cover all of them.
const childrenShown = 100

// timelineShown bounds the timeline a page renders: a handler that emits an event
// per item can leave hundreds of thousands.
const timelineShown = 2000

// timelineEntry is one line of pgrun.job_timeline.
type timelineEntry struct {
	At      time.Time       `db:"at" json:"at"`
	Event   string          `db:"event" json:"event"`
	Level   string          `db:"level" json:"level"`
	Attempt *int            `db:"attempt" json:"attempt"`
	Message *string         `db:"message" json:"message"`
	Fields  json.RawMessage `db:"fields" json:"fields"`
}

// stateCount is a number of jobs in one state.
type stateCount struct {
	Status string `db:"status" json:"status"`
	N      int64  `db:"n" json:"n"`
}

// jobError is the parts of a job's error the page shows apart.
type jobError struct {
	Class   string `json:"class"`
	Message string `json:"message"`
	Stack   string `json:"stack"`
}

type jobData struct {
	Job      *pgrun.Job      `json:"job"`
	Error    *jobError       `json:"error,omitempty"`
	Timeline []timelineEntry `json:"timeline"`
	// TimelineCut says the timeline has more than timelineShown entries.
	TimelineCut bool         `json:"timeline_cut,omitempty"`
	ChildStates []stateCount `json:"child_states"`
	Children    []jobRow     `json:"children"`
	ChildTotal  int64        `json:"child_total"`
	Cancellable bool         `json:"cancellable"`
	Retryable   bool         `json:"retryable"`
	Progress    int64        `json:"progress_pct"` // -1: no total
}

// job is one job's page: fields, args, result, error and stack, timeline, progress
// and children.
func (s *Server) job(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		s.fail(w, r, http.StatusBadRequest, fmt.Errorf("job id %q is not valid: use a positive whole number", r.PathValue("id")))
		return
	}
	ctx := r.Context()
	j, err := s.client.GetJob(ctx, id)
	if errors.Is(err, pgrun.ErrNotFound) {
		s.fail(w, r, http.StatusNotFound, fmt.Errorf("job %d does not exist (or was pruned)", id))
		return
	}
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	d := jobData{Job: j, Progress: progressPct(j.ProgressCurrent, j.ProgressTotal)}
	switch j.Status {
	case pgrun.StatusPending, pgrun.StatusQueued, pgrun.StatusRunning, pgrun.StatusWaiting:
		d.Cancellable = true
	case pgrun.StatusFailed, pgrun.StatusCancelled:
		d.Retryable = true
	}
	if len(j.Error) > 0 && string(j.Error) != "null" {
		var e jobError
		if json.Unmarshal(j.Error, &e) == nil {
			d.Error = &e
		}
	}
	var problems []string
	if d.Timeline, err = collect[timelineEntry](ctx, s.pool, sqlapi.DashboardTimeline, id, timelineShown+1); err != nil {
		problems = append(problems, problem("timeline", err))
	}
	if len(d.Timeline) > timelineShown {
		d.Timeline, d.TimelineCut = d.Timeline[:timelineShown], true
	}
	if d.ChildStates, err = collect[stateCount](ctx, s.pool, sqlapi.DashboardChildStates, id); err != nil {
		problems = append(problems, problem("children", err))
	}
	for _, c := range d.ChildStates {
		d.ChildTotal += c.N
	}
	if d.ChildTotal > 0 {
		f := jobFilter{Parent: id}
		args := append(append([]any{int64(1) << 62, id}, f.args()...), childrenShown)
		if d.Children, err = collect[jobRow](ctx, s.pool, sqlapi.DashboardJobsByParent, args...); err != nil {
			problems = append(problems, problem("children", err))
		}
	}
	s.render(w, r, "job", fmt.Sprintf("Job %d", id), d, problems...)
}

func isNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }
