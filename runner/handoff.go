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
// stopped for this host); the runner keeps the room of each head that succeeded for
// the job after it (promise), and takes what comes back into the fetcher's buffer
// like a claim's jobs. A runner never holds more than its capacity for it.

// handoff is what one completion call asks for: the heads whose next jobs this runner
// takes, and the room set aside for them in each queue's fetcher.
type handoff struct {
	heads []int64
	room  map[*fetcher]int
}

// promise sets aside, when a job of a sequence succeeds here, the room its slot
// leaves, for the job after it (handing): the fetcher does not claim for it while
// the success waits for its call. Without it the fetcher's next claim filled that room
// with other jobs, and half the next jobs were released to the queue to be claimed
// again. It reports whether it did (not once the fetcher is closing).
func (f *fetcher) promise() bool {
	f.readyMu.Lock()
	defer f.readyMu.Unlock()
	if f.closed {
		return false
	}
	f.handing++
	return true
}

// handoffFor turns the room promised to the sequence heads in batch into the call's
// request (their promises are spent: a batch sent again asks for none), or gives the
// room back and returns nil when the call cannot take the jobs: a runner draining its
// completions, or a settle after an outage due or under way (it lists what the runner
// holds, and must not miss jobs handed over meanwhile, so a handoff holds claimGate
// for reading from here to release, as a claim does). The caller must release a
// request it got, whatever the call's outcome.
func (c *completer) handoffFor(batch []completion) *handoff {
	var h *handoff
	for i := range batch {
		x := &batch[i]
		if !x.promised {
			continue
		}
		x.promised = false
		c.r.mu.Lock()
		f := c.r.fetchers[x.job.Queue]
		c.r.mu.Unlock()
		if h == nil {
			h = &handoff{room: map[*fetcher]int{}}
		}
		h.room[f]++
		h.heads = append(h.heads, x.id)
	}
	if h == nil {
		return nil
	}
	if c.draining.Load() || c.r.down.unsettled.Load() || !c.r.claimGate.TryRLock() {
		for f, k := range h.room {
			f.handed(nil, k)
		}
		return nil
	}
	return h
}

// release hands the jobs that came back (nil after a failed call) to their fetchers,
// gives back the room they did not take, and lets claimGate go.
func (h *handoff) release(r *Runner, jobs []*pgrun.Job) {
	byQueue := map[string][]*pgrun.Job{}
	for _, j := range jobs {
		byQueue[j.Queue] = append(byQueue[j.Queue], j)
	}
	r.arrive(jobs) // held from here until they start, for a settle to count
	r.claimGate.RUnlock()
	for f, k := range h.room {
		f.handed(byQueue[f.queue], k)
	}
	if len(jobs) > 0 {
		r.stats.handed.Add(int64(len(jobs)))
	}
}

// handed takes jobs handed over into the buffer and starts those that have a slot;
// k is the room promised for them, given back now (what they do not take is free for
// claims: run is told). Jobs that arrive after the fetcher closed go back to the
// queue, as its buffered jobs do.
func (f *fetcher) handed(jobs []*pgrun.Job, k int) {
	f.readyMu.Lock()
	f.handing -= k
	closed := f.closed
	if !closed {
		f.ready = append(f.ready, jobs...)
	}
	f.readyMu.Unlock()
	if len(jobs) < k {
		select {
		case f.freedCh <- struct{}{}:
		default:
		}
	}
	if len(jobs) == 0 {
		return
	}
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
