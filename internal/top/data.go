// Package top is `runner top`, the CLI's live full-screen view of the engine, and
// the numbers it shares with `runner status`: each queue with its counts, its
// throughput over the last 10 seconds and the last minute and the live workers
// serving it; the running jobs with their progress; the workers, live, dead and
// stopped. Every number comes from the SQL side (queue_stats, finished_counts,
// worker_status), so the rules behind them (what is live, how a large count is
// estimated) are written once, in SQL.
package top

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgrun/pgrun/internal/sqlapi"
)

// Querier is what reading needs: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Queue is one queue's line (sqlapi.StatusQueues). Its JSON form is what `runner
// status --json` prints.
type Queue struct {
	Queue     string `db:"queue" json:"queue"`
	Paused    bool   `db:"paused" json:"paused"`
	Queued    int64  `db:"queued" json:"queued"` // due now
	Scheduled int64  `db:"scheduled" json:"scheduled"`
	Running   int64  `db:"running" json:"running"`
	Pending   int64  `db:"pending" json:"pending"`
	Waiting   int64  `db:"waiting" json:"waiting"`
	// OldestQueuedAge is how long the oldest due job has waited; nil: none waits.
	OldestQueuedAge *time.Duration `db:"oldest_queued_age" json:"-"`
	// OldestQueuedSeconds is OldestQueuedAge for JSON (filled by ReadQueues).
	OldestQueuedSeconds *float64 `db:"-" json:"oldest_queued_age_seconds"`
	Succeeded1m         int64    `db:"succeeded_1m" json:"succeeded_1m"`
	Failed1m            int64    `db:"failed_1m" json:"failed_1m"`
	Cancelled1m         int64    `db:"cancelled_1m" json:"cancelled_1m"`
	// Unhandled counts due jobs of kinds no live worker serving the queue handles:
	// they wait for a deploy, not for capacity.
	Unhandled int64 `db:"unhandled" json:"unhandled"`
	// Estimated: a count of the row is an estimate (over pgrun.stats_exact_limit(),
	// counts are sampled); such counts print with a "~".
	Estimated    bool  `db:"estimated" json:"estimated"`
	Succeeded10s int64 `db:"succeeded_10s" json:"succeeded_10s"`
	Failed10s    int64 `db:"failed_10s" json:"failed_10s"`
	Cancelled10s int64 `db:"cancelled_10s" json:"cancelled_10s"`
	Estimated10s bool  `db:"estimated_10s" json:"estimated_10s"`
	// LiveWorkers counts the live workers serving the queue (worker_status.liveness).
	LiveWorkers int64 `db:"live_workers" json:"live_workers"`
	// JobsPerSec10s and JobsPerSec1m are the jobs that ended (succeeded or failed)
	// per second over the last 10 seconds and the last minute (filled by ReadQueues).
	JobsPerSec10s float64 `db:"-" json:"jobs_per_sec_10s"`
	JobsPerSec1m  float64 `db:"-" json:"jobs_per_sec_1m"`
}

// Worker is one registered worker (sqlapi.StatusWorkers).
type Worker struct {
	ID    string `db:"id" json:"id"`
	Host  string `db:"host" json:"host"`
	PID   int32  `db:"pid" json:"pid"`
	State string `db:"state" json:"state"` // as it reported: running, draining, stopped
	// Liveness is the engine's view: live, dead (silent for three heartbeat cadences,
	// or flagged) or stopped.
	Liveness      string        `db:"liveness" json:"liveness"`
	Queues        []string      `db:"queues" json:"queues"`
	Models        []string      `db:"models" json:"models"`
	LastSeen      time.Time     `db:"last_seen" json:"last_seen"`
	SinceSeen     time.Duration `db:"since_seen" json:"-"` // by the engine's clock
	Cadence       time.Duration `db:"cadence" json:"-"`
	FlaggedDeadAt *time.Time    `db:"flagged_dead_at" json:"flagged_dead_at,omitempty"`
	Running       int64         `db:"running" json:"running"` // jobs it holds
}

// RunningJob is one running job (sqlapi.TopRunningJobs).
type RunningJob struct {
	ID              int64         `db:"id"`
	Queue           string        `db:"queue"`
	Kind            string        `db:"kind"`
	Attempt         int           `db:"attempt"`
	Worker          *string       `db:"worker"`
	Runtime         time.Duration `db:"runtime"`
	ProgressCurrent int64         `db:"progress_current"`
	ProgressTotal   *int64        `db:"progress_total"`
}

