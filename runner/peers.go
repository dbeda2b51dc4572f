package runner

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgrun/pgrun/internal/sqlapi"
)

// How often a runner asks how many other live workers serve its queues
// (pgrun.queue_peers): every second for its first peersQuickLooks looks, so that a
// fleet started together settles within a second, then with each heartbeat
// (renewEvery, 10 s by default), so that a runner that joins later is seen within one
// cadence. A look reads every worker's queues once, so a large fleet with many
// queues must not make it every second for good.
const (
	peersQuickEvery = time.Second
	peersQuickLooks = 5
)

// peersLoop keeps each fetcher's shared flag (see maxInflight) and rateLimited flag
// (see slotsFreed) up to date. A failed look leaves the flags as they were: they only tune
// how many claims are in flight and when a fetcher asks again.
func (r *Runner) peersLoop(ctx context.Context) {
	for looks := 1; ; looks++ {
		r.lookForPeers(ctx)
		wait := r.renewEvery()
		if looks < peersQuickLooks {
			wait = min(wait, peersQuickEvery)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// lookForPeers reads the peers and the rate limits of every queue this runner serves
// once.
func (r *Runner) lookForPeers(ctx context.Context) {
	rows, err := r.pool.Query(ctx, sqlapi.QueuePeers, r.cfg.WorkerID, r.queueNames())
	if err == nil {
		var queue string
		var peers int32
		var limited bool
		_, err = pgx.ForEachRow(rows, []any{&queue, &peers, &limited}, func() error {
			r.setShared(queue, peers > 0)
			r.setRateLimited(queue, limited)
			return nil
		})
	}
	if err != nil && ctx.Err() == nil && !r.down.fail("queue_peers", err) {
		r.log.Debug("queue_peers failed", "err", err)
	}
}

// setShared records whether queue has peers, for its fetcher now or when it starts.
func (r *Runner) setShared(queue string, shared bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.shared == nil {
		r.shared = map[string]bool{}
	}
	r.shared[queue] = shared
	if f := r.fetchers[queue]; f != nil {
		f.shared.Store(shared)
	}
}

// setRateLimited records whether queue has a rate limit, for its fetcher now or when
// it starts. Until a look says otherwise a queue counts as rate-limited.
func (r *Runner) setRateLimited(queue string, limited bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rateLimited == nil {
		r.rateLimited = map[string]bool{}
	}
	r.rateLimited[queue] = limited
	if f := r.fetchers[queue]; f != nil {
		f.rateLimited.Store(limited)
	}
}
