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

// stepsShown bounds the steps a page lists; a job records at most 10,000
// (pgrun.max_steps).
const stepsShown = 2000

// stepEntry is one call a durable handler recorded (job_steps), read from its
// pgrun.job_timeline entry: the step's name, kind (step, sleep, event, spawn or
// job), position, when and under which attempt it was recorded, and its result's
// size in bytes (nil for none), never the result itself. By kind: a sleep's end,
// the awaited event's name (known when the job parked for it), the spawned or
// awaited job and its status, and whether an await timed out.
type stepEntry struct {
	At          time.Time  `json:"at"`
	Name        string     `json:"name"`
	Kind        string     `json:"kind"`
	Position    int        `json:"position"`
	Attempt     *int       `json:"attempt"`
	ResultBytes *int64     `json:"result_bytes"`
	Until       *time.Time `json:"until,omitempty"`
	Event       string     `json:"event,omitempty"`
	Job         *int64     `json:"job,omitempty"`
	Status      string     `json:"status,omitempty"`
	TimedOut    bool       `json:"timed_out,omitempty"`
}

// parkedLine is what a parked job waits for (pgrun.job_parked, read from the
// job.parked entry of its timeline): an event, a job or the end of a sleep, until
// when, since when and in which step; TimedOut once the wait ran out (the job is
// queued to resume).
type parkedLine struct {
	WaitingFor string    `json:"waiting_for"` // event, job or sleep
	Event      string    `json:"event,omitempty"`
	Job        *int64    `json:"job,omitempty"`
	Until      time.Time `json:"until"`
	Since      time.Time `json:"since"`
	Step       string    `json:"step"`
	TimedOut   bool      `json:"timed_out"`
}

// stepsOf splits the entries of DashboardSteps into the recorded steps and the
// parked line (nil when the job is not parked). An entry whose fields do not read
// as a step (a handler may emit an event of any name) is left out.
func stepsOf(entries []timelineEntry) (steps []stepEntry, parked *parkedLine) {
	for _, e := range entries {
		if e.Event == sqlapi.TimelineParkedEvent {
			var p parkedLine
			if json.Unmarshal(e.Fields, &p) == nil && p.WaitingFor != "" {
				p.Since = e.At
				parked = &p
			}
			continue
		}
		var f struct {
			Step        string     `json:"step"`
			Kind        string     `json:"kind"`
			Position    *int       `json:"position"`
			ResultBytes *int64     `json:"result_bytes"`
			Until       *time.Time `json:"until"`
			Event       string     `json:"event"`
			Job         *int64     `json:"job"`
			Status      string     `json:"status"`
			TimedOut    bool       `json:"timed_out"`
		}
		if json.Unmarshal(e.Fields, &f) != nil || f.Step == "" || f.Position == nil {
			continue
		}
		steps = append(steps, stepEntry{At: e.At, Name: f.Step, Kind: f.Kind, Position: *f.Position, Attempt: e.Attempt,
			ResultBytes: f.ResultBytes, Until: f.Until, Event: f.Event, Job: f.Job, Status: f.Status, TimedOut: f.TimedOut})
	}
	return steps, parked
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
	TimelineCut bool `json:"timeline_cut,omitempty"`
	// Steps are the calls a durable handler recorded, oldest first; StepsCut says
	// there are more than stepsShown.
	Steps    []stepEntry `json:"steps"`
	StepsCut bool        `json:"steps_cut,omitempty"`
	// Parked says what the job waits for while a durable call parked it.
	Parked      *parkedLine  `json:"parked,omitempty"`
	ChildStates []stateCount `json:"child_states"`
	Children    []jobRow     `json:"children"`
	ChildTotal  int64        `json:"child_total"`
	Cancellable bool         `json:"cancellable"`
	Retryable   bool         `json:"retryable"`
	Progress    int64        `json:"progress_pct"` // -1: no total
	// WhyNotRunning says, for a queued or pending job, what holds it now
	// (pgrun.job_blocker): its sequence, its due time, its queue paused or full, a
	// key at its limit, no worker for it; or that nothing but the jobs ahead of it does.
	WhyNotRunning string `json:"why_not_running,omitempty"`
}

// nothingHolds is the job page's answer when job_blocker finds nothing holding a
// queued job.
const nothingHolds = "nothing holds it: it waits only for the jobs ahead of it in its queue"

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
	// The error of the job's outcome (pgrun.outcome_error): a job that failed and then
	// succeeded keeps the old error on its row; its timeline tells that story.
	if len(j.Error) > 0 && string(j.Error) != "null" && j.Status != pgrun.StatusSucceeded && j.Status != pgrun.StatusSkipped {
		var e jobError
		if json.Unmarshal(j.Error, &e) == nil {
			d.Error = &e
		}
	}
	var problems []string
	if j.Status == pgrun.StatusQueued || j.Status == pgrun.StatusPending {
		why, err := s.client.JobBlocker(ctx, id)
		switch {
		case errors.Is(err, pgrun.ErrNotFound): // deleted since it was read: nothing holds it
		case err != nil:
			problems = append(problems, problem("why not running", err))
		case why == "":
			d.WhyNotRunning = nothingHolds
		default:
			d.WhyNotRunning = why
		}
	}
	if d.Timeline, err = collect[timelineEntry](ctx, s.pool, sqlapi.DashboardTimeline, id, timelineShown+1); err != nil {
		problems = append(problems, problem("timeline", err))
	}
	if len(d.Timeline) > timelineShown {
		d.Timeline, d.TimelineCut = d.Timeline[:timelineShown], true
	}
	// The parked entry comes first; one step more than shown tells of the rest.
	steps, err := collect[timelineEntry](ctx, s.pool, sqlapi.DashboardSteps, id, sqlapi.TimelineStepEvents,
		sqlapi.TimelineParkedEvent, stepsShown+2)
	if err != nil {
		problems = append(problems, problem("steps", err))
	}
	d.Steps, d.Parked = stepsOf(steps)
	if len(d.Steps) > stepsShown {
		d.Steps, d.StepsCut = d.Steps[:stepsShown], true
	}
	if d.Steps == nil {
		d.Steps = []stepEntry{}
	}
	if d.ChildStates, err = collect[stateCount](ctx, s.pool, sqlapi.DashboardChildStates, id); err != nil {
		problems = append(problems, problem("children", err))
	}
	for _, c := range d.ChildStates {
		d.ChildTotal += c.N
	}
	if d.ChildTotal > 0 {
		f := jobFilter{Parent: id}
		if d.Children, err = collect[jobRow](ctx, s.pool, sqlapi.JobsMatchingByParent, int64(1)<<62, id, f.matchJSON(),
			childrenShown); err != nil {
			problems = append(problems, problem("children", err))
		}
	}
	s.render(w, r, "job", fmt.Sprintf("Job %d", id), d, problems...)
}

func isNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }
