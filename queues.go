package pgrun

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgrun/pgrun/internal/sqlapi"
)

// QueueStats is one row of the queue_stats view (pgrun.queue_counts): how a queue is
// doing. Counts are exact up to pgrun.stats_exact_limit() (10,000) and sampled
// beyond, with Estimated set.
type QueueStats struct {
	Queue     string `db:"queue"`
	Paused    bool   `db:"paused"`
	Queued    int64  `db:"queued"`    // due now
	Scheduled int64  `db:"scheduled"` // queued for later
	Running   int64  `db:"running"`
	Pending   int64  `db:"pending"`
	Waiting   int64  `db:"waiting"`
	// OldestQueuedAge is how long the oldest due job has waited; nil if none waits.
	OldestQueuedAge *time.Duration `db:"oldest_queued_age"`
	Succeeded1m     int64          `db:"succeeded_1m"`
	Failed1m        int64          `db:"failed_1m"`
	Cancelled1m     int64          `db:"cancelled_1m"`
	// Unhandled counts due jobs of kinds no live worker serving the queue handles:
	// they wait for a deploy, not for capacity.
	Unhandled int64 `db:"unhandled"`
	Estimated bool  `db:"estimated"`
	// Held counts pending jobs held by their sequence (behind its head, or behind a
	// job that failed for good): [Client.JobBlocker] says why each waits.
	Held int64 `db:"held"`
	// FairBy is the queue's fairness key, nil when it claims in one global order.
	FairBy *string `db:"fair_by"`
	// ConcurrencyLimit is the per-key limit; KeysRunning, the concurrency keys with
	// jobs of the queue running now (nil without the limit).
	ConcurrencyLimit *int   `db:"concurrency_limit"`
	KeysRunning      *int64 `db:"keys_running"`
	// KeyRateLimit per KeyRatePeriod is the per-key rate; KeyWindows, the keys with a
	// rate window open now (nil without the limit).
	KeyRateLimit  *int           `db:"key_rate_limit"`
	KeyRatePeriod *time.Duration `db:"key_rate_period"`
	KeyWindows    *int64         `db:"key_windows"`
	// KeysAtLimit counts the keys that may start nothing more now: at their
	// concurrency limit or with their rate window full (nil without per-key limits).
	KeysAtLimit *int64 `db:"keys_at_limit"`
	// PriorityAging is how long a due job waits to gain one priority level, nil for
	// none.
	PriorityAging *time.Duration `db:"priority_aging"`
}

// QueuePolicy is one row of pgrun.queues: a queue's settings (docs/operations.md).
// A nil limit or default means none is set: no limit, or the engine's default.
type QueuePolicy struct {
	Name               string         `db:"name"`
	Paused             bool           `db:"paused"`
	CreatedAt          time.Time      `db:"created_at"`
	UpdatedAt          time.Time      `db:"updated_at"`
	MaxRunning         *int           `db:"max_running"`
	RateLimit          *int           `db:"rate_limit"`
	RatePeriod         *time.Duration `db:"rate_period"`
	RateWindowStart    *time.Time     `db:"rate_window_start"`
	RateWindowCount    int            `db:"rate_window_count"`
	ConcurrencyLimit   *int           `db:"concurrency_limit"`
	DefaultLease       *time.Duration `db:"default_lease"`
	DefaultTimeout     *time.Duration `db:"default_timeout"` // 0: jobs get no timeout
	DefaultMaxAttempts *int           `db:"default_max_attempts"`
	BackoffBase        *time.Duration `db:"backoff_base"`
	BackoffMax         *time.Duration `db:"backoff_max"`
	Retention          *time.Duration `db:"retention"`
	Archive            bool           `db:"archive"`
	WarmWait           *time.Duration `db:"warm_wait"`
	Ephemeral          bool           `db:"ephemeral"`
	// SequenceOnFailure is what a job of a sequence that fails for good does to the
	// jobs behind it: "hold" them (the default) or "continue".
	SequenceOnFailure string `db:"sequence_on_failure"`
	// FairBy, when set ("concurrency_key" or "tenant"), has claims take jobs
	// round-robin across that key's values.
	FairBy *string `db:"fair_by"`
	// KeyRateLimit caps claims per concurrency key per KeyRatePeriod (nil: 1 second).
	KeyRateLimit  *int           `db:"key_rate_limit"`
	KeyRatePeriod *time.Duration `db:"key_rate_period"`
	// PriorityAging raises a due job's priority one level per this much waiting.
	PriorityAging *time.Duration `db:"priority_aging"`
}