// Snapshot is what one frame of top shows.
type Snapshot struct {
	At      time.Time
	Queues  []Queue
	Jobs    []RunningJob
	Workers []Worker
}

// Read takes a snapshot: every queue and worker, and at most maxJobs running jobs.
func Read(ctx context.Context, db Querier, maxJobs int) (*Snapshot, error) {
	s := &Snapshot{At: time.Now()}
	var err error
	if s.Queues, err = ReadQueues(ctx, db); err != nil {
		return nil, err
	}
	if s.Workers, err = ReadWorkers(ctx, db); err != nil {
		return nil, err
	}
	rows, err := db.Query(ctx, sqlapi.TopRunningJobs, maxJobs)
	if err != nil {
		return nil, readError("running jobs", err)
	}
	s.Jobs, err = pgx.CollectRows(rows, pgx.RowToStructByName[RunningJob])
	if err != nil {
		return nil, readError("running jobs", err)
	}
	return s, nil
}

// ReadQueues reads every queue's line, by name.
func ReadQueues(ctx context.Context, db Querier) ([]Queue, error) {
	rows, err := db.Query(ctx, sqlapi.StatusQueues)
	if err != nil {
		return nil, readError("queues", err)
	}
	qs, err := pgx.CollectRows(rows, pgx.RowToStructByName[Queue])
	if err != nil {
		return nil, readError("queues", err)
	}
	for i := range qs {
		q := &qs[i]
		q.JobsPerSec10s = float64(q.Succeeded10s+q.Failed10s) / 10
		q.JobsPerSec1m = float64(q.Succeeded1m+q.Failed1m) / 60
		if q.OldestQueuedAge != nil {
			s := q.OldestQueuedAge.Seconds()
			q.OldestQueuedSeconds = &s
		}
	}
	return qs, nil
}

// ReadWorkers reads the registered workers: live, then dead, then stopped.
func ReadWorkers(ctx context.Context, db Querier) ([]Worker, error) {
	rows, err := db.Query(ctx, sqlapi.StatusWorkers)
	if err != nil {
		return nil, readError("workers", err)
	}
	ws, err := pgx.CollectRows(rows, pgx.RowToStructByName[Worker])
	if err != nil {
		return nil, readError("workers", err)
	}
	return ws, nil
}

// readError names what was being read, and says what to do when the database's
// pgrun functions or views predate this build (a function or column it lacks).
func readError(what string, err error) error {
	var pe *pgconn.PgError
	// 42883, 42703: undefined function, undefined column.
	if errors.As(err, &pe) && (pe.Code == "42883" || pe.Code == "42703") {
		return fmt.Errorf("read %s: the database's schema pgrun is older than this runner (%s): run `runner migrate up`", what, pe.Message)
	}
	return fmt.Errorf("read %s: %w", what, err)
}

// Warnings returns a line for each queue that needs a person: due jobs and no live
// worker serving the queue at all, or due jobs of kinds that none of the live
// workers serving it handles. Neither fails a job: they wait.
func Warnings(queues []Queue) []string {
	var lines []string
	for _, q := range queues {
		switch {
		case q.Queued > 0 && q.LiveWorkers == 0:
			lines = append(lines, fmt.Sprintf("%s: %s and no live worker serves this queue", q.Queue, plural(q.Queued, "queued job")))
		case q.Unhandled == 1:
			lines = append(lines, fmt.Sprintf("%s: 1 queued job of a kind no live worker handles", q.Queue))
		case q.Unhandled > 1:
			lines = append(lines, fmt.Sprintf("%s: %d queued jobs of kinds no live worker handles", q.Queue, q.Unhandled))
		}
	}
	return lines
}

// plural renders "1 queued job" or "3 queued jobs".
func plural(n int64, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// Count renders a count of q, with a "~" when q's counts are estimated and this one
// is large enough to have been (counts under 10,000 are always exact).
func Count(q Queue, v int64) string {
	if q.Estimated && v > 10000 {
		return fmt.Sprintf("~%d", v)
	}
	return fmt.Sprint(v)
}

// Age rounds d for a person: milliseconds under a second, tenths under a minute,
// seconds beyond.
func Age(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}
