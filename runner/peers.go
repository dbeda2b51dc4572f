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

// peersLoop keeps what each fetcher knows of its queue (queueLook) up to date. A
// failed look leaves it as it was: it only tunes how many claims are in flight, how
// large they are and when a fetcher asks again. The first look is Run's, made before
// the first claim (a fair queue's first claims are capped as the rest are).
func (r *Runner) peersLoop(ctx context.Context) {
	for looks := 1; ; looks++ {
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
		r.lookForPeers(ctx)
	}
}

// queueLook is what a look found of one queue.
type queueLook struct {
	shared bool // other live workers serve it (see maxInflight)
	// ratePeriod is the window of its rate limit, 0 without one (see
	// fetcher.slotsFreed and fetcher.rateRetry).
	ratePeriod time.Duration
	// roomy: it has neither max_running nor concurrency_limit, so a completion makes
	// no room that a claim waits for (see execution.recordSoon).
	roomy bool
	// fairBy is its fair_by (concurrency_key or tenant), empty for none (see
	// fetcher.claimCap).
	fairBy string
}

// lookForPeers reads the peers and the rate limit of every queue this runner serves,
// once.
func (r *Runner) lookForPeers(ctx context.Context) {
	rows, err := r.pool.Query(ctx, sqlapi.QueuePeers, r.cfg.WorkerID, r.queueNames())
	if err == nil {
		var queue string
		var peers int32
		var periodUS int64
		var announces bool
		var fairBy string
		_, err = pgx.ForEachRow(rows, []any{&queue, &peers, &periodUS, &announces, &fairBy}, func() error {
			r.looked(queue, queueLook{shared: peers > 0, ratePeriod: time.Duration(periodUS) * time.Microsecond,
				roomy: !announces, fairBy: fairBy})
			return nil
		})
	}
	if err != nil && ctx.Err() == nil && !r.down.fail("queue_peers", err) {
		r.log.Debug("queue_peers failed", "err", err)
	}
}

// looked records what a look found of queue, for its fetcher now or when it starts.
func (r *Runner) looked(queue string, l queueLook) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.looks == nil {
		r.looks = map[string]queueLook{}
	}
	r.looks[queue] = l
	if f := r.fetchers[queue]; f != nil {
		f.apply(l)
	}
}

// apply takes what a look found of the fetcher's queue. A rate limit found or
// changed wakes the fetcher, so that a drained one takes up its retries (rateRetry).
func (f *fetcher) apply(l queueLook) {
	f.shared.Store(l.shared)
	f.roomy.Store(l.roomy)
	f.fair.Store(l.fairBy != "")
	f.fairByTenant.Store(l.fairBy == "tenant")
	if old := f.ratePeriod.Swap(int64(l.ratePeriod)); l.ratePeriod > 0 && old != int64(l.ratePeriod) {
		f.wake()
	}
}
