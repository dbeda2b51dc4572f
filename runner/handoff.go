package runner

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/sqlapi"
)

// The handoff (docs/operations.md, "Sequences"): when a job of a sequence succeeds
// here, the completion that records it takes the sequence's next job for this runner
// in the same statement (complete_jobs' hand_over), held to running under a claim of
// its own, instead of releasing it to the queue for a claim: one write of the next
// job instead of two, and no claim. The database decides which next jobs may go (due,
// of the head's kind and model, in a queue with no limit, fairness or aging, not
// stopped for this host); the runner asks for every head it completes and takes what
// comes back into the fetcher's buffer like a claim's jobs.
//
// A job handed over comes on top of the fetcher's capacity: it replaces its head,
// which finished here, one for one, and the buffer it joins counts against the next
// claims, so the runner holds at most its capacity and the next jobs of the
// completions in flight. Counting them against the capacity from the head's end
// instead (its room kept for the job after it) held that room idle for the
// completion's round trip: 10,000 sequences burned down at 0.66 of a plain queue's
// rate instead of about 0.80 (docs/benchmarks-log.md).

// handoff is what one completion call asks for: the heads whose next jobs this runner
// takes.
type handoff struct {
	heads []int64
}

// handoffFor returns the call's request for the sequence heads in batch (their asks
// are spent: a batch sent again asks for none), or nil when there are none or the
// call cannot take the jobs: a runner draining its completions, or a settle after an
// outage due or under way (it lists what the runner holds, and must not miss jobs
// handed over meanwhile, so a handoff holds claimGate for reading from here to
// release, as a claim does). The caller must release a request it got, whatever the
// call's outcome.
func (c *completer) handoffFor(batch []completion) *handoff {
	var h *handoff
	for i := range batch {
		if x := &batch[i]; x.hand {
			x.hand = false
			if h == nil {
				h = &handoff{}
			}
			h.heads = append(h.heads, x.id)
		}
	}
	if h == nil || c.draining.Load() || c.r.down.unsettled.Load() || !c.r.claimGate.TryRLock() {
		return nil
	}
	return h
}

// release hands the jobs that came back (none after a failed call) to their queues'
// fetchers and lets claimGate go.
func (h *handoff) release(r *Runner, jobs []*pgrun.Job) {
	r.arrive(jobs) // held from here until they start, for a settle to count
	r.claimGate.RUnlock()
	if len(jobs) == 0 {
		return
	}
	r.stats.handed.Add(int64(len(jobs)))
	byQueue := map[string][]*pgrun.Job{}
	for _, j := range jobs {
		byQueue[j.Queue] = append(byQueue[j.Queue], j)
	}
	for queue, js := range byQueue {
		r.mu.Lock()
		f := r.fetchers[queue]
		r.mu.Unlock()
		f.handed(js)
	}
}

// handed takes jobs handed over into the buffer and starts those that have a slot.
// Jobs that arrive after the fetcher closed go back to the queue, as its buffered
// jobs do.
func (f *fetcher) handed(jobs []*pgrun.Job) {
	f.readyMu.Lock()
	closed := f.closed
	if !closed {
		f.ready = append(f.ready, jobs...)
	}
	f.readyMu.Unlock()
	if closed {
		f.requeue(jobs)
		return
	}
	f.r.claimed(f.queue, jobs, 0, nil)
	f.startBuffered()
}

// sendHandoff records batch with one complete_jobs call that hands over the next
// jobs of h's heads, and reads those jobs, in one round trip and one transaction
// (the second statement reads pgrun.handed, which the first leaves for the rest of
// the transaction). It returns the queues in which the batch readied jobs, the ids
// complete_jobs finished and the jobs handed over.
func (c *completer) sendHandoff(ctx context.Context, h *handoff, ids []int64, attempts []int32, results [][]byte,
	claims []pgrun.ClaimID) (readied string, done []int64, jobs []*pgrun.Job, err error) {
	b := &pgx.Batch{}
	b.Queue(sqlapi.CompleteJobsHanding, ids, attempts, results, c.r.cfg.WorkerID, claims, h.heads, c.r.leaseArg())
	b.Queue(sqlapi.HandedJobs, c.r.cfg.WorkerID)
	br := c.r.pool.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}()
	var handed string
	if err = br.QueryRow().Scan(&readied, &done, &handed); err != nil {
		return "", nil, nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return "", nil, nil, err
	}
	if jobs, err = scanClaimed(rows, strings.Count(handed, ",")); err != nil {
		return "", nil, nil, err
	}
	return readied, done, jobs, nil
}
