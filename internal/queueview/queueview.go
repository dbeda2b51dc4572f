// Package queueview holds the rows of one queue's view (its settings with their use
// now, its counts, the keys using its per-key limits, its held sequences and its first
// due jobs), as the statements of internal/sqlapi/dashboard_queue.go return them: the
// dashboard's queue page (ui) and `runner queue show` read the same rows.
package queueview

import "time"

// StatsExactLimit is pgrun.stats_exact_limit(): queue_stats counts exactly up to it,
// and its held count stops one past it.
const StatsExactLimit = 10000

// Settings is a queue's row of pgrun.queues (sqlapi.DashboardQueue), its
// intervals in seconds (nil: not set, the engine's default applies; the rates'
// periods are the ones the claim applies), and its queue-wide rate window if one is
// open.
type Settings struct {
	Queue              string     `db:"queue" json:"queue"`
	Paused             bool       `db:"paused" json:"paused"`
	MaxRunning         *int       `db:"max_running" json:"max_running"`
	RateLimit          *int       `db:"rate_limit" json:"rate_limit"`
	RatePeriodSecs     float64    `db:"rate_period_secs" json:"rate_period_secs"`
	RateWindowCount    *int       `db:"rate_window_count" json:"rate_window_count"`
	RateWindowEnds     *time.Time `db:"rate_window_ends" json:"rate_window_ends"`
	ConcurrencyLimit   *int       `db:"concurrency_limit" json:"concurrency_limit"`
	KeyRateLimit       *int       `db:"key_rate_limit" json:"key_rate_limit"`
	KeyRatePeriodSecs  float64    `db:"key_rate_period_secs" json:"key_rate_period_secs"`
	FairBy             *string    `db:"fair_by" json:"fair_by"`
	PriorityAgingSecs  *float64   `db:"priority_aging_secs" json:"priority_aging_secs"`
	SequenceOnFailure  string     `db:"sequence_on_failure" json:"sequence_on_failure"`
	DefaultLeaseSecs   *float64   `db:"default_lease_secs" json:"default_lease_secs"`
	DefaultTimeoutSecs *float64   `db:"default_timeout_secs" json:"default_timeout_secs"`
	DefaultMaxAttempts *int       `db:"default_max_attempts" json:"default_max_attempts"`
	BackoffBaseSecs    *float64   `db:"backoff_base_secs" json:"backoff_base_secs"`
	BackoffMaxSecs     *float64   `db:"backoff_max_secs" json:"backoff_max_secs"`
	RetentionSecs      *float64   `db:"retention_secs" json:"retention_secs"`
	Archive            bool       `db:"archive" json:"archive"`
	WarmWaitSecs       *float64   `db:"warm_wait_secs" json:"warm_wait_secs"`
	Ephemeral          bool       `db:"ephemeral" json:"ephemeral"`
}

// PerKey reports whether the queue limits its keys (a concurrency limit or a rate).
func (q Settings) PerKey() bool { return q.ConcurrencyLimit != nil || q.KeyRateLimit != nil }

// Counts is the queue's line of pgrun.queue_stats (sqlapi.DashboardQueueStats):
// exact up to 10,000 per number, estimated beyond (Estimated).
type Counts struct {
	Queued           int64    `db:"queued" json:"queued"`
	Scheduled        int64    `db:"scheduled" json:"scheduled"`
	Running          int64    `db:"running" json:"running"`
	Pending          int64    `db:"pending" json:"pending"`
	Waiting          int64    `db:"waiting" json:"waiting"`
	OldestQueuedSecs *float64 `db:"oldest_queued_secs" json:"oldest_queued_secs"`
	Succeeded1m      int64    `db:"succeeded_1m" json:"succeeded_1m"`
	Failed1m         int64    `db:"failed_1m" json:"failed_1m"`
	Cancelled1m      int64    `db:"cancelled_1m" json:"cancelled_1m"`
	Unhandled        int64    `db:"unhandled" json:"unhandled"`
	Estimated        bool     `db:"estimated" json:"estimated"`
	Held             int64    `db:"held" json:"held"`
	KeysRunning      *int64   `db:"keys_running" json:"keys_running"`
	KeyWindows       *int64   `db:"key_windows" json:"key_windows"`
	KeysAtLimit      *int64   `db:"keys_at_limit" json:"keys_at_limit"`
	LiveWorkers      int64    `db:"live_workers" json:"live_workers"`
}

// HeldPast reports whether the held count stopped at StatsExactLimit: there are more.
func (c Counts) HeldPast() bool { return c.Held > StatsExactLimit }

// Key is one key using the queue's per-key limits (pgrun.queue_keys): its
// running jobs and the claims in its rate window, each beside its limit, how many
// more may start now (Room), and its queued jobs (QueuedMore: over the count's cap).
type Key struct {
	Key              string     `db:"key" json:"key"`
	Running          int64      `db:"running" json:"running"`
	ConcurrencyLimit *int       `db:"concurrency_limit" json:"concurrency_limit"`
	WindowCount      *int       `db:"window_count" json:"window_count"`
	KeyRateLimit     *int       `db:"key_rate_limit" json:"key_rate_limit"`
	WindowEnds       *time.Time `db:"window_ends" json:"window_ends"`
	Room             *int       `db:"room" json:"room"`
	Queued           int64      `db:"queued" json:"queued"`
	QueuedMore       bool       `db:"queued_more" json:"queued_more"`
	KeysInUse        int64      `db:"keys_in_use" json:"-"`
}

// AtLimit reports whether the key may start nothing more now.
func (k Key) AtLimit() bool { return k.Room != nil && *k.Room == 0 }

// Sequence is one sequence that holds jobs (pgrun.queue_sequences): its head or
// the failed job that holds it, the jobs it holds (HeldMore: over the count's cap), the
// first of them and why it waits; Stopped when a failure holds it.
type Sequence struct {
	Key        string  `db:"sequence_key" json:"sequence_key"`
	Tenant     *string `db:"tenant" json:"tenant"`
	HeadID     *int64  `db:"head_id" json:"head_id"`
	HeadStatus *string `db:"head_status" json:"head_status"`
	Held       int64   `db:"held" json:"held"`
	HeldMore   bool    `db:"held_more" json:"held_more"`
	FirstHeld  int64   `db:"first_held" json:"first_held"`
	Reason     *string `db:"reason" json:"reason"`
	Stopped    bool    `db:"stopped" json:"stopped"`
}

// Due is one of the queue's first due jobs (sqlapi.DashboardQueueDue) with what
// holds it (pgrun.job_blocker; nil: nothing but the jobs ahead of it).
type Due struct {
	ID             int64     `db:"id" json:"id"`
	Kind           string    `db:"kind" json:"kind"`
	Priority       int16     `db:"priority" json:"priority"`
	RunAt          time.Time `db:"run_at" json:"run_at"`
	Attempt        int       `db:"attempt" json:"attempt"`
	ConcurrencyKey *string   `db:"concurrency_key" json:"concurrency_key"`
	SequenceKey    *string   `db:"sequence_key" json:"sequence_key"`
	Tenant         *string   `db:"tenant" json:"tenant"`
	Blocker        *string   `db:"blocker" json:"blocker"`
}
