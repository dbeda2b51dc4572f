package pgrun

import (
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"
)

// JobStatus is a job's place in the state machine (see docs/sql-api.md).
type JobStatus string

// The states of a job. Pending, queued, running and waiting are active; the rest are
// final until an operator redrives a failed or cancelled job with retry_job.
const (
	StatusPending   JobStatus = "pending"
	StatusQueued    JobStatus = "queued"
	StatusRunning   JobStatus = "running"
	StatusWaiting   JobStatus = "waiting"
	StatusSucceeded JobStatus = "succeeded"
	StatusFailed    JobStatus = "failed"
	StatusCancelled JobStatus = "cancelled"
	StatusSkipped   JobStatus = "skipped"
)

// Finished reports whether s is a final state.
func (s JobStatus) Finished() bool {
	switch s {
	case StatusSucceeded, StatusFailed, StatusCancelled, StatusSkipped:
		return true
	}
	return false
}

// Job is one row of pgrun.jobs.
type Job struct {
	ID              int64           `db:"id"`
	Kind            string          `db:"kind"`
	Queue           string          `db:"queue"`
	Args            json.RawMessage `db:"args"`
	Status          JobStatus       `db:"status"`
	Priority        int16           `db:"priority"`
	RunAt           time.Time       `db:"run_at"`
	Attempt         int             `db:"attempt"`
	Failures        int             `db:"failures"`
	MaxAttempts     int             `db:"max_attempts"`
	LeaseExpiries   int             `db:"lease_expiries"`
	ClaimedBy       *string         `db:"claimed_by"`
	LeaseExpiresAt  *time.Time      `db:"lease_expires_at"`
	HeartbeatAt     *time.Time      `db:"heartbeat_at"`
	Timeout         *time.Duration  `db:"timeout"`
	CreatedAt       time.Time       `db:"created_at"`
	StartedAt       *time.Time      `db:"started_at"`
	FinishedAt      *time.Time      `db:"finished_at"`
	Result          json.RawMessage `db:"result"`
	Error           json.RawMessage `db:"error"`
	ProgressCurrent int64           `db:"progress_current"`
	ProgressTotal   *int64          `db:"progress_total"`
	ParentID        *int64          `db:"parent_id"`
	RunID           *int64          `db:"run_id"`
	Node            *string         `db:"node"`
	DepsRemaining   int             `db:"deps_remaining"`
	Model           *string         `db:"model"`
	UniqueKey       *string         `db:"unique_key"`
	Meta            json.RawMessage `db:"meta"`
	// Tenant is the tenant the job belongs to in the tenant mode (docs/security.md);
	// nil with the mode off.
	Tenant *string `db:"tenant"`

	// Deduplicated is not a column: it reports what [Enqueue] or [EnqueueMany] did
	// with the spec this job answers. True means nothing was inserted for it: the
	// job is the one that held the spec's UniqueKey (an active job, one that
	// finished within UniqueWindow, or an earlier spec of the same call), returned
	// as it is, or with ReplaceDuplicate after taking the spec's args. False on a
	// job just enqueued, and on any job read another way.
	Deduplicated bool `db:"-"`
}

// JobColumns is the select list that scans into [Job] with [ScanJobs] / [ScanJob].
const JobColumns = `id, kind, queue, args, status::text as status, priority, run_at, attempt,
	failures, max_attempts, lease_expiries, claimed_by, lease_expires_at, heartbeat_at,
	timeout, created_at, started_at, finished_at, result, error, progress_current,
	progress_total, parent_id, run_id, node, deps_remaining, model, unique_key, meta, tenant`

// ScanJobs collects rows selected with [JobColumns].
func ScanJobs(rows pgx.Rows) ([]*Job, error) {
	return scanJobRows(rows, 0)
}

// ScanJob collects the single row selected with [JobColumns]; pgx.ErrNoRows if none.
func ScanJob(rows pgx.Rows) (*Job, error) {
	return pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[Job])
}
