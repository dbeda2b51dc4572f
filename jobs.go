package pgrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgrun/pgrun/internal/sqlapi"
)

// GetJob returns job id, or an error matching [ErrNotFound].
func (c *Client) GetJob(ctx context.Context, id int64) (*Job, error) {
	return getJob(ctx, c.pool, id)
}

func getJob(ctx context.Context, db DB, id int64) (*Job, error) {
	rows, err := db.Query(ctx, sqlapi.GetJob, id)
	if err != nil {
		return nil, dbError("get job", err)
	}
	j, err := pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOf[Job])
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, jobNotFound(id, nil)
	}
	return j, dbError("get job", err)
}

// JobFilter selects jobs for [Client.ListJobs]. Zero fields select everything.
type JobFilter struct {
	Queue    string
	Kind     string
	Status   []JobStatus // any of these; empty: any
	ParentID int64       // children of this job
	RunID    int64       // nodes of this workflow run
	// Limit is the page size: 1 to [MaxPageSize]; zero means the client's
	// Config.PageSize.
	Limit int
	// After is the keyset cursor: the page starts after the job with this id (in
	// the listing's order), so pass the last job of the previous page. Zero: the
	// first page.
	After int64
	// Newest lists newest first (descending ids) instead of oldest first.
	Newest bool
}

// ListJobs returns one page of the jobs f selects, by id: oldest first, or newest
// first with f.Newest. Pages are keyset pages (the next starts after the last id of
// this one, never an OFFSET), so paging costs the same on page 1,000 as on page 1
// and a job enqueued meanwhile is neither skipped nor shown twice. A page shorter
// than the limit is the last.
func (c *Client) ListJobs(ctx context.Context, f JobFilter) ([]*Job, error) {
	limit := f.Limit
	switch {
	case limit == 0:
		limit = c.cfg.PageSize
	case limit < 0 || limit > MaxPageSize:
		return nil, invalidInput("list jobs: limit %d is not valid (1 to %d)", limit, MaxPageSize)
	}
	var statuses []string
	if len(f.Status) > 0 {
		statuses = make([]string, len(f.Status))
		for i, s := range f.Status {
			statuses[i] = string(s)
		}
	}
	sql := sqlapi.ListJobs
	if f.Newest {
		sql = sqlapi.ListJobsNewest
	}
	rows, err := c.pool.Query(ctx, sql, nullText(f.Queue), nullText(f.Kind), statuses,
		nullID(f.ParentID), nullID(f.RunID), nullID(f.After), limit)
	if err != nil {
		return nil, dbError("list jobs", err)
	}
	jobs, err := collectJobs(rows, limit)
	return jobs, dbError("list jobs", err)
}

// Cancel cancels job id (pgrun.cancel_job): at once if it has not started, and by
// cancelling its handler's context if it is running; a parent's unfinished
// descendants are cancelled with it. A finished job is returned unchanged with an
// error matching [ErrFinished]; an unknown id gives [ErrNotFound].
func (c *Client) Cancel(ctx context.Context, id int64, reason string) (*Job, error) {
	return cancelJob(ctx, c.pool, id, reason)
}

func cancelJob(ctx context.Context, db DB, id int64, reason string) (*Job, error) {
	j, err := transition(ctx, db, "cancel", id, sqlapi.CancelJob, id, reason)
	if errors.Is(err, errUnchanged) {
		return j, newError([]error{ErrFinished}, "job %d already finished (%s)", id, j.Status)
	}
	return j, err
}

// Retry redrives a failed or cancelled job (pgrun.retry_job) with its full attempt
// budget; redriving a workflow node re-opens its run. Any other job is returned
// unchanged with an error matching [ErrNotRetryable]; an unknown id gives
// [ErrNotFound].
func (c *Client) Retry(ctx context.Context, id int64) (*Job, error) {
	return retryJob(ctx, c.pool, id)
}

func retryJob(ctx context.Context, db DB, id int64) (*Job, error) {
	j, err := transition(ctx, db, "retry", id, sqlapi.RetryJob, id)
	if errors.Is(err, errUnchanged) {
		return j, newError([]error{ErrNotRetryable}, "job %d is %s: only failed and cancelled jobs can be retried", id, j.Status)
	}
	return j, err
}

// errUnchanged is transition's report that the job was not in a state the
// transition applies to.
var errUnchanged = errors.New("unchanged")

// transition runs an operator transition that returns the job, or no row when the
// job was not in a state it applies to; then the current row is returned with
// errUnchanged.
func transition(ctx context.Context, db DB, verb string, id int64, sql string, args ...any) (*Job, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err == nil {
		var j *Job
		j, err = pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOf[Job])
		if err == nil {
			return j, nil
		}
		if errors.Is(err, pgx.ErrNoRows) {
			cur, err := getJob(ctx, db, id)
			if err != nil {
				return nil, err
			}
			return cur, errUnchanged
		}
	}
	if sqlState(err) == "P0002" {
		return nil, jobNotFound(id, err)
	}
	return nil, dbError(fmt.Sprintf("%s job %d", verb, id), err)
}

