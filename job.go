package pgrun

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgrun/pgrun/internal/sqlapi"
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

// Job is one row of pgrun.jobs: every column, by name (tests/client_columns_test.go
// checks that none is missing). Nullable columns are pointers, nil for NULL; the JSON
// columns are the stored text, nil for NULL.
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
	// ChildrenFailed counts the children of a waiting parent that failed so far
	// (defer_job's fan-in), ChildErrors their error messages, and FailureRatio the
	// share of failed children the parent tolerates (nil: it was never deferred).
	ChildrenFailed int      `db:"children_failed"`
	ChildErrors    []string `db:"child_errors"`
	FailureRatio   *float64 `db:"failure_ratio"`
	// DispatchedAt is when the engine reacted to the job's ending (fan-in, DAG
	// expansion); nil while that is pending or not needed.
	DispatchedAt *time.Time `db:"dispatched_at"`
	// ConcurrencyKey groups jobs whose running count the queue's concurrency_limit
	// bounds.
	ConcurrencyKey *string `db:"concurrency_key"`
	// ModelRequired: only a worker with Model warm or declared may claim the job.
	ModelRequired bool `db:"model_required"`
	// Tenant is the tenant the job belongs to in the tenant mode (docs/security.md);
	// nil with the mode off.
	Tenant *string `db:"tenant"`
	// DeadlineAt is StartedAt plus Timeout for the running attempt (the timeout
	// rule's bound); read it only while the job runs.
	DeadlineAt *time.Time `db:"deadline_at"`
	// ClaimID is the token of the claim that handed the job out (zero if it was never
	// claimed). Every claim gets a new one, unlike Attempt, which counts claims and
	// can repeat after an asynchronous failover undid a claim. A handler whose side
	// effects must happen once keys them on it (with ID); the runner presents it with
	// every report, so a report of an older claim never finishes a newer one. It reads
	// as zero to anyone but the claim's holder (the login that registered its worker)
	// and administrators: pgrun.claim_token.
	ClaimID ClaimID `db:"claim_id"`
	// LeaseLength is the lease of the current claim: renew it every third of this.
	LeaseLength *time.Duration `db:"lease_length"`
	// SequenceKey makes the job one of a sequence: the jobs of its queue with this key
	// run one at a time, in id order. While another job of the sequence is its head
	// the job is pending, held (docs/operations.md, "Sequences").
	SequenceKey *string `db:"sequence_key"`
	// DebounceKey is the key the job was debounced by ([Debounce], [Throttle]).
	DebounceKey *string `db:"debounce_key"`

	// Deduplicated is not a column: it reports what [Client.EnqueueMany] (and every
	// other enqueue call) did with the spec this job answers, as pgrun.enqueued's
	// column of that name ([Enqueued]) says. True means nothing was inserted for it:
	// the job is the one that held the spec's UniqueKey (an active job, one that
	// finished within UniqueWindow, or an earlier spec of the same call), returned
	// as it is, or with ReplaceDuplicate after taking the spec's args. False on a
	// job just enqueued, and on any job read another way.
	Deduplicated bool `db:"-"`
	// Folded is not a column either: true when a debounced spec ([Debounce],
	// [Throttle]) was folded into this job, an earlier one of its key, instead of
	// enqueued: with [Debounce] the job took the spec's args and now runs when the
	// new window ends; with [Throttle] the job was returned as it is. False on a job
	// just enqueued, and on any job read another way.
	Folded bool `db:"-"`
}

// Enqueued is one row of the SQL composite pgrun.enqueued, what enqueueing one spec
// returned: the job, then whether it was deduplicated and whether it was folded (see
// Job.Deduplicated and Job.Folded, which the client sets from them).
type Enqueued struct {
	Job
	Deduplicated bool `db:"deduplicated"`
	Folded       bool `db:"folded"`
}

// ClaimID is a claim token, pgrun.jobs.claim_id: a UUID, zero for none. It scans
// from and encodes to a PostgreSQL uuid (NULL is the zero value) and reads as the
// usual 36-character form in logs and JSON.
type ClaimID [16]byte

// IsZero reports whether c is the zero token (no claim).
func (c ClaimID) IsZero() bool { return c == ClaimID{} }

// String returns c as xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, or "" for the zero token.
func (c ClaimID) String() string {
	if c.IsZero() {
		return ""
	}
	var b [36]byte
	hex.Encode(b[0:8], c[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], c[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], c[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], c[8:10])
	b[23] = '-'
	hex.Encode(b[24:], c[10:])
	return string(b[:])
}

// MarshalText encodes c as [ClaimID.String] does.
func (c ClaimID) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText parses the 36-character form (or "" for the zero token).
func (c *ClaimID) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*c = ClaimID{}
		return nil
	}
	var u pgtype.UUID
	if err := u.Scan(string(b)); err != nil {
		return fmt.Errorf("pgrun: claim id %q: %w", b, err)
	}
	*c = u.Bytes
	return nil
}

// ScanUUID implements pgtype.UUIDScanner: NULL scans as the zero token.
func (c *ClaimID) ScanUUID(v pgtype.UUID) error {
	if !v.Valid {
		*c = ClaimID{}
		return nil
	}
	*c = v.Bytes
	return nil
}

// UUIDValue implements pgtype.UUIDValuer: the zero token is sent as NULL (a report
// that names no claim matches any claim of its attempt).
func (c ClaimID) UUIDValue() (pgtype.UUID, error) {
	return pgtype.UUID{Bytes: c, Valid: !c.IsZero()}, nil
}

// JobColumns is the select list that scans into [Job] with [ScanJobs] / [ScanJob]:
// every column of pgrun.jobs. Over pgrun.jobs itself its claim_id is a column only
// administrators may read (docs/security.md); the client's reads use
// pgrun.claim_token(id) in its place.
//
// Deprecated: for code outside this module that writes its own SQL; kept for one
// release. Use [Client.ListJobs] and [Client.GetJob].
const JobColumns = sqlapi.JobColumns

// ScanJobs collects rows selected with [JobColumns] (pgx.RowTo into one
// backing array, [Job.ScanRow]).
//
// Deprecated: scan with pgx.CollectRows and pgx.RowToAddrOf[Job] ([Job.ScanRow]); kept for one
// release.
func ScanJobs(rows pgx.Rows) ([]*Job, error) {
	return collectJobs(rows, 0)
}

// ScanJob collects the single row selected with [JobColumns]; pgx.ErrNoRows if none.
//
// Deprecated: scan with pgx.CollectExactlyOneRow and
// pgx.RowToAddrOf[Job] ([Job.ScanRow]); kept for one release.
func ScanJob(rows pgx.Rows) (*Job, error) {
	return pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOf[Job])
}

// collectJobs scans rows of [JobColumns] into one allocation of capacity jobs (more
// if need be) and returns pointers into it.
func collectJobs(rows pgx.Rows, capacity int) ([]*Job, error) {
	all, err := AppendJobs(make([]Job, 0, capacity), rows)
	if err != nil {
		return nil, err
	}
	return jobPointers(all), nil
}

// collectEnqueued scans rows of pgrun.enqueued ([Enqueued]) as collectJobs does,
// with Deduplicated and Folded set.
func collectEnqueued(rows pgx.Rows, capacity int) ([]*Job, error) {
	all, err := appendJobRows(make([]Job, 0, capacity), rows, true)
	if err != nil {
		return nil, err
	}
	return jobPointers(all), nil
}

// jobPointers points at each job of all.
func jobPointers(all []Job) []*Job {
	jobs := make([]*Job, len(all))
	for i := range all {
		jobs[i] = &all[i]
	}
	return jobs
}
