package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/sqlapi"
)

// maintainLoop calls pgrun.maintain() every MaintenanceInterval as a candidate for
// the maintenance lease: the database decides who leads (pgrun.take_maintenance), the
// leader's call does the work and renews the lease for three intervals, and the
// others' calls return at once. A leader that freezes (SIGSTOP, a GC pause, a stuck
// VM) or is partitioned stops renewing, so another runner takes over within three
// rounds; no session lock is involved that another role could hold. (A leader whose
// database session is seen to end, its process killed, loses the lease at once:
// pgrun.take_maintenance.)
//
// After an outage the runner settles (outage.go) before its next round: the
// completions it buffered are recorded before this runner, if it leads, judges any
// lease. Other runners' reports are covered by the grace the database gives every
// lease after the outage (pgrun.note_server_epoch).
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
		if err := r.settle(ctx); err != nil {
			if ctx.Err() == nil && !r.down.fail("maintain", err) {
				r.log.Warn("settling before maintenance failed", "err", err)
			}
			continue
		}
		var out []byte
		began := time.Now()
		err := r.pool.QueryRow(ctx, sqlapi.MaintainAsLeader, r.cfg.StallWindow, r.cfg.WorkerID, 3*r.cfg.MaintenanceInterval).Scan(&out)
		if err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "42501" {
				r.log.Warn("maintenance needs the pgrun_admin role; this runner leaves it to one that has it (or to pg_cron)", "err", pe.Message)
				return
			}
			if ctx.Err() == nil && !r.down.fail("maintain", err) {
				r.log.Warn("maintain failed", "err", err)
			}
			if ctx.Err() == nil {
				r.maintained(nil, time.Since(began), err)
			}
			continue
		}
		r.down.ok(began)
		var m map[string]json.RawMessage
		if json.Unmarshal(out, &m) != nil {
			continue
		}
		r.maintained(m, time.Since(began), nil)
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
// What a step did is a number at the top of the answer, or, for reap_lost_sessions,
// its "workers" (runners found dead) under "steps".
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
	var steps struct {
		Sessions struct {
			Workers float64 `json:"workers"`
		} `json:"reap_lost_sessions"`
	}
	if json.Unmarshal(m["steps"], &steps) == nil && steps.Sessions.Workers > 0 {
		r.log.Info("maintenance", "did", string(out))
	}
}

// waitForSchema waits until schema pgrun is installed, saying once why it waits.
func (r *Runner) waitForSchema(ctx context.Context) error {
	probe, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := pgrun.WaitForSchema(probe, r.pool, 100*time.Millisecond)
	cancel()
	if err == nil {
		return r.waitForAPI(ctx)
	}
	if ctx.Err() != nil {
		return err
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	r.log.Warn("waiting for schema pgrun: it is not installed in this database; run `runner migrate up` (or pgrun.Migrate)")
	if err := pgrun.WaitForSchema(ctx, r.pool, time.Second); err != nil {
		return err
	}
	return r.waitForAPI(ctx)
}

// ErrAPITooOld is returned by Run when the database's function set no longer serves
// callers of this build's SQL API version: upgrade the runner.
var ErrAPITooOld = errors.New("runner: this build's SQL API version is older than the database serves")

// apiPoll is how often a runner waiting for `migrate up` looks at the API version.
const apiPoll = time.Second

// waitForAPI checks the database's SQL API against this build's. An older one (the
// binary was deployed before `migrate up` ran) is waited for, said once; one that no
// longer serves this build's version is an error, so that Run exits instead of
// failing every claim. A newer one that still serves it is fine: rolling deploys
// migrate first and replace runners after.
func (r *Runner) waitForAPI(ctx context.Context) error {
	want := pgrun.APIVersion()
	said := false
	for {
		have, since, err := pgrun.DatabaseAPI(ctx, r.pool)
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		case since > want:
			return fmt.Errorf("%w: the database has version %d, which serves versions %d and newer; this runner has %d",
				ErrAPITooOld, have, since, want)
		case have >= want:
			if said {
				r.log.Info("the database's SQL API is current; starting", "api_version", have)
			}
			return nil
		}
		if !said {
			r.log.Warn("waiting for `runner migrate up`: the database has an older SQL API than this runner",
				"database_api_version", have, "runner_api_version", want)
			said = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(apiPoll):
		}
	}
}
