package pgrun

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgrun/pgrun/internal/sqlapi"
)

// MaintainReport is what one round of pgrun.maintain() did (docs/sql-api.md,
// "maintain()").
type MaintainReport struct {
	LeaseRequeued      int `json:"lease_requeued"`       // expired leases put back
	LeaseFailed        int `json:"lease_failed"`         // jobs failed past their lease budget
	TimedOut           int `json:"timed_out"`            // attempts failed by the timeout rule
	WorkersFlaggedDead int `json:"workers_flagged_dead"` // silent workers holding jobs
	WorkersForgotten   int `json:"workers_forgotten"`    // workers not seen for a day, removed
	SchedulesFired     int `json:"schedules_fired"`
	Pruned             int `json:"pruned"` // finished jobs deleted or archived
	OutboxDispatched   int `json:"outbox_dispatched"`
	OutboxRetried      int `json:"outbox_retried"`
	OutboxPoisoned     int `json:"outbox_poisoned"`
	// Skipped: another worker holds maintenance (Leader); nothing was done.
	Skipped bool   `json:"skipped"`
	Leader  string `json:"leader"`
	// Errors names the steps that failed, with their messages; the other steps ran.
	Errors map[string]string `json:"errors"`
	// BrokenJobs are jobs a failing step could not process, failed with class
	// maintenance_error.
	BrokenJobs []int64 `json:"broken_jobs"`
	// Raw is the report as the engine wrote it, with any key this version does not
	// know.
	Raw json.RawMessage `json:"-"`
}

// Maintain runs one round of the engine's periodic work with its defaults
// (pgrun.maintain(): reap expired leases, the timeout rule, dead workers, the outbox,
// schedules, pruning) and returns what it did. A Go runner calls it every second
// already; call it yourself where no runner runs (a cron job, a test).
func (c *Client) Maintain(ctx context.Context) (*MaintainReport, error) {
	var raw string
	if err := c.pool.QueryRow(ctx, sqlapi.Maintain).Scan(&raw); err != nil {
		return nil, dbError("maintain", err)
	}
	r := &MaintainReport{Raw: json.RawMessage(raw)}
	if err := json.Unmarshal(r.Raw, r); err != nil {
		return nil, dbError("maintain: read the report", err)
	}
	return r, nil
}

// MaintenanceStep is one row of pgrun.maintenance_steps: how often maintain() runs a
// step, and when it last did.
type MaintenanceStep struct {
	Step string `db:"step"`
	// Every is the step's cadence: 0 runs it every round, else at most once per
	// Every.
	Every     time.Duration `db:"every"`
	LastRunAt *time.Time    `db:"last_run_at"` // nil: not run on a cadence yet
}

// SetMaintenanceStep sets how often maintain() runs step (pgrun.set_maintenance_step):
// 0 every round, else at most once per every, up to a day. Reaping leases and the
// timeout rule want every round; pruning history or forgetting old workers need not
// run every second. An unknown step or a cadence out of range gives
// [ErrInvalidInput] with the server's hint listing the steps.
func (c *Client) SetMaintenanceStep(ctx context.Context, step string, every time.Duration) (*MaintenanceStep, error) {
	rows, err := c.pool.Query(ctx, sqlapi.SetMaintenanceStep, step, every)
	if err != nil {
		return nil, dbError("set maintenance step "+step, err)
	}
	s, err := pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[MaintenanceStep])
	return s, dbError("set maintenance step "+step, err)
}
