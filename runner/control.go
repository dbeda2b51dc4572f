package runner

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// ChannelControl carries a host name whenever an operator changes that host's worker
// control (pgrun.set_worker_control).
const ChannelControl = "pgrun_control"

// controlLoop applies the operator's worker control for this runner's host: on a
// pgrun_control notification for the host, and every PollInterval in case one was
// missed. claim_jobs already refuses to hand out jobs under drain and off; here, off
// also cancels the jobs running in that queue, which are requeued without spending
// an attempt.
func (r *Runner) controlLoop(ctx context.Context) {
	t := time.NewTicker(r.cfg.PollInterval)
	defer t.Stop()
	for {
		r.applyControl(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.controlCh:
		}
	}
}

func (r *Runner) applyControl(ctx context.Context) {
	rows, err := r.pool.Query(ctx, `select queue, mode from pgrun.worker_modes($1, $2)`, r.cfg.Host, r.queueNames())
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("reading worker control failed", "err", err)
		}
		return
	}
	var queue, mode string
	off := map[string]bool{}
	if _, err := pgx.ForEachRow(rows, []any{&queue, &mode}, func() error {
		off[queue] = mode == "off"
		return nil
	}); err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.running {
		if off[e.job.Queue] && e.ctx.Err() == nil {
			r.log.Info("worker control off: cancelling job for requeue", "job", e.job.ID, "queue", e.job.Queue)
			e.cancel(ErrWorkerOff)
		}
	}
}

// controlChanged is called by the listener for a pgrun_control notification.
func (r *Runner) controlChanged(host string) {
	if host != r.cfg.Host {
		return
	}
	select {
	case r.controlCh <- struct{}{}:
	default:
	}
}
