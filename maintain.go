package pgrun

import (
	"context"
	"encoding/json"

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
