package ui

import (
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/sqlapi"
)

const (
	// runsPageSize is how many runs a page of the list shows.
	runsPageSize = 50
	// runsWindow is how many run ids one read of the list covers.
	runsWindow = 20_000
)

// runRow is a line of the runs list (sqlapi.DashboardRuns).
type runRow struct {
	ID           int64      `db:"id" json:"id"`
	Workflow     string     `db:"workflow" json:"workflow"`
	Version      int        `db:"version" json:"version"`
	Status       string     `db:"status" json:"status"`
	CreatedAt    time.Time  `db:"created_at" json:"created_at"`
	FinishedAt   *time.Time `db:"finished_at" json:"finished_at"`
	ErrorMessage *string    `db:"error_message" json:"error_message"`
	Nodes        int64      `db:"nodes" json:"nodes"`
	Done         int64      `db:"done" json:"done"`
	Failed       int64      `db:"failed" json:"failed"`
	Running      int64      `db:"running" json:"running"`
}

type runsData struct {
	Workflow string   `json:"workflow,omitempty"`
	Status   string   `json:"status,omitempty"`
	Runs     []runRow `json:"runs"`
	Older    int64    `json:"older,omitempty"`
	// SearchedTo: the window ran out before the page filled (see jobsPage).
	SearchedTo int64 `json:"searched_to,omitempty"`
}

var runStates = []string{"running", "succeeded", "failed", "cancelled"}

// runs lists workflow runs, newest first, by workflow and status.
func (s *Server) runs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := runsData{Workflow: strings.TrimSpace(q.Get("workflow")), Status: strings.TrimSpace(q.Get("status"))}
	if d.Status != "" && !slices.Contains(runStates, d.Status) {
		s.fail(w, r, http.StatusBadRequest, fmt.Errorf("run status %q is not valid: use one of %s", d.Status, strings.Join(runStates, ", ")))
		return
	}
	cursor := int64(1) << 62
	if b := q.Get("before"); b != "" {
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil || n < 1 {
			s.fail(w, r, http.StatusBadRequest, fmt.Errorf("before %q is not a run id", b))
			return
		}
		cursor = n
	}
	ctx := r.Context()
	var maxID *int64
	if err := s.pool.QueryRow(ctx, sqlapi.DashboardRunIDMax).Scan(&maxID); err != nil {
		s.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	if maxID != nil {
		cursor = min(cursor, *maxID+1)
	}
	start := time.Now()
	var slowest time.Duration
	for cursor > 1 {
		lo := max(1, cursor-runsWindow)
		began := time.Now()
		rows, err := collect[runRow](ctx, s.pool, sqlapi.DashboardRuns, cursor, nilIfEmpty(d.Workflow),
			nilIfEmpty(d.Status), lo, runsPageSize-len(d.Runs))
		if err != nil {
			s.fail(w, r, http.StatusInternalServerError, err)
			return
		}
		d.Runs = append(d.Runs, rows...)
		if len(d.Runs) == runsPageSize {
			d.Older = d.Runs[len(d.Runs)-1].ID
			break
		}
		cursor = lo
		slowest = max(slowest, time.Since(began))
		if cursor > 1 && time.Since(start)+slowest > jobsBudget {
			d.SearchedTo, d.Older = cursor, cursor
			break
		}
	}
	s.render(w, r, "runs", "Runs", d)
}

// dagNode is a node of a run as the DAG page draws it.
type dagNode struct {
	Name     string   `json:"name"`
	Deps     []string `json:"deps"`
	Kind     string   `json:"kind,omitempty"`
	Optional bool     `json:"optional,omitempty"`
	Input    bool     `json:"input,omitempty"`
	Map      bool     `json:"map,omitempty"`
	JobID    int64    `json:"job_id,omitempty"`
	Status   string   `json:"status"`
	Attempt  int      `json:"attempt,omitempty"`
	Progress int64    `json:"progress_pct"` // -1: none
	Error    string   `json:"error,omitempty"`
	// Children counts a map node's children by state (of its first childStatesRead
	// children: ChildrenPartial says it has more).
	Children        map[string]int64 `json:"children,omitempty"`
	ChildrenPartial bool             `json:"children_partial,omitempty"`
	// Done, Total and ChildrenFailed are a map node's children done (succeeded or
	// skipped), all of them, and failed (or cancelled), once it has fanned out
	// (Total > 0): the node's own counters, which the engine keeps as children end.
	Done           int64 `json:"done,omitempty"`
	Total          int64 `json:"total,omitempty"`
	ChildrenFailed int64 `json:"children_failed,omitempty"`
}