// QueueSettings is what [Client.SetQueue] changes: each field left nil keeps the
// queue's value, and Reset names settings to clear (back to no limit or the
// engine's default). The engine checks every value (pgrun.set_queue in
// sql/functions/queues.sql says what each means).
type QueueSettings struct {
	MaxRunning         *int // at most this many running at once, across runners
	RateLimit          *int // at most this many starts per RatePeriod
	RatePeriod         *time.Duration
	ConcurrencyLimit   *int // at most this many running per concurrency key
	DefaultLease       *time.Duration
	DefaultTimeout     *time.Duration // for jobs enqueued without one; 0 or NoTimeout: none
	DefaultMaxAttempts *int
	BackoffBase        *time.Duration
	BackoffMax         *time.Duration
	Retention          *time.Duration // how long finished jobs are kept
	Archive            *bool          // move pruned jobs to pgrun.jobs_archive
	WarmWait           *time.Duration
	Ephemeral          *bool // delete jobs as they succeed
	// SequenceOnFailure is "hold" (a sequence waits for its failed job to be retried
	// or cancelled) or "continue" (the next job runs).
	SequenceOnFailure *string
	// FairBy is "concurrency_key" or "tenant": claims go round-robin across that key's
	// values, so a key with a large backlog cannot starve one with a few jobs; the
	// queue's claims then take turns under its row lock (docs/operations.md, Fairness).
	FairBy *string
	// KeyRateLimit caps claims per concurrency key per KeyRatePeriod (default 1 second),
	// exactly, across runners.
	KeyRateLimit  *int
	KeyRatePeriod *time.Duration
	// PriorityAging raises a due job's effective priority by one level for every
	// PriorityAging it has waited, so that low-priority work is never starved.
	PriorityAging *time.Duration
	// Reset lists settings to clear, by their column names ("max_running", ...).
	Reset []string
}

// Queues returns every queue with its counts, by name.
func (c *Client) Queues(ctx context.Context) ([]QueueStats, error) {
	rows, err := c.pool.Query(ctx, sqlapi.QueueCounts)
	if err != nil {
		return nil, dbError("queues", err)
	}
	qs, err := pgx.CollectRows(rows, pgx.RowToStructByName[QueueStats])
	return qs, dbError("queues", err)
}

// QueuePolicies returns every queue's settings, by name.
func (c *Client) QueuePolicies(ctx context.Context) ([]QueuePolicy, error) {
	rows, err := c.pool.Query(ctx, sqlapi.ListQueues)
	if err != nil {
		return nil, dbError("queue policies", err)
	}
	qs, err := pgx.CollectRows(rows, pgx.RowToStructByName[QueuePolicy])
	return qs, dbError("queue policies", err)
}

// PauseQueue stops claims from queue name; running jobs go on, and pausing twice is
// harmless. A queue exists once a job was enqueued into it or [Client.SetQueue]
// named it: an unknown name gives [ErrQueueNotFound] and creates nothing.
func (c *Client) PauseQueue(ctx context.Context, name string) (*QueuePolicy, error) {
	return c.queueCall(ctx, "pause queue", name, sqlapi.PauseQueue, name)
}

// ResumeQueue lets claims from queue name start again and wakes the runners.
func (c *Client) ResumeQueue(ctx context.Context, name string) (*QueuePolicy, error) {
	return c.queueCall(ctx, "resume queue", name, sqlapi.ResumeQueue, name)
}

// SetQueue changes queue name's settings (creating the queue if need be) and
// returns them.
func (c *Client) SetQueue(ctx context.Context, name string, s QueueSettings) (*QueuePolicy, error) {
	timeout := s.DefaultTimeout
	if timeout != nil && *timeout == NoTimeout {
		timeout = new(time.Duration(0)) // the engine's "none"
	}
	return c.queueCall(ctx, "set queue", name, sqlapi.SetQueue, name, s.MaxRunning, s.RateLimit, s.RatePeriod,
		s.ConcurrencyLimit, s.DefaultLease, timeout, s.DefaultMaxAttempts, s.BackoffBase, s.BackoffMax,
		s.Retention, s.Archive, s.Reset, s.WarmWait, s.Ephemeral, s.SequenceOnFailure, s.FairBy,
		s.KeyRateLimit, s.KeyRatePeriod, s.PriorityAging)
}

// JobBlocker says why job id, queued or pending, is not being claimed now: every
// reason that holds (held by its sequence, not due yet, its queue paused, no live
// worker for its queue or kind, a queue or per-key limit reached, ...), joined by
// "; ", or "" when nothing holds it (it waits only for the jobs ahead of it, or is
// neither queued nor pending). An unknown id gives [ErrNotFound] (pgrun.job_blocker).
func (c *Client) JobBlocker(ctx context.Context, id int64) (string, error) {
	var why *string
	if err := c.pool.QueryRow(ctx, sqlapi.JobBlocker, id).Scan(&why); err != nil {
		if sqlState(err) == "P0002" {
			return "", jobNotFound(id, err)
		}
		return "", dbError("job blocker", err)
	}
	if why == nil {
		return "", nil
	}
	return *why, nil
}

// queueCall runs a statement returning one row of pgrun.queues.
func (c *Client) queueCall(ctx context.Context, op, name, sql string, args ...any) (*QueuePolicy, error) {
	rows, err := c.pool.Query(ctx, sql, args...)
	if err == nil {
		var q *QueuePolicy
		q, err = pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[QueuePolicy])
		if err == nil {
			return q, nil
		}
	}
	switch {
	case sqlState(err) == "P0002":
		return nil, newError([]error{ErrQueueNotFound, err}, "queue %q not found", name)
	case errors.Is(err, pgx.ErrNoRows):
		return nil, newError([]error{ErrQueueNotFound}, "queue %q not found", name)
	}
	return nil, dbError(op+" "+name, err)
}
