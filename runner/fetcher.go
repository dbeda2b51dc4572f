package runner

import (
	"context"
	"fmt"
	"time"

	"github.com/pgrun/pgrun"
)

// fetcher claims jobs for one queue: whenever it is woken (a notification, a freed
// slot) or its poll ticks, it claims up to its free slots in one call and starts an
// execution per job, repeating while claims come back full.
type fetcher struct {
	r       *Runner
	queue   string
	slots   int
	wakeCh  chan struct{}
	freedCh chan struct{}
	busy    int  // executions started and not yet finished; owned by run
	backlog bool // the last claim came back full: more jobs are likely waiting
	resume  resumer
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

// claimErrorBackoff is how long a fetcher waits after a failed claim.
const claimErrorBackoff = time.Second

func (f *fetcher) run(ctx context.Context) {
	poll := time.NewTicker(f.r.cfg.PollInterval)
	defer poll.Stop()
	for {
		if f.busy < f.slots {
			if err := f.fill(ctx); err != nil {
				if ctx.Err() != nil {
					return
				}
				f.r.log.Error("claim failed", "queue", f.queue, "err", err)
				select {
				case <-ctx.Done():
					return
				case <-time.After(claimErrorBackoff):
				}
				continue
			}
		}
		select {
		case <-ctx.Done():
			return
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
	want := max(1, min(f.slots, f.r.cfg.MaxClaim)/2)
	if !f.backlog || f.slots-f.busy >= want {
		return true
	}
	timer := time.NewTimer(fetchCooldown)
	defer timer.Stop()
	for f.slots-f.busy < want {
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

// fill claims while there are free slots and the queue keeps giving full batches.
func (f *fetcher) fill(ctx context.Context) error {
	for f.busy < f.slots {
		n := min(f.slots-f.busy, f.r.cfg.MaxClaim)
		after := f.resume.next()
		began := time.Now()
		jobs, err := f.claim(ctx, n, after)
		f.resume.claimed(jobs, err)
		f.r.log.Debug("claimed", "queue", f.queue, "asked", n, "got", len(jobs), "resumed", after != nil, "took", time.Since(began))
		if err != nil {
			return err
		}
		f.r.stats.claimed.Add(int64(len(jobs)))
		for _, j := range jobs {
			f.busy++
			f.r.start(j, f)
		}
		f.backlog = len(jobs) == n
		if !f.backlog {
			return nil
		}
	}
	return nil
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
		rows, err := f.r.pool.Query(ctx, `select `+pgrun.JobColumns+`
			from pgrun.claim_jobs($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
			f.queue, f.r.cfg.WorkerID, n, f.r.leaseArg(), f.r.models(), f.r.handledKinds(),
			afterPriority, afterRunAt, afterID)
		if err != nil {
			return err
		}
		jobs, err = pgrun.ScanJobs(rows)
		return err
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
