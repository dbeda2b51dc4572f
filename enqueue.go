package pgrun

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgrun/pgrun/internal/sqlapi"
)

// NoTimeout, given to [Timeout] or JobSpec.Timeout, enqueues a job with no timeout.
// Without it a job gets its queue's default_timeout, else the engine's one hour.
const NoTimeout time.Duration = -1

// JobSpec describes a job to enqueue: the Go form of the SQL composite
// pgrun.job_spec, the one description of a job every enqueue path takes
// (docs/sql-api.md), with a field for each of its attributes (ReplaceDuplicate is
// on_conflict). Zero fields take the engine's defaults: queue "default" (or the
// client's Config.Queue), priority 0 (most urgent), run now, the queue's
// default_max_attempts else 25, the queue's timeout else one hour ([NoTimeout] for
// none).
type JobSpec struct {
	// Kind picks the handler. Empty: the kind of Args, if Args has a Kind method
	// ([JobArgs]).
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
	// SequenceKey makes the job one of a sequence: the jobs of its queue with one key
	// run one at a time, in enqueue order, across all runners ([SequenceKey]).
	SequenceKey string `json:"sequence_key,omitempty"`
	// DebounceKey and Debounce fold the enqueues of one key within a window into one
	// job, as DebounceEdge says ([Debounce], [Throttle]). Set both or neither.
	DebounceKey string        `json:"debounce_key,omitempty"`
	Debounce    time.Duration `json:"-"`
	// DebounceEdge is [DebounceTrailing] (the default, "") or [DebounceLeading].
	DebounceEdge DebounceEdge `json:"debounce_edge,omitempty"`
}

// DebounceEdge says which enqueue of a debounce window runs (pgrun.job_spec's
// debounce_edge).
type DebounceEdge string

const (
	// DebounceTrailing folds the enqueues of a window into one job, which takes the
	// latest args and runs when the window ends; each enqueue moves the end to now
	// plus the window. The default.
	DebounceTrailing DebounceEdge = "trailing"
	// DebounceLeading runs the first enqueue at once and answers the rest of its
	// window with that job, writing nothing (a throttle).
	DebounceLeading DebounceEdge = "leading"
)

// MarshalJSON writes the spec in the form pgrun.enqueue_jobs and defer_job take (the
// timeout, the unique window and the debounce window as interval strings in whole
// microseconds, never rounded down to zero; ReplaceDuplicate as on_conflict; the kind
// of Args when Kind is empty).
func (s JobSpec) MarshalJSON() ([]byte, error) {
	type plain JobSpec
	if s.Kind == "" {
		s.Kind, _ = KindOf(s.Args)
	}
	var timeout, window, onConflict, debounce *string
	if s.Timeout > 0 {
		t := fmt.Sprintf("%d microseconds", max(1, s.Timeout.Microseconds()))
		timeout = &t
	} else if s.Timeout == NoTimeout {
		t := "0"
		timeout = &t
	}
	if s.UniqueWindow != 0 { // a negative one is sent as it is, for the engine to refuse
		us := s.UniqueWindow.Microseconds()
		if s.UniqueWindow > 0 {
			us = max(1, us)
		}
		w := fmt.Sprintf("%d microseconds", us)
		window = &w
	}
	if s.Debounce != 0 { // a negative one is sent as it is, for the engine to refuse
		us := s.Debounce.Microseconds()
		if s.Debounce > 0 {
			us = max(1, us)
		}
		d := fmt.Sprintf("%d microseconds", us)
		debounce = &d
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
		Debounce     *string `json:"debounce,omitempty"`
	}{plain(s), timeout, window, onConflict, debounce})
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

// SequenceKey makes the job one of the sequence key of its queue: the sequence's jobs
// run one at a time, in enqueue order, across all runners. A job enqueued behind an
// unfinished one is pending (held) until the jobs before it have ended; one that fails
// for good holds the rest until it is retried or cancelled, unless its queue's
// sequence_on_failure is "continue" (docs/operations.md, "Sequences").
func SequenceKey(key string) Option { return func(s *JobSpec) { s.SequenceKey = key } }

// Debounce folds the enqueues of key within window into one job (the trailing edge):
// while the key's last job has not started and its window has not ended, an enqueue
// gives it the new args and meta and moves its start to now plus window, and returns
// it with Folded set; otherwise the job is enqueued to start after window. With
// [UniqueKey] too, the unique key is checked first.
func Debounce(key string, window time.Duration) Option {
	return func(s *JobSpec) { s.DebounceKey, s.Debounce, s.DebounceEdge = key, window, DebounceTrailing }
}

// Throttle runs the first enqueue of key at once and answers every other enqueue of
// key within window of it with that job, Folded set, writing nothing (the leading
// edge of a debounce).
func Throttle(key string, window time.Duration) Option {
	return func(s *JobSpec) { s.DebounceKey, s.Debounce, s.DebounceEdge = key, window, DebounceLeading }
}

// Enqueue adds one job of kind with args (marshalled to a JSON object) and returns
// it. With kind "" the kind is args' own ([JobArgs]); see also [Client.EnqueueArgs].
// With [UniqueKey] and an active job holding the key, that job is returned with
// Deduplicated set and nothing is written; with [Debounce] or [Throttle], the job the
// spec folded into is returned with Folded set. It is [Client.EnqueueMany] with one
// spec.
func (c *Client) Enqueue(ctx context.Context, kind string, args any, opts ...Option) (*Job, error) {
	return enqueueOne(ctx, c.pool, c.cfg.Queue, kind, args, opts)
}

