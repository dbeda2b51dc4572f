package pgrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// Errors the client returns for callers to branch on.
var (
	// ErrNotFound: no job has that id.
	ErrNotFound = errors.New("pgrun: job not found")
	// ErrFinished: the job had already finished, so it could not be cancelled.
	ErrFinished = errors.New("pgrun: job already finished")
	// ErrNotRetryable: only failed and cancelled jobs can be redriven.
	ErrNotRetryable = errors.New("pgrun: job is not failed or cancelled")
)

// NoTimeout, given to [Timeout] or JobSpec.Timeout, enqueues a job with no timeout.
// Without it a job gets its queue's default_timeout, else the engine's one hour.
const NoTimeout time.Duration = -1

// JobSpec describes a job to enqueue: the Go form of pgrun.job_spec, the one
// description of a job every enqueue path takes (docs/sql-api.md). Zero fields take
// the engine's defaults: queue "default", priority 0 (most urgent), run now, 25
// attempts, the queue's timeout (else one hour; [NoTimeout] for none).
type JobSpec struct {
	Kind        string         `json:"kind"`
	Args        any            `json:"args,omitempty"`
	Queue       string         `json:"queue,omitempty"`
	Priority    int            `json:"priority,omitempty"`
	RunAt       *time.Time     `json:"run_at,omitempty"`
	MaxAttempts int            `json:"max_attempts,omitempty"`
	UniqueKey   string         `json:"unique_key,omitempty"`
	ParentID    int64          `json:"parent_id,omitempty"`
	Model       string         `json:"model,omitempty"`
	Timeout     time.Duration  `json:"-"`
	Meta        map[string]any `json:"meta,omitempty"`
	// ConcurrencyKey groups jobs whose running count the queue's concurrency_limit
	// bounds (per tenant, per customer...).
	ConcurrencyKey string `json:"concurrency_key,omitempty"`
	// UniqueWindow extends UniqueKey deduplication to jobs that finished within
	// the window.
	UniqueWindow time.Duration `json:"-"`
	// ReplaceDuplicate makes a duplicate UniqueKey update a still-queued holder's
	// args, priority and run_at instead of being ignored.
	ReplaceDuplicate bool `json:"-"`
	// ModelRequired lets only a worker that has Model warm or declares it claim the
	// job (docs/gpu.md); without it Model is a preference.
	ModelRequired bool `json:"model_required,omitempty"`
}

// MarshalJSON writes the spec in the form pgrun.enqueue_jobs takes (the timeout and
// the unique window as interval strings, ReplaceDuplicate as on_conflict).
func (s JobSpec) MarshalJSON() ([]byte, error) {
	type plain JobSpec
	var timeout, window, onConflict *string
	if s.Timeout > 0 {
		t := fmt.Sprintf("%d microseconds", s.Timeout.Microseconds())
		timeout = &t
	} else if s.Timeout == NoTimeout {
		t := "0"
		timeout = &t
	}
	if s.UniqueWindow != 0 {
		w := fmt.Sprintf("%d microseconds", s.UniqueWindow.Microseconds())
		window = &w
	}
	if s.ReplaceDuplicate {
		r := "replace"
		onConflict = &r
	}
	return json.Marshal(struct {
		plain
		Timeout      *string `json:"timeout,omitempty"`
		UniqueWindow *string `json:"unique_window,omitempty"`
		OnConflict   *string `json:"on_conflict,omitempty"`
	}{plain(s), timeout, window, onConflict})
}

// An Option adjusts one job spec given to [Enqueue].
type Option func(*JobSpec)

// Queue puts the job in queue q (default "default").
func Queue(q string) Option { return func(s *JobSpec) { s.Queue = q } }

// Priority sets the priority: lower runs first, 0 is the default and most urgent.
func Priority(p int) Option { return func(s *JobSpec) { s.Priority = p } }

// RunAt schedules the job for t instead of now.
func RunAt(t time.Time) Option { return func(s *JobSpec) { s.RunAt = &t } }

// MaxAttempts bounds the attempts that may fail before the job fails for good.
func MaxAttempts(n int) Option { return func(s *JobSpec) { s.MaxAttempts = n } }

// UniqueKey deduplicates: while an active job holds key, enqueueing another returns
// the holder instead.
func UniqueKey(key string) Option { return func(s *JobSpec) { s.UniqueKey = key } }

// Parent makes the job a child of job id.
func Parent(id int64) Option { return func(s *JobSpec) { s.ParentID = id } }

// Model names the model the job needs, for warm-model routing.
func Model(name string) Option { return func(s *JobSpec) { s.Model = name } }

