package runner

import (
	"context"
	"os"
	"slices"

	"maps"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/sqlapi"
)

// renewLoop keeps this runner's claims alive: every renewEvery one round trip renews the
// leases of every running job, sends the beats handlers recorded, and heartbeats the
// worker row (every DefaultLease/3 when the lease is left to the queues). A job whose lease did not renew is no longer ours; its handler's
// context is cancelled with ErrLeaseLost.
// Run sends the first heartbeat itself, before any claim.
func (r *Runner) renewLoop(ctx context.Context) {
	t := time.NewTicker(r.renewEvery())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.renew(ctx)
			r.pruneCancelled()
		case <-r.heartbeatCh:
			r.heartbeat(ctx, "running")
		}
	}
}

func (r *Runner) renew(ctx context.Context) {
	r.mu.Lock()
	execs := slices.Collect(maps.Values(r.running))
	fetchers := slices.Collect(maps.Values(r.fetchers))
	r.mu.Unlock()
	ids := make([]int64, 0, len(execs))
	claims := make([]pgrun.ClaimID, 0, len(execs))
	for _, f := range fetchers { // claimed jobs waiting for a slot are held too
		for _, j := range f.bufferedJobs() {
			ids, claims = append(ids, j.ID), append(claims, j.ClaimID)
		}
	}
	var beats []int64
	var beatClaims []pgrun.ClaimID
	for _, e := range execs {
		ids = append(ids, e.job.ID)
		claims = append(claims, e.job.ClaimID)
		if e.beat.Swap(false) {
			beats, beatClaims = append(beats, e.job.ID), append(beatClaims, e.job.ClaimID)
		}
	}
	b := &pgx.Batch{}
	var held map[int64]bool
	if len(ids) > 0 {
		b.Queue(sqlapi.RenewLeases, r.cfg.WorkerID, ids, r.leaseArg(), claims).Query(
			func(rows pgx.Rows) error {
				got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
				held = make(map[int64]bool, len(got))
				for _, id := range got {
					held[id] = true
				}
				return err
			})
	}
	if len(beats) > 0 {
		b.Queue(sqlapi.Beat, beats, r.cfg.WorkerID, beatClaims)
	}
	r.queueHeartbeat(b, "running")
	began := time.Now()
	if err := r.pool.SendBatch(ctx, b).Close(); err != nil {
		if ctx.Err() == nil && !r.down.fail("renew_leases", err) {
			r.log.Error("lease renewal failed", "jobs", len(ids), "err", err)
		}
		return
	}
	r.down.ok(began)
	for _, e := range execs {
		if held != nil && !held[e.job.ID] && e.ctx.Err() == nil && !e.completedInTx.Load() {
			r.log.Warn("lease lost; cancelling job", "job", e.job.ID)
			e.cancel(ErrLeaseLost)
		}
	}
}

// queueHeartbeat adds this worker's heartbeat to b. Its cadence is the renewal
// interval: maintain() flags the worker dead after three silent cadences.
func (r *Runner) queueHeartbeat(b *pgx.Batch, state string) {
	b.Queue(sqlapi.WorkerHeartbeat,
		r.cfg.WorkerID, r.cfg.Host, os.Getpid(), r.queueNames(),
		r.models(), r.cfg.Version, state, r.renewEvery(), r.cfg.Servable, r.handledKinds())
}

// heartbeat records the worker's state on its own.
func (r *Runner) heartbeat(ctx context.Context, state string) {
	b := &pgx.Batch{}
	r.queueHeartbeat(b, state)
	if err := r.pool.SendBatch(ctx, b).Close(); err != nil && ctx.Err() == nil && !r.down.fail("worker_heartbeat", err) {
		r.log.Warn("worker heartbeat failed", "err", err)
	}
}