// EnqueueTx is [Client.Enqueue] inside the caller's transaction: the job is part of
// the caller's unit of work, visible (and waking runners) only if tx commits.
func (c *Client) EnqueueTx(ctx context.Context, tx pgx.Tx, kind string, args any, opts ...Option) (*Job, error) {
	return enqueueOne(ctx, tx, c.cfg.Queue, kind, args, opts)
}

// EnqueueMany adds many jobs in one statement (pgrun.enqueue_columns) and returns one
// job per spec, in the specs' order. A spec whose unique key is held (by an active
// job, by one that finished within its UniqueWindow, or by an earlier spec of the same
// call) yields the holder, with Deduplicated set, instead of a new job; with
// ReplaceDuplicate a holder that is still queued first takes the spec's args,
// priority and run_at. The specs travel as typed arrays, one per field that some spec
// sets, and the engine checks the whole batch before it writes anything: a bad spec
// fails the call with [ErrInvalidInput] and the server's message naming its index in
// specs, and no job is enqueued.
func (c *Client) EnqueueMany(ctx context.Context, specs []JobSpec) ([]*Job, error) {
	return enqueueMany(ctx, c.pool, c.cfg.Queue, specs)
}

// EnqueueManyTx is [Client.EnqueueMany] inside the caller's transaction.
func (c *Client) EnqueueManyTx(ctx context.Context, tx pgx.Tx, specs []JobSpec) ([]*Job, error) {
	return enqueueMany(ctx, tx, c.cfg.Queue, specs)
}

// enqueueOne is Enqueue on db, with queue for a job that names none.
func enqueueOne(ctx context.Context, db DB, queue, kind string, args any, opts []Option) (*Job, error) {
	spec := JobSpec{Kind: kind, Args: args}
	for _, o := range opts {
		o(&spec)
	}
	jobs, err := enqueueMany(ctx, db, queue, []JobSpec{spec})
	if err != nil {
		return nil, err
	}
	if len(jobs) == 0 {
		return nil, fmt.Errorf("pgrun: enqueue %s: no job returned", spec.Kind)
	}
	return jobs[0], nil
}

// enqueueMany is EnqueueMany on db, with queue for the specs that name none.
func enqueueMany(ctx context.Context, db DB, queue string, specs []JobSpec) ([]*Job, error) {
	if len(specs) == 0 {
		return nil, nil
	}
	b := batch{queue: queue}
	for i, s := range specs {
		if err := b.add(i, len(specs), s); err != nil {
			return nil, err
		}
	}
	rows, err := db.Query(ctx, sqlapi.EnqueueColumns,
		b.kinds, b.args, b.queues, b.priorities, b.runAts, b.maxAttempts, b.uniqueKeys, b.parentIDs,
		b.models, b.timeouts, b.metas, b.concurrencyKeys, b.uniqueWindows, b.onConflicts, b.modelRequireds,
		b.sequenceKeys, b.debounceKeys, b.debounces, b.debounceEdges)
	if err != nil {
		return nil, dbError("enqueue", err)
	}
	jobs, err := collectEnqueued(rows, len(specs))
	if err != nil {
		return nil, dbError("enqueue", err)
	}
	return jobs, nil
}

// batch holds specs as the columns pgrun.enqueue_columns takes. A column no spec sets
// stays nil (SQL NULL: every job takes the default), so a batch of plain jobs sends
// only its kinds; an element a spec leaves zero is NULL, the engine's default.
type batch struct {
	queue           string // for specs that name none; "": the engine's default
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
	sequenceKeys    []pgtype.Text
	debounceKeys    []pgtype.Text
	debounces       []pgtype.Interval
	debounceEdges   []pgtype.Text
}

// add appends spec i of n. A spec with no kind takes its args' ([KindOf]), one with
// no queue the client's default (b.queue, "" for the engine's).
func (b *batch) add(i, n int, s JobSpec) error {
	if s.Kind == "" {
		s.Kind, _ = KindOf(s.Args)
	}
	if s.Queue == "" {
		s.Queue = b.queue
	}
	if s.Timeout < 0 && s.Timeout != NoTimeout {
		return invalidInput("enqueue %s: timeout %s is negative", s.Kind, s.Timeout)
	}
	if s.UniqueWindow < 0 {
		return invalidInput("enqueue %s: unique window %s is negative", s.Kind, s.UniqueWindow)
	}
	if s.Debounce < 0 {
		return invalidInput("enqueue %s: debounce window %s is negative", s.Kind, s.Debounce)
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
		return invalidInput("enqueue %s: priority %d is not valid (%d to %d)", s.Kind, s.Priority, MinPriority, MaxPriority)
	}
	if s.MaxAttempts < math.MinInt32 || s.MaxAttempts > math.MaxInt32 {
		return invalidInput("enqueue %s: max attempts %d is not valid (1 to %d)", s.Kind, s.MaxAttempts, math.MaxInt32)
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
	setText(&b.sequenceKeys, n, i, s.SequenceKey)
	setText(&b.debounceKeys, n, i, s.DebounceKey)
	if s.Debounce > 0 { // in whole microseconds, never rounded down to 0 (refused)
		lazyColumn(&b.debounces, n)[i] = pgtype.Interval{Microseconds: max(1, s.Debounce.Microseconds()), Valid: true}
	}
	setText(&b.debounceEdges, n, i, string(s.DebounceEdge))
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