// RetryFilter selects the failed jobs [Client.RetryJobs] redrives. Zero fields
// select everything.
type RetryFilter struct {
	Queue string
	Kind  string
	// Since keeps jobs that failed at or after it; zero: whenever.
	Since time.Time
	// Max bounds how many are redriven; zero: the engine's default (1,000).
	Max int
}

// RetryJobs redrives failed jobs in bulk (pgrun.retry_jobs: dead letters after a
// fix), oldest first, each as [Client.Retry] would, and returns how many.
func (c *Client) RetryJobs(ctx context.Context, f RetryFilter) (int, error) {
	n, err := f.count(ctx, c.pool, sqlapi.RetryJobs, sqlapi.RetryJobsDefaultMax)
	return n, dbError("retry jobs", err)
}

// CountRetryable counts the jobs [Client.RetryJobs] would redrive with f now
// (pgrun.retryable_jobs, the engine's one statement of that choice), for a caller
// that shows progress through a bulk redrive.
func (c *Client) CountRetryable(ctx context.Context, f RetryFilter) (int, error) {
	n, err := f.count(ctx, c.pool, sqlapi.CountRetryable, sqlapi.CountRetryableDefaultMax)
	return n, dbError("count retryable jobs", err)
}

// count runs one of a pair of statements that take f's filter and return a count:
// withMax when f sets Max, else defaultMax, which leaves the bound to the engine.
func (f RetryFilter) count(ctx context.Context, db DB, withMax, defaultMax string) (int, error) {
	var since *time.Time
	if !f.Since.IsZero() {
		since = &f.Since
	}
	var row pgx.Row
	if f.Max == 0 {
		row = db.QueryRow(ctx, defaultMax, nullText(f.Queue), nullText(f.Kind), since)
	} else {
		row = db.QueryRow(ctx, withMax, nullText(f.Queue), nullText(f.Kind), since, f.Max)
	}
	var n int
	err := row.Scan(&n)
	return n, err
}

// TimelineEntry is one row of pgrun.job_timeline: something that happened to a job.
type TimelineEntry struct {
	At    time.Time `db:"at"`
	Event string    `db:"event"` // job.enqueued, job.started, job.failed, ... and the handler's own
	Level string    `db:"level"` // debug, info, warn, error
	// Attempt is the claim the entry belongs to (0: before the first); nil when the
	// event names none.
	Attempt *int            `db:"attempt"`
	Message *string         `db:"message"`
	Fields  json.RawMessage `db:"fields"`
}

// Timeline returns job id's whole story, oldest first (pgrun.job_timeline): when it
// was enqueued, every stored event, its current attempt's start and its ending. An
// unknown id gives [ErrNotFound].
func (c *Client) Timeline(ctx context.Context, id int64) ([]TimelineEntry, error) {
	rows, err := c.pool.Query(ctx, sqlapi.JobTimeline, id)
	if err == nil {
		var entries []TimelineEntry
		entries, err = pgx.CollectRows(rows, pgx.RowToStructByName[TimelineEntry])
		if err == nil {
			return entries, nil
		}
	}
	if sqlState(err) == "P0002" {
		return nil, jobNotFound(id, err)
	}
	return nil, dbError("timeline", err)
}

// Event is one row of the audit log pgrun.job_events.
type Event struct {
	ID      int64           `db:"id"`
	JobID   int64           `db:"job_id"`
	At      time.Time       `db:"at"`
	Event   string          `db:"event"`
	Level   string          `db:"level"`
	Message *string         `db:"message"`
	Fields  json.RawMessage `db:"fields"`
}

// Events returns job id's stored audit log, oldest first: the events handlers
// emitted and those the engine writes (failures, lease expiries, cancels).
// [Client.Timeline] adds the transitions the row records.
func (c *Client) Events(ctx context.Context, id int64) ([]Event, error) {
	return jobEvents(ctx, c.pool, id)
}

func jobEvents(ctx context.Context, db DB, id int64) ([]Event, error) {
	rows, err := db.Query(ctx, sqlapi.JobEvents, id)
	if err != nil {
		return nil, dbError("events", err)
	}
	evs, err := pgx.CollectRows(rows, pgx.RowToStructByName[Event])
	return evs, dbError("events", err)
}

// nullText is s, or NULL for "".
func nullText(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// nullID is id, or NULL for 0 (no job or run has id 0).
func nullID(id int64) *int64 {
	if id == 0 {
		return nil
	}
	return &id
}
