package ui

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/pgrun/pgrun/internal/sqlapi"
)

// poisonedShown is how many poisoned outbox rows the dead letters page lists.
const poisonedShown = 100

// scheduleRow is one cron schedule (sqlapi.DashboardSchedules).
type scheduleRow struct {
	Name          string     `db:"name" json:"name"`
	Cron          string     `db:"cron" json:"cron"`
	Kind          string     `db:"kind" json:"kind"`
	Queue         string     `db:"queue" json:"queue"`
	Timezone      string     `db:"timezone" json:"timezone"`
	Enabled       bool       `db:"enabled" json:"enabled"`
	NextFireAt    *time.Time `db:"next_fire_at" json:"next_fire_at"`
	LastFireAt    *time.Time `db:"last_fire_at" json:"last_fire_at"`
	LastJobID     *int64     `db:"last_job_id" json:"last_job_id"`
	LastJobStatus *string    `db:"last_job_status" json:"last_job_status"`
}

// schedules lists the cron schedules: next and last fire, paused or not.
func (s *Server) schedules(w http.ResponseWriter, r *http.Request) {
	rows, err := collect[scheduleRow](r.Context(), s.pool, sqlapi.DashboardSchedules)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	s.render(w, r, "schedules", "Schedules", rows)
}

// outboxRow is a poisoned outbox row (sqlapi.DashboardPoisonedOutbox).
type outboxRow struct {
	ID         int64      `db:"id" json:"id"`
	JobID      int64      `db:"job_id" json:"job_id"`
	Event      string     `db:"event" json:"event"`
	Attempts   int        `db:"attempts" json:"attempts"`
	LastError  *string    `db:"last_error" json:"last_error"`
	CreatedAt  time.Time  `db:"created_at" json:"created_at"`
	PoisonedAt *time.Time `db:"poisoned_at" json:"poisoned_at"`
}

type deadData struct {
	Failed   jobsPage    `json:"failed"`
	Poisoned []outboxRow `json:"poisoned"`
	// Since is the bulk retry's lower bound on the failure time, as typed.
	Since string `json:"since,omitempty"`
}

// dead lists dead letters: jobs that failed for good (newest first, by the failed
// index, keyset-paged) and outbox rows flagged poison.
func (s *Server) dead(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	fq := url.Values{"state": {"failed"}, "queue": {q.Get("queue")}, "kind": {q.Get("kind")},
		"before": {q.Get("before")}, "error": {q.Get("error")}}
	f, err := parseJobFilter(fq)
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err)
		return
	}
	d := deadData{Since: strings.TrimSpace(q.Get("since"))}
	var problems []string
	if d.Failed, err = s.listJobs(r.Context(), f, jobsPageSize); err != nil {
		problems = append(problems, problem("failed jobs", err))
	}
	if d.Poisoned, err = collect[outboxRow](r.Context(), s.pool, sqlapi.DashboardPoisonedOutbox, poisonedShown); err != nil {
		problems = append(problems, problem("poisoned outbox rows", err))
	}
	s.render(w, r, "dead", "Dead letters", d, problems...)
}
