package runner

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgrun/pgrun"
)

// maintainLoop calls pgrun.maintain() every MaintenanceInterval as a candidate for
// the maintenance lease: the database decides who leads (pgrun.take_maintenance), the
// leader's call does the work and renews the lease for three intervals, and the
// others' calls return at once. A leader that freezes (SIGSTOP, a GC pause, a stuck
// VM) or is partitioned stops renewing, so another runner takes over within three
// rounds; no session lock is involved that another role could hold.
func (r *Runner) maintainLoop(ctx context.Context) {
	t := time.NewTicker(r.cfg.MaintenanceInterval)
	defer t.Stop()
	leading := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var out []byte
		began := time.Now()
		err := r.pool.QueryRow(ctx, `select pgrun.maintain(stall_window => $1, leader => $2, leader_lease => $3)::text`,
			r.cfg.StallWindow, r.cfg.WorkerID, 3*r.cfg.MaintenanceInterval).Scan(&out)
		if err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "42501" {
				r.log.Warn("maintenance needs the pgrun_admin role; this runner leaves it to one that has it (or to pg_cron)", "err", pe.Message)
				return
			}
			if ctx.Err() == nil && !r.down.fail("maintain", err) {
				r.log.Warn("maintain failed", "err", err)
			}
			continue
		}
		r.down.ok(began)
		var m map[string]json.RawMessage
		if json.Unmarshal(out, &m) != nil {
			continue
		}
		_, skipped := m["skipped"]
		if skipped == leading {
			if leading = !skipped; leading {
				r.log.Info("maintenance leader")
			} else {
				r.log.Info("maintenance led by another runner", "leader", string(m["leader"]))
			}
		}
		if !skipped {
			r.logMaintenance(m, out)
		}
	}
}

// logMaintenance logs a maintain() round that did something, and its step errors.
func (r *Runner) logMaintenance(m map[string]json.RawMessage, out []byte) {
	if errs, ok := m["errors"]; ok {
		r.log.Error("maintenance steps failed; the other steps ran", "errors", string(errs), "broken_jobs", string(m["broken_jobs"]))
	}
	for _, v := range m {
		var n float64
		if json.Unmarshal(v, &n) == nil && n > 0 {
			r.log.Info("maintenance", "did", string(out))
			return
		}
	}
}

// waitForSchema waits until schema pgrun is installed, saying once why it waits.
func (r *Runner) waitForSchema(ctx context.Context) error {
	probe, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := pgrun.WaitForSchema(probe, r.pool, 100*time.Millisecond)
	cancel()
	if err == nil || ctx.Err() != nil {
		return err
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	r.log.Warn("waiting for schema pgrun: it is not installed in this database; run `runner migrate up` (or pgrun.Migrate)")
	return pgrun.WaitForSchema(ctx, r.pool, time.Second)
}
