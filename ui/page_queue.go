package ui

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/pgrun/pgrun/internal/sqlapi"
)

// What a queue's page lists, at most, of each part (issue 35: every control visible).
// Each part says how many it left out; the SQL reads about as many rows as it
// returns (75_queue_view.sql), so these also bound the page's cost.
const (
	queueKeysShown      = 20
	queueSequencesShown = 20
	queueDueShown       = 20
)

// queueSettings is a queue's row of pgrun.queues (sqlapi.DashboardQueue), its
// intervals in seconds (nil: not set, the engine's default applies; the rates'
// periods are the ones the claim applies), and its queue-wide rate window if one is
// open.
type queueSettings struct {
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
func (q queueSettings) PerKey() bool { return q.ConcurrencyLimit != nil || q.KeyRateLimit != nil }

// statsExactLimit is pgrun.stats_exact_limit(): queue_stats counts exactly up to it,
// and its held count stops one past it.
const statsExactLimit = 10000

// queueCounts is the queue's line of pgrun.queue_stats (sqlapi.DashboardQueueStats):
// exact up to 10,000 per number, estimated beyond (Estimated).
type queueCounts struct {
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

// HeldText is the held count as the page shows it: past statsExactLimit the count
// stopped, so it says "10,000+".
func (c queueCounts) HeldText() string {
	if c.Held > statsExactLimit {
		return num(statsExactLimit) + "+"
	}
	return num(c.Held)
}

// queueKey is one key using the queue's per-key limits (pgrun.queue_keys): its
// running jobs and the claims in its rate window, each beside its limit, how many
// more may start now (Room), and its queued jobs (QueuedMore: over the count's cap).
type queueKey struct {
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
func (k queueKey) AtLimit() bool { return k.Room != nil && *k.Room == 0 }

// heldSequence is one sequence that holds jobs (pgrun.queue_sequences): its head or
// the failed job that holds it, the jobs it holds (HeldMore: over the count's cap), the
// first of them and why it waits; Stopped when a failure holds it.
type heldSequence struct {
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

// dueJob is one of the queue's first due jobs (sqlapi.DashboardQueueDue) with what
// holds it (pgrun.job_blocker; nil: nothing but the jobs ahead of it).
type dueJob struct {
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

type queueData struct {
	Settings queueSettings `json:"settings"`
	// Counts is nil when queue_stats could not be read (a problem line says why).
	Counts *queueCounts `json:"counts"`
	// Keys are the keys using the per-key limits, those at their limit first;
	// KeysInUse is how many use them in all (each source counted to 10,000), KeysMore
	// how many of those are not listed.
	Keys      []queueKey `json:"keys"`
	KeysInUse int64      `json:"keys_in_use"`
	KeysMore  int64      `json:"keys_more"`
	// Sequences are the sequences holding jobs, those a failure stopped first;
	// SequencesMore says more hold jobs than are listed.
	Sequences     []heldSequence `json:"sequences"`
	SequencesMore bool           `json:"sequences_more"`
	// Due are the first due jobs by priority, due time and id, each with what holds
	// it; DueMore is how many more are due (estimated when Counts is).
	Due     []dueJob `json:"due"`
	DueMore int64    `json:"due_more"`
}

// queuePage is one queue's page (/queues/NAME): its settings with their use now (the
// queue's rate window, its running jobs beside max_running), its counts, the keys
// using its per-key limits, its held sequences and its first due jobs with why each
// is not claimed. An unknown queue is a 404. The counts (queue_stats, the page's
// costliest read) go on one connection while the rest go one after another on
// another (readLanes).
func (s *Server) queuePage(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	ctx := r.Context()
	settings, err := collect[queueSettings](ctx, s.pool, sqlapi.DashboardQueue, name)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	if len(settings) == 0 {
		s.fail(w, r, http.StatusNotFound, fmt.Errorf("queue %q does not exist: a queue appears with its first job, "+
			"or with `runner queue set %s`", name, name))
		return
	}
	d := queueData{Settings: settings[0]}
	var keys []queueKey
	problems := s.readLanes(ctx, [][]overviewSection{{
		{"counts", func(ctx context.Context, db queryer) error {
			c, err := collect[queueCounts](ctx, db, sqlapi.DashboardQueueStats, name)
			if len(c) == 1 {
				d.Counts = &c[0]
			}
			return err
		}},
	}, {
		{"keys in use", func(ctx context.Context, db queryer) (err error) {
			if d.Settings.PerKey() {
				keys, err = collect[queueKey](ctx, db, sqlapi.DashboardQueueKeys, name, queueKeysShown)
			}
			return err
		}},
		{"held sequences", func(ctx context.Context, db queryer) (err error) {
			d.Sequences, err = collect[heldSequence](ctx, db, sqlapi.DashboardQueueSequences, name, queueSequencesShown+1)
			return err
		}},
		{"due jobs", func(ctx context.Context, db queryer) (err error) {
			d.Due, err = collect[dueJob](ctx, db, sqlapi.DashboardQueueDue, name, queueDueShown)
			return err
		}},
	}})
	d.Keys = keys
	if len(keys) > 0 {
		d.KeysInUse = keys[0].KeysInUse
		d.KeysMore = max(d.KeysInUse-int64(len(keys)), 0)
	}
	if len(d.Sequences) > queueSequencesShown {
		d.Sequences, d.SequencesMore = d.Sequences[:queueSequencesShown], true
	}
	if d.Counts != nil {
		d.DueMore = max(d.Counts.Queued-int64(len(d.Due)), 0)
	}
	if d.Keys == nil {
		d.Keys = []queueKey{}
	}
	if d.Sequences == nil {
		d.Sequences = []heldSequence{}
	}
	if d.Due == nil {
		d.Due = []dueJob{}
	}
	s.render(w, r, "queue", "Queue "+name, d, problems...)
}

// readLanes runs each lane's reads one after another on one connection of the
// pool, the lanes at once, and returns a problem line per read that failed, sorted.
// A read's error leaves the connection to the next read of its lane (each statement
// is its own transaction); a connection that could not be had fails its lane's reads.
func (s *Server) readLanes(ctx context.Context, lanes [][]overviewSection) []string {
	var problems []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, lane := range lanes {
		wg.Go(func() {
			conn, err := s.pool.Acquire(ctx)
			if err == nil {
				defer conn.Release()
			}
			for _, sec := range lane {
				failed := err
				if failed == nil {
					failed = sec.read(ctx, conn)
				}
				if failed != nil {
					mu.Lock()
					problems = append(problems, problem(sec.name, failed))
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	sort.Strings(problems)
	return problems
}