// Timeout bounds one attempt's run time (the engine's timeout rule: past it with no
// sign of life within the stall window, the attempt fails). [NoTimeout] for none.
func Timeout(d time.Duration) Option { return func(s *JobSpec) { s.Timeout = d } }

// Meta attaches free-form metadata (tenant, trace id, ...).
func Meta(m map[string]any) Option { return func(s *JobSpec) { s.Meta = m } }

// ConcurrencyKey sets the key the queue's concurrency_limit counts running jobs by.
func ConcurrencyKey(key string) Option { return func(s *JobSpec) { s.ConcurrencyKey = key } }

// UniqueWindow also deduplicates against jobs with the same UniqueKey that finished
// within d.
func UniqueWindow(d time.Duration) Option { return func(s *JobSpec) { s.UniqueWindow = d } }

// ReplaceDuplicate makes a duplicate UniqueKey replace the args of a holder that is
// still queued.
func ReplaceDuplicate() Option { return func(s *JobSpec) { s.ReplaceDuplicate = true } }

// ModelRequired makes the job's Model a requirement: only a worker with the model
// warm or declared claims it.
func ModelRequired() Option { return func(s *JobSpec) { s.ModelRequired = true } }

// Enqueue adds one job of kind with args (marshalled to a JSON object) and returns
// it. Run it on a transaction to make the job part of the caller's unit of work: it
// becomes visible, and wakes runners, only on commit. With [UniqueKey] and an active
// job holding the key, that job is returned with Deduplicated set and nothing is
// written. It is [EnqueueMany] with one spec.
func Enqueue(ctx context.Context, db DB, kind string, args any, opts ...Option) (*Job, error) {
	spec := JobSpec{Kind: kind, Args: args}
	for _, o := range opts {
		o(&spec)
	}
	jobs, err := EnqueueMany(ctx, db, []JobSpec{spec})
	if err != nil {
		return nil, err
	}
	if len(jobs) == 0 {
		return nil, fmt.Errorf("pgrun: enqueue %s: no job returned", kind)
	}
	return jobs[0], nil
}

// EnqueueMany adds many jobs in one statement (pgrun.enqueue_columns) and returns one
// job per spec, in the specs' order. A spec whose unique key is held (by an active
// job, by one that finished within its UniqueWindow, or by an earlier spec of the same
// call) yields the holder, with Deduplicated set, instead of a new job; with
// ReplaceDuplicate a holder that is still queued first takes the spec's args,
// priority and run_at. The specs travel as typed arrays, one per field that some spec
// sets (pgrun.enqueue_columns), and the engine checks the whole batch before it
// writes anything: a bad spec fails the call with an error naming its index in specs
// (SQLSTATE 22023) and no job is enqueued.
func EnqueueMany(ctx context.Context, db DB, specs []JobSpec) ([]*Job, error) {
	if len(specs) == 0 {
		return nil, nil
	}
	var b batch
	for i, s := range specs {
		if err := b.add(i, len(specs), s); err != nil {
			return nil, err
		}
	}
	rows, err := db.Query(ctx, `select `+JobColumns+`, deduplicated from pgrun.enqueue_columns(
		$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)`,
		b.kinds, b.args, b.queues, b.priorities, b.runAts, b.maxAttempts, b.uniqueKeys, b.parentIDs,
		b.models, b.timeouts, b.metas, b.concurrencyKeys, b.uniqueWindows, b.onConflicts, b.modelRequireds)
	if err != nil {
		return nil, fmt.Errorf("pgrun: enqueue: %w", err)
	}
	jobs, err := scanEnqueued(rows, len(specs))
	if err != nil {
		return nil, fmt.Errorf("pgrun: enqueue: %w", err)
	}
	return jobs, nil
}

// scanJobRows collects rows selected with [JobColumns], as [ScanJobs] does, into one
// allocation of capacity jobs (more if need be). The destinations are listed by hand
// (scanTargets) instead of found by reflection on every row: for a batch of 1,000
// jobs that is most of the client's time.
func scanJobRows(rows pgx.Rows, capacity int) ([]*Job, error) {
	return scanRows(rows, capacity, false)
}

// scanEnqueued is scanJobRows for rows of pgrun.enqueued: [JobColumns], then
// deduplicated.
func scanEnqueued(rows pgx.Rows, capacity int) ([]*Job, error) {
	return scanRows(rows, capacity, true)
}

