package runner

import (
	"context"
	"fmt"
	"time"

	"github.com/pgrun/pgrun"
)

// fetcher claims jobs for one queue: whenever it is woken (a notification, a freed
// slot) or its poll ticks, it claims up to its free slots in one call and starts an
// execution per job, repeating while claims come back full. With a backlog it keeps
// a second claim in flight while the first is on its way, so that the round trip of
// one claim overlaps the next: a single claim at a time left the database idle for
// half of each cycle.
type fetcher struct {
	r       *Runner
	queue   string
	slots   int
	wakeCh  chan struct{}
	freedCh chan struct{}
	// Owned by run:
	busy     int  // executions started and not yet finished
	reserved int  // slots asked for by claims in flight
	inflight int  // claims in flight
	backlog  bool // the last claim came back full: more jobs are likely waiting
	resume   resumer
}

// maxInflight is how many claims of one queue a runner has in flight at once.
const maxInflight = 2

// claimed is what a claim in flight brings back to run.
type claimed struct {
	asked int
	jobs  []*pgrun.Job
	err   error
}

func newFetcher(r *Runner, queue string, slots int) *fetcher {
	return &fetcher{
		r:       r,
		queue:   queue,
		slots:   slots,
		wakeCh:  make(chan struct{}, 1),
		freedCh: make(chan struct{}, slots),
	}
}

func (f *fetcher) wake() {
	select {
	case f.wakeCh <- struct{}{}:
	default:
	}
}

// freed is called by an execution when its slot is free again.
func (f *fetcher) freed() { f.freedCh <- struct{}{} }

// free is how many slots neither run a job nor wait for a claim in flight.
func (f *fetcher) free() int { return f.slots - f.busy - f.reserved }

// want is the number of free slots a claim with a backlog waits for: half the slots,
// or half a claim.
func (f *fetcher) want() int { return max(1, min(f.slots, f.r.cfg.MaxClaim)/2) }

// claimErrorBackoff is how long a fetcher waits after a failed claim.
const claimErrorBackoff = time.Second

func (f *fetcher) run(ctx context.Context) {
	poll := time.NewTicker(f.r.cfg.PollInterval)
	defer poll.Stop()
	results := make(chan claimed, maxInflight)
	// A claim in flight at shutdown is waited for and its jobs started: on the server
	// they are this runner's, and the shutdown sequence handles them as it does the
	// others. (Claims are not cancelled by shutdown; see claimTimeout.)
	defer func() {
		for ; f.inflight > 0; f.inflight-- {
			_ = f.took(<-results)
		}
	}()
	var backoff <-chan time.Time
	for {
		if backoff == nil && ctx.Err() == nil {
			f.launch(ctx, results)
		}
		select {
		case <-ctx.Done():
			return
		case res := <-results:
			f.inflight--
			if err := f.took(res); err != nil {
				if ctx.Err() != nil {
					return
				}
				if !f.r.down.fail("claim "+f.queue, err) {
					f.r.log.Error("claim failed", "queue", f.queue, "err", err)
				}
				backoff = time.After(claimErrorBackoff)
			}
		case <-backoff:
			backoff = nil
		case <-f.wakeCh:
		case <-poll.C:
			f.resume.polled()
		case <-f.freedCh:
			f.busy--
			if !f.gather(ctx) {
				return
			}
		}
	}
}

// launch starts claims for the free slots: one when none is in flight, and a second
// alongside it only with a backlog and enough free slots to make a round trip worth it.
func (f *fetcher) launch(ctx context.Context, results chan<- claimed) {
	for f.inflight < maxInflight {
		free := f.free()
		if free <= 0 || (f.inflight > 0 && (!f.backlog || free < f.want())) {
			return
		}
		n := min(free, f.r.cfg.MaxClaim)
		after := f.resume.next()
		f.inflight++
		f.reserved += n
		go func() {
			began := time.Now()
			jobs, err := f.claim(ctx, n, after)
			f.r.log.Debug("claimed", "queue", f.queue, "asked", n, "got", len(jobs), "resumed", after != nil,
				"took", time.Since(began))
			results <- claimed{asked: n, jobs: jobs, err: err}
		}()
	}
}

// took starts the jobs a claim brought back and returns its error.
func (f *fetcher) took(res claimed) error {
	f.reserved -= res.asked
	f.resume.claimed(res.jobs, res.err)
	if res.err != nil {
		f.backlog = false
		return res.err
	}
	f.r.stats.claimed.Add(int64(len(res.jobs)))
	f.r.stats.claimCalls.Add(1)
	for _, j := range res.jobs {
		f.busy++
		f.r.start(j, f)
	}
	f.backlog = len(res.jobs) == res.asked
	return nil
}

// fetchCooldown is the longest a fetcher with a backlog waits for enough free slots
// to make a claim worth its round trip.
const fetchCooldown = 5 * time.Millisecond

// gather collects further freed slots before the next claim. With no backlog (the
// last claim came back short) it takes only what is already free, so a new job
// starts at once. With a backlog it waits, for at most fetchCooldown, until half the
// slots (or half a claim) are free: many small claims would cost more round trips
// than the jobs themselves. It returns false if ctx is done.
func (f *fetcher) gather(ctx context.Context) bool {
	for {
		select {
		case <-f.freedCh:
			f.busy--
			continue
		default:
		}
		break
	}
	if !f.backlog || f.free() >= f.want() {
		return true
	}
	timer := time.NewTimer(fetchCooldown)
	defer timer.Stop()
	for f.free() < f.want() {
		select {
		case <-ctx.Done():
			return false
		case <-timer.C:
			return true
		case <-f.freedCh:
			f.busy--
		}
	}
	return true
}

// claimTimeout bounds one claim call. The call is not cancelled by shutdown: a claim
// that committed on the server but whose answer was dropped would leave its jobs to
// wait for their leases to run out.
const claimTimeout = 30 * time.Second

func (f *fetcher) claim(ctx context.Context, n int, after *claimKey) ([]*pgrun.Job, error) {
	var jobs []*pgrun.Job
	var afterPriority *int16
	var afterRunAt *time.Time
	var afterID *int64
	if after != nil {
		afterPriority, afterRunAt, afterID = &after.priority, &after.runAt, &after.id
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
	defer cancel()
	err := withRetry(cctx, func(cctx context.Context) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		ctx := cctx
		// After an outage: report first and hand back lost claims (outage.go), then
		// claim; the gate keeps settling from listing what is held mid-claim.
		if err := f.r.settle(ctx); err != nil {
			return err
		}
		f.r.claimGate.RLock()
		defer f.r.claimGate.RUnlock()
		began := time.Now()
		rows, err := f.r.pool.Query(ctx, `select `+pgrun.JobColumns+`
			from pgrun.claim_jobs($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
			f.queue, f.r.cfg.WorkerID, n, f.r.leaseArg(), f.r.models(), f.r.handledKinds(),
			afterPriority, afterRunAt, afterID)
		if err != nil {
			return err
		}
		if jobs, err = pgrun.ScanJobs(rows); err != nil {
			return err
		}
		f.r.arrive(jobs)
		f.r.down.ok(began)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim %s: %w", f.queue, err)
	}
	return jobs, nil
}

// models lists the models warm in this runner's cache; nil (not empty) without a
// cache, so that claim_jobs skips the affinity bookkeeping.
func (r *Runner) models() []string {
	if r.cfg.Models == nil {
		return nil
	}
	if m := r.cfg.Models.Loaded(); m != nil {
		return m
	}
	return []string{}
}