type runData struct {
	Run      *pgrun.Run    `json:"run"`
	Nodes    []dagNode     `json:"nodes"`
	Graph    template.HTML `json:"-"`
	Counts   []stateCount  `json:"counts"`
	Failed   bool          `json:"-"`
	Finished bool          `json:"-"`
}

// run draws one workflow run as its DAG, with each node's state.
func (s *Server) run(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		s.fail(w, r, http.StatusBadRequest, fmt.Errorf("run id %q is not valid: use a positive whole number", r.PathValue("id")))
		return
	}
	ctx := r.Context()
	run, err := s.client.GetRun(ctx, id)
	if errors.Is(err, pgrun.ErrRunNotFound) {
		s.fail(w, r, http.StatusNotFound, fmt.Errorf("run %d does not exist", id))
		return
	}
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	var spec struct {
		Nodes []struct {
			Name     string          `json:"name"`
			Kind     string          `json:"kind"`
			Deps     []string        `json:"deps"`
			Optional bool            `json:"optional"`
			Input    bool            `json:"input"`
			Map      json.RawMessage `json:"map"`
		} `json:"nodes"`
	}
	wf, err := s.client.Workflow(ctx, run.Workflow, run.Version)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	if err := json.Unmarshal(wf.Spec, &spec); err != nil {
		s.fail(w, r, http.StatusInternalServerError, fmt.Errorf("workflow %s version %d: %w", run.Workflow, run.Version, err))
		return
	}
	type nodeJob struct {
		Node            *string    `db:"node"`
		JobID           int64      `db:"job_id"`
		Kind            string     `db:"kind"`
		Status          string     `db:"status"`
		Attempt         int        `db:"attempt"`
		ProgressCurrent int64      `db:"progress_current"`
		ProgressTotal   *int64     `db:"progress_total"`
		ChildrenFailed  int64      `db:"children_failed"`
		StartedAt       *time.Time `db:"started_at"`
		FinishedAt      *time.Time `db:"finished_at"`
		ErrorMessage    *string    `db:"error_message"`
	}
	jobs, err := collect[nodeJob](ctx, s.pool, sqlapi.DashboardRunNodes, id)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	type childCount struct {
		ParentID int64  `db:"parent_id"`
		Status   string `db:"status"`
		N        int64  `db:"n"`
	}
	kids, err := collect[childCount](ctx, s.pool, sqlapi.DashboardRunChildStates, id, childStatesRead)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	byName := map[string]nodeJob{}
	for _, j := range jobs {
		if j.Node != nil {
			byName[*j.Node] = j
		}
	}
	d := runData{Run: run, Finished: run.Status != "running", Failed: run.Status == "failed" || run.Status == "cancelled"}
	counts := map[string]int64{}
	for _, n := range spec.Nodes {
		dn := dagNode{Name: n.Name, Deps: n.Deps, Kind: n.Kind, Optional: n.Optional, Input: n.Input,
			Map: len(n.Map) > 0 && string(n.Map) != "null", Status: "pending", Progress: -1}
		if j, ok := byName[n.Name]; ok {
			dn.JobID, dn.Status, dn.Attempt = j.JobID, j.Status, j.Attempt
			dn.Kind = j.Kind
			dn.Progress = progressPct(j.ProgressCurrent, j.ProgressTotal)
			dn.Error = deref(j.ErrorMessage)
			var counted int64
			for _, k := range kids {
				if k.ParentID == j.JobID {
					if dn.Children == nil {
						dn.Children = map[string]int64{}
					}
					dn.Children[k.Status] += k.N
					counted += k.N
				}
			}
			dn.ChildrenPartial = counted >= childStatesRead
			if dn.Map && j.ProgressTotal != nil && *j.ProgressTotal > 0 {
				dn.Done, dn.Total, dn.ChildrenFailed = j.ProgressCurrent, *j.ProgressTotal, j.ChildrenFailed
			}
		}
		counts[dn.Status]++
		d.Nodes = append(d.Nodes, dn)
	}
	for _, st := range allStates {
		if counts[st] > 0 {
			d.Counts = append(d.Counts, stateCount{Status: st, N: counts[st]})
		}
	}
	d.Graph = dagSVG(d.Nodes)
	s.render(w, r, "run", fmt.Sprintf("Run %d · %s", id, run.Workflow), d)
}