// scanRows scans rows of [JobColumns] (then deduplicated, with dedup) into one
// backing array of jobs.
func scanRows(rows pgx.Rows, capacity int, dedup bool) ([]*Job, error) {
	defer rows.Close()
	all := make([]Job, 0, capacity)
	var targets []any // reused: only the pointers change from row to row
	for rows.Next() {
		all = append(all, Job{})
		j := &all[len(all)-1]
		targets = append(targets[:0], j.scanTargets()...)
		if dedup {
			targets = append(targets, &j.Deduplicated)
		}
		if err := rows.Scan(targets...); err != nil {
			return nil, err
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	jobs := make([]*Job, len(all))
	for i := range all {
		jobs[i] = &all[i]
	}
	return jobs, nil
}

// scanTargets lists j's fields in the order of [JobColumns] (client_scan_test.go
// checks it against the db tags). The JSON columns go in as plain bytes, which pgx
// copies as they are (into a json.RawMessage it would parse them first), and the
// status as a plain string (a named string type costs pgx a reflection per row).
func (j *Job) scanTargets() []any {
	return []any{&j.ID, &j.Kind, &j.Queue, (*[]byte)(&j.Args), (*string)(&j.Status), &j.Priority, &j.RunAt,
		&j.Attempt, &j.Failures, &j.MaxAttempts, &j.LeaseExpiries, &j.ClaimedBy, &j.LeaseExpiresAt,
		&j.HeartbeatAt, &j.Timeout, &j.CreatedAt, &j.StartedAt, &j.FinishedAt, (*[]byte)(&j.Result),
		(*[]byte)(&j.Error), &j.ProgressCurrent, &j.ProgressTotal, &j.ParentID, &j.RunID, &j.Node,
		&j.DepsRemaining, &j.Model, &j.UniqueKey, (*[]byte)(&j.Meta), &j.Tenant, &j.ClaimID}
}

// batch holds specs as the columns pgrun.enqueue_columns takes. A column no spec sets
// stays nil (SQL NULL: every job takes the default), so a batch of plain jobs sends
// only its kinds; an element a spec leaves zero is NULL, the engine's default.
type batch struct {
	kinds           []string
	args            [][]byte
	queues          []pgtype.Text
	priorities      []int32
	runAts          []pgtype.Timestamptz
	maxAttempts     []pgtype.Int4
	uniqueKeys      []pgtype.Text
	parentIDs       []pgtype.Int8
	models          []pgtype.Text
	timeouts        []pgtype.Interval
	metas           [][]byte
	concurrencyKeys []pgtype.Text
	uniqueWindows   []pgtype.Interval
	onConflicts     []pgtype.Text
	modelRequireds  []bool
}

// add appends spec i of n.
func (b *batch) add(i, n int, s JobSpec) error {
	if s.Timeout < 0 && s.Timeout != NoTimeout {
		return fmt.Errorf("pgrun: enqueue %s: timeout %s is negative", s.Kind, s.Timeout)
	}
	if s.UniqueWindow < 0 {
		return fmt.Errorf("pgrun: enqueue %s: unique window %s is negative", s.Kind, s.UniqueWindow)
	}
	if b.kinds == nil {
		b.kinds = make([]string, 0, n)
	}
	b.kinds = append(b.kinds, s.Kind)
	if s.Args != nil {
		raw, err := json.Marshal(s.Args)
		if err != nil {
			return fmt.Errorf("pgrun: enqueue: encode args of spec %d: %w", i, err)
		}
		lazyColumn(&b.args, n)[i] = raw
	}
	if s.Meta != nil {
		raw, err := json.Marshal(s.Meta)
		if err != nil {
			return fmt.Errorf("pgrun: enqueue: encode meta of spec %d: %w", i, err)
		}
		lazyColumn(&b.metas, n)[i] = raw
	}
	// The engine checks the ranges; a value past int32 cannot even be sent.
	if s.Priority < math.MinInt32 || s.Priority > math.MaxInt32 {
		return fmt.Errorf("pgrun: enqueue %s: priority %d is not valid (%d to %d)", s.Kind, s.Priority, MinPriority, MaxPriority)
	}
	if s.MaxAttempts < math.MinInt32 || s.MaxAttempts > math.MaxInt32 {
		return fmt.Errorf("pgrun: enqueue %s: max attempts %d is not valid (1 to %d)", s.Kind, s.MaxAttempts, math.MaxInt32)
	}
	if s.Priority != 0 {
		lazyColumn(&b.priorities, n)[i] = int32(s.Priority)
	}
	if s.MaxAttempts != 0 {
		lazyColumn(&b.maxAttempts, n)[i] = pgtype.Int4{Int32: int32(s.MaxAttempts), Valid: true}
	}
	if s.RunAt != nil {
		lazyColumn(&b.runAts, n)[i] = pgtype.Timestamptz{Time: *s.RunAt, Valid: true}
	}
	if s.ParentID != 0 {
		lazyColumn(&b.parentIDs, n)[i] = pgtype.Int8{Int64: s.ParentID, Valid: true}
	}
	switch {
	case s.Timeout == NoTimeout:
		lazyColumn(&b.timeouts, n)[i] = pgtype.Interval{Valid: true} // 0: none
	case s.Timeout > 0: // in whole microseconds, as PostgreSQL counts; never rounded down to 0 (none)
		lazyColumn(&b.timeouts, n)[i] = pgtype.Interval{Microseconds: max(1, s.Timeout.Microseconds()), Valid: true}
	}
	setText(&b.queues, n, i, s.Queue)
	setText(&b.uniqueKeys, n, i, s.UniqueKey)
	setText(&b.models, n, i, s.Model)
	setText(&b.concurrencyKeys, n, i, s.ConcurrencyKey)
	if s.UniqueWindow > 0 { // in whole microseconds, never rounded down to 0 (refused)
		lazyColumn(&b.uniqueWindows, n)[i] = pgtype.Interval{Microseconds: max(1, s.UniqueWindow.Microseconds()), Valid: true}
	}
	if s.ReplaceDuplicate {
		lazyColumn(&b.onConflicts, n)[i] = pgtype.Text{String: "replace", Valid: true}
	}
	if s.ModelRequired {
		lazyColumn(&b.modelRequireds, n)[i] = true
	}
	return nil
}

// lazyColumn returns *c, made with n zero (NULL) elements the first time it is needed.
func lazyColumn[T any](c *[]T, n int) []T {
	if *c == nil {
		*c = make([]T, n)
	}
	return *c
}

// setText sets element i of *c to v unless v is empty (NULL: the default).
func setText(c *[]pgtype.Text, n, i int, v string) {
	if v != "" {
		lazyColumn(c, n)[i] = pgtype.Text{String: v, Valid: true}
	}
}

// GetJob returns job id, or [ErrNotFound].
func GetJob(ctx context.Context, db DB, id int64) (*Job, error) {
	rows, err := db.Query(ctx, `select `+JobColumns+` from pgrun.jobs where id = $1`, id)
	if err != nil {
		return nil, fmt.Errorf("pgrun: get job %d: %w", id, err)
	}
	j, err := ScanJob(rows)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("job %d: %w", id, ErrNotFound)
	}
	return j, err
}

// Cancel cancels job id (pgrun.cancel_job): at once if it has not started, and by
// cancelling its handler's context if it is running. A finished job is returned
// unchanged with [ErrFinished]; an unknown id gives [ErrNotFound].
func Cancel(ctx context.Context, db DB, id int64, reason string) (*Job, error) {
	return transition(ctx, db, id, ErrFinished,
		`select `+JobColumns+` from pgrun.cancel_job($1, nullif($2, '')) where id is not null`, id, reason)
}

// Retry redrives a failed or cancelled job (pgrun.retry_job) with its full attempt
// budget. Any other job is returned unchanged with [ErrNotRetryable]; an unknown id
// gives [ErrNotFound].
func Retry(ctx context.Context, db DB, id int64) (*Job, error) {
	return transition(ctx, db, id, ErrNotRetryable,
		`select `+JobColumns+` from pgrun.retry_job($1) where id is not null`, id)
}

// transition runs an operator transition that returns the job, or no row when the
// job was not in a state it applies to; then the current row is returned with
// unchanged.
func transition(ctx context.Context, db DB, id int64, unchanged error, sql string, args ...any) (*Job, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, wrapNotFound(id, err)
	}
	j, err := ScanJob(rows)
	if err == nil {
		return j, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, wrapNotFound(id, err)
	}
	cur, err := GetJob(ctx, db, id)
	if err != nil {
		return nil, err
	}
	return cur, fmt.Errorf("job %d is %s: %w", id, cur.Status, unchanged)
}

func wrapNotFound(id int64, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "P0002" {
		return fmt.Errorf("job %d: %w", id, ErrNotFound)
	}
	return fmt.Errorf("pgrun: job %d: %w", id, err)
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

// Events returns job id's audit log, oldest first.
func Events(ctx context.Context, db DB, id int64) ([]Event, error) {
	rows, err := db.Query(ctx, `select id, job_id, at, event, level, message, fields
		from pgrun.job_events where job_id = $1 order by id`, id)
	if err != nil {
		return nil, fmt.Errorf("pgrun: events of job %d: %w", id, err)
	}
	return pgx.CollectRows(rows, pgx.RowToStructByName[Event])
}
