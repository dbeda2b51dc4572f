package runner

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/sqlapi"
)

// fetcher claims jobs for one queue: whenever it is woken (a notification, a freed
// slot) or its poll ticks, it claims up to its free capacity in one call and starts
// an execution per job, repeating while claims come back full. With a backlog it keeps
// a second claim in flight while the first is on its way, so that the round trip of
// one claim overlaps the next: a single claim at a time left the database idle for
// half of each cycle. Without a backlog, a wake-up that comes while a claim is on its
// way sends a second one at once where claims bring many jobs (see secondClaim).
//
// Its capacity is its slots plus a prefetch allowance (see prefetch): jobs claimed
// beyond the free slots wait in a small local buffer and start as slots free up.
type fetcher struct {
	r     *Runner
	queue string
	slots int
	// maxClaim caps one claim: the runner's MaxClaim, or the queue's if lower
	// (ownCap: the queue set its own); see claimCap.
	maxClaim int
	ownCap   bool
	wakeCh   chan struct{}
	// freedCh tells run that slots were freed (or passed to buffered jobs) since it
	// last looked; coalesced, one wake-up for any number of them.
	freedCh chan struct{}
	// Owned by run:
	reserved int  // jobs asked for by claims in flight
	inflight int  // claims in flight, a sweep's not counted
	sweeping bool // a sweep is in flight (resumer.sweep)
	backlog  bool // the last claim came back full: more jobs are likely waiting
	// drained is set when a claim came back short with no wake-up since it was sent:
	// the queue has nothing due for this runner, so it claims again only when woken
	// (a notification, the poll) instead of asking again at once. wakes counts the
	// wake-ups, and each claim remembers the count it was sent under.
	drained bool
	wakes   uint64
	sent    uint64 // wakes when the latest claim was sent
	// claims counts the claims of the capacity sent (see overlapped).
	claims uint64
	// gotAt is when a claim last brought jobs (see rateRetry).
	gotAt  time.Time
	resume resumer
	due    dueTimers // wake-ups for jobs this runner parked (fetcher_due.go)
	rtt    ewma      // a claim's round trip
	// perClaim is how many jobs a claim brings (see secondClaim).
	perClaim ewma
	runTime  ewma // a job's time in its slot
	// shared is set while other live workers serve this queue (see maxInflight).
	shared atomic.Bool
	// fair is set while a look finds the queue fair (fair_by), fairByTenant while it
	// is fair by tenant (else by concurrency key): see claimCap.
	fair         atomic.Bool
	fairByTenant atomic.Bool
	// fairCap caps the fair queue's next claim (see claimCap); 0 before the first.
	fairCap atomic.Int64
	// roomy is set once a look found the queue without max_running and
	// concurrency_limit (see limited).
	roomy atomic.Bool
	// ratePeriod is the window of the queue's rate limit as the last look
	// (peersLoop) read it, 0 without one, and ratePeriodUnknown before any look.
	ratePeriod atomic.Int64
	// yield is how many jobs the last claim brought: the next claim's rows are
	// scanned into an array sized for about twice that (capped at what it asks for),
	// so that a queue with little due does not allocate room for a full claim.
	yield atomic.Int64

	// ready holds jobs claimed beyond the free slots, oldest first. busy counts the
	// executions started and not yet finished. An execution that finishes passes its
	// slot straight to the next ready job (freed) rather than through run, so both
	// are guarded by readyMu, as are the run times reported since run last looked
	// (ranSum, ranN) and closed (run is stopping: a freed slot no longer takes a
	// ready job; only the jobs of claims still in flight start, as slots are free).
	readyMu sync.Mutex
	ready   []*pgrun.Job
	busy    int
	ranSum  time.Duration
	ranN    int
	closed  bool

	// claimFn is claim; a test may put a stand-in here.
	claimFn func(ctx context.Context, n int, after *claimKey) ([]*pgrun.Job, bool, error)

	// While the database is unreachable run waits between claims (outage.wait).
	// claimsDown counts the claims that found it unreachable, waitedOut the waits
	// that ran to their end, cutShort those the end of the outage cut short
	// (outage.recovered).
	claimsDown atomic.Int64
	waitedOut  atomic.Int64
	cutShort   atomic.Int64
}

// maxInflight is how many claims of one queue a runner has in flight at once: two
// while it serves the queue alone, one while other live workers serve it too
// (shared, from pgrun.queue_peers; see peersLoop). Each claim in flight is a
// statement on the server's cores, and peers' claims step over each other's rows:
// on two cores four runners burned down a million jobs at 0.85 of one runner's rate
// with two claims each and 0.93–1.01 with one, while one runner alone loses 2–6% with one
// (docs/benchmarks.md, 2026-11-26, third pass).
const maxInflight = 2

// inflightLimit is maxInflight, or one while the queue has peers.
func (f *fetcher) inflightLimit() int {
	if f.shared.Load() {
		return 1
	}
	return maxInflight
}

// claimed is what a claim in flight brings back to run.
type claimed struct {
	wakes uint64 // the fetcher's wake count when the claim was sent
	// seq is the fetcher's claims when it was sent, this one counted; beside says
	// another claim of the capacity was in flight then (see overlapped).
	seq    uint64
	beside bool
	asked  int
	jobs   []*pgrun.Job
	err    error
	took   time.Duration
	warm   bool // sent with models warm here: its jobs need not follow key order
	sweep  bool // a sweep (resumer.sweep): one job from the queue's start
}

func newFetcher(r *Runner, queue string, slots int) *fetcher {
	f := &fetcher{
		r:        r,
		queue:    queue,
		slots:    slots,
		maxClaim: r.cfg.MaxClaim,
		wakeCh:   make(chan struct{}, 1),
		freedCh:  make(chan struct{}, 1),
	}
	f.ratePeriod.Store(ratePeriodUnknown)
	f.claimFn = f.claim
	return f
}

// ratePeriodUnknown is a fetcher's ratePeriod until a look has read it: the queue
// counts as rate-limited (slotsFreed) but is not retried (rateRetry).
const ratePeriodUnknown = -1

// limited reports whether the queue has max_running or concurrency_limit, or may
// have (no look yet): its completions make room that a claim waits for.
func (f *fetcher) limited() bool { return !f.roomy.Load() }

// rateLimited reports whether the queue has a rate limit, or may have (no look yet).
func (f *fetcher) rateLimited() bool { return f.ratePeriod.Load() != 0 }

func (f *fetcher) wake() {
	select {
	case f.wakeCh <- struct{}{}:
	default:
	}
}

// freed is called by an execution when its slot is free again, with how long the job
// held it. It returns the next ready job, which the caller starts on the same slot
// at once (the worker goroutine that ran the last job runs it, with no hand-off
// through run), or nil when none waits and the slot is free. Either way run is
// told, to account for the run time and claim for the free capacity. Measured on
// no-op jobs, waking run and an idle worker goroutine for every job was the largest
// share of the runner's own CPU after the garbage collector.
func (f *fetcher) freed(ran time.Duration) *pgrun.Job {
	f.readyMu.Lock()
	f.ranSum += ran
	f.ranN++
	var next *pgrun.Job
	if len(f.ready) > 0 && !f.closed {
		next = f.popReady()
	} else {
		f.busy--
	}
	f.readyMu.Unlock()
	select {
	case f.freedCh <- struct{}{}:
	default:
	}
	return next
}

// popReady removes the oldest ready job; readyMu is held and ready is not empty.
func (f *fetcher) popReady() *pgrun.Job {
	j := f.ready[0]
	f.ready[0] = nil
	f.ready = f.ready[1:]
	if len(f.ready) == 0 {
		f.ready = nil
	}
	return j
}

// prefetch is how many jobs this fetcher claims beyond its slots: as many as the slots
// finish during one claim round trip (slots x round trip / run time, Little's law), at
// most a claim's worth, so that the slots never wait for a claim. Jobs that run for
// longer than a round trip get almost none, so a buffered job waits at most about one
// round trip, and a runner never hoards work that another runner could start sooner.
// It is zero until both have been measured. This is what keeps a runner with few slots
// near the throughput of one with many: without it a slot could run at most one job
// per claim round trip, however short the job.
func (f *fetcher) prefetch() int {
	rtt, run := f.rtt.value(), f.runTime.value()
	if rtt <= 0 || run <= 0 {
		return 0
	}
	return int(min(float64(f.slots)*rtt/run, float64(f.claimCap())))
}

// claimCap caps one claim: maxClaim, and while the queue is fair and sets no cap of
// its own, its fair cap too. A fair claim takes one job of each key a round, then
// further rounds of the keys with more: a key's new job waits behind those later
// rounds (in the claim and in the buffer), and FairMaxClaim keeps them short. A claim
// whose every job was a different key's turn held no later rounds and shows that the
// queue has at least as many keys with work as it took, so the next may take twice
// as many before it could hold a second round: the cap doubles from FairMaxClaim
// while claims come back that way (a backlog over more keys than a claim takes), and
// falls back to FairMaxClaim at the first claim with a second job of some key. Claims
// of 600 instead of 250 burned a backlog over 1,000 keys down 10-18% faster: 0.76-0.77
// of the rate of a queue without fairness against 0.65-0.69 (docs/benchmarks.md).
func (f *fetcher) claimCap() int {
	if f.fair.Load() && !f.ownCap {
		return min(f.maxClaim, max(int(f.fairCap.Load()), FairMaxClaim))
	}
	return f.maxClaim
}

// fairTook sets the fair cap after a claim of a fair queue brought jobs (claimCap).
func (f *fetcher) fairTook(jobs []*pgrun.Job) {
	next := int64(FairMaxClaim)
	if tookOneRound(jobs, f.fairByTenant.Load()) {
		next = max(next, 2*int64(len(jobs)))
	}
	f.fairCap.Store(next)
}

// tookOneRound reports whether jobs, a claim of a queue fair by tenant (byTenant) or
// by concurrency key, hold at most one job of each key (jobs without one count as
// one key: their turn).
func tookOneRound(jobs []*pgrun.Job, byTenant bool) bool {
	seen := make(map[string]struct{}, len(jobs))
	for _, j := range jobs {
		k := j.ConcurrencyKey
		if byTenant {
			k = j.Tenant
		}
		key := "\x00" // no key: a name no key has (text holds no NUL)
		if k != nil {
			key = *k
		}
		if _, ok := seen[key]; ok {
			return false
		}
		seen[key] = struct{}{}
	}
	return true
}

// free is the capacity that neither runs a job, waits in the buffer, nor waits for a
// claim in flight.
func (f *fetcher) free() int {
	f.readyMu.Lock()
	used := f.busy + len(f.ready)
	f.readyMu.Unlock()
	return f.slots + f.prefetch() - used - f.reserved
}

// want is the free capacity a claim with a backlog waits for: half the capacity, at
// most a full claim. With prefetch the capacity is about twice a claim, so a backlog
// is claimed in full claims (fewer, larger round trips and commits: +20% burn-down
// against claims of half the capacity).
func (f *fetcher) want() int { return max(1, min((f.slots+f.prefetch())/2, f.claimCap())) }

// claimErrorBackoff is how long a fetcher waits after a claim failed for a reason
// other than an unreachable database (which waits outageWait, cut short when the
// database is back: see outage.go).
const claimErrorBackoff = time.Second

func (f *fetcher) run(ctx context.Context) {
	poll := time.NewTicker(f.r.cfg.PollInterval)
	defer poll.Stop()
	defer f.due.stop()
	results := make(chan claimed, maxInflight+1) // and a sweep
	// A claim in flight at shutdown is waited for and its jobs started while slots
	// are free: on the server they are this runner's, and the shutdown sequence handles
	// them as it does the others. (Claims are not cancelled by shutdown; see
	// claimTimeout.) Jobs still waiting for a slot go back to the queue.
	defer func() {
		f.readyMu.Lock()
		f.closed = true // a slot that frees from now on is not passed on
		f.readyMu.Unlock()
		for f.inflight > 0 || f.sweeping {
			res := <-results
			f.returned(res)
			_ = f.took(res)
		}
		f.requeueBuffered()
	}()
	var backoff, retry <-chan time.Time
	// back is closed when the outage a backoff waits out ends; fails counts the claims
	// in a row that found the database unreachable.
	var back <-chan struct{}
	fails := 0
	for {
		if backoff == nil && ctx.Err() == nil {
			f.launch(ctx, results)
		}
		if retry == nil && f.drained {
			if d := f.rateRetry(); d > 0 {
				retry = time.After(d)
			}
		}
		select {
		case <-ctx.Done():
			return
		case res := <-results:
			f.returned(res)
			if err := f.took(res); err != nil {
				if ctx.Err() != nil {
					return
				}
				if f.r.down.fail("claim "+f.queue, err) {
					f.claimsDown.Add(1)
					backoff, back = time.After(f.r.down.wait(fails)), f.r.down.recovered()
					fails++
				} else {
					f.r.log.Error("claim failed", "queue", f.queue, "err", err)
					backoff, back = time.After(claimErrorBackoff), nil
				}
			} else {
				fails = 0
			}
		case <-back:
			// The database is back (another call got through): claim now.
			backoff, back = nil, nil
			f.cutShort.Add(1)
			f.woken()
		case <-backoff:
			if back != nil {
				f.waitedOut.Add(1)
			}
			backoff, back = nil, nil
		case <-retry:
			retry = nil
			f.woken()
		case <-f.wakeCh:
			f.woken()
		case <-poll.C:
			f.resume.polled()
			f.woken()
		case <-f.freedCh:
			f.slotsFreed()
			if !f.gather(ctx) {
				return
			}
		}
	}
}

// woken records a wake-up: there may be jobs a claim has not seen.
func (f *fetcher) woken() {
	f.wakes++
	f.drained = false
}

// slotsFreed accounts for the jobs that finished since run last looked (their slots
// are free, or taken by ready jobs already) and starts ready jobs on free slots.
func (f *fetcher) slotsFreed() {
	f.readyMu.Lock()
	sum, n := f.ranSum, f.ranN
	f.ranSum, f.ranN = 0, 0
	f.readyMu.Unlock()
	if n > 0 {
		// A drained fetcher of a rate-limited queue asks again as its jobs finish: a
		// claim held back by the rate limit finds room as time passes, which nothing
		// announces. Room under max_running or concurrency_limit is announced, once
		// the completion that made it has committed (pgrun.jobs_room_made); asking
		// at once would only count the finished job as still running. A queue with
		// no limit has nothing more for this runner until a notification or the
		// poll: asking again came back empty, every other claim at a steady trickle
		// (docs/benchmarks.md, sixth pass).
		if f.rateLimited() {
			f.drained = false
		}
		// One sample per job, as if added one by one (at most 64: older ones weigh little).
		f.runTime.addN((sum / time.Duration(n)).Seconds(), min(n, 64))
	}
	f.startBuffered()
}

// rateRetry is how long a drained fetcher of a rate-limited queue waits before it
// asks again, or 0 for no such retry. The limit's window begins at the first claim
// after the previous one ended and nothing announces its end, so a queue whose jobs
// are done before their window ends was claimed again only at the next poll: a
// limit of 10 per 100 ms ran at about 12 jobs a second with the default poll. A
// quarter of the window loses at most a quarter of it, for about four claims per
// window, each of which returns at once while the window is full; at least
// rateRetryMin, at most the poll interval. The retries stop two windows after a
// claim last brought jobs: a queue with nothing due is left to notifications and
// the poll.
func (f *fetcher) rateRetry() time.Duration {
	period := time.Duration(f.ratePeriod.Load())
	if period <= 0 || time.Since(f.gotAt) > 2*period {
		return 0
	}
	return min(max(period/4, rateRetryMin), f.r.cfg.PollInterval)
}

// rateRetryMin bounds rateRetry from below: a window of a few milliseconds is asked
// for no more often than this.
const rateRetryMin = 5 * time.Millisecond

// returned accounts for a claim that came back.
func (f *fetcher) returned(res claimed) {
	if res.sweep {
		f.sweeping = false
	} else {
		f.inflight--
	}
}

// launch starts claims for the free capacity: one when none is in flight, and a
// second alongside it when secondClaim says so; and a sweep when one is due, beside
// them and not counted among them.
func (f *fetcher) launch(ctx context.Context, results chan<- claimed) {
	if !f.sweeping && f.free() > 0 && f.resume.sweep() {
		f.sweeping = true
		f.send(ctx, results, 1, nil, true)
	}
	for f.inflight < f.inflightLimit() {
		free := f.free()
		if free <= 0 || f.drained || (f.inflight > 0 && !f.secondClaim(free)) {
			return
		}
		f.inflight++
		f.claims++
		f.sent = f.wakes
		f.send(ctx, results, min(free, f.claimCap()), f.resume.next(), false)
	}
}

// send starts a claim of n jobs after the key after (nil: from the queue's start).
func (f *fetcher) send(ctx context.Context, results chan<- claimed, n int, after *claimKey, sweep bool) {
	f.reserved += n
	wakes, seq, beside := f.wakes, f.claims, f.inflight > 1
	go func() {
		began := time.Now()
		jobs, warm, err := f.claimFn(ctx, n, after)
		took := time.Since(began)
		f.r.claimed(f.queue, jobs, took, err)
		f.r.log.Debug("claimed", "queue", f.queue, "asked", n, "got", len(jobs), "resumed", after != nil,
			"sweep", sweep, "took", took)
		results <- claimed{wakes: wakes, seq: seq, beside: beside, asked: n, jobs: jobs, err: err, took: took,
			warm: warm, sweep: sweep}
	}()
}

// secondClaim reports whether a claim is worth sending while another is on its way,
// with free capacity free. With a backlog, when the capacity makes a round trip worth
// it (want). Without one, when the fetcher was woken since the latest claim was sent
// and claims bring many jobs (secondClaimYield): the jobs a notification announces
// may have committed after that claim's snapshot, and waiting for it to come back
// left them waiting for the rest of its round trip, which under load is most of their
// start latency. In a steady state of 24,000 jobs a second on two cores the
// commit-to-start p50 fell from 1.0 ms to 0.13–0.25 ms. Where each wake-up announces
// a job or two (a workflow's nodes, jobs enqueued one by one) a second claim is a
// statement on the server's cores for little: it doubled the claims of a chain of
// workflow nodes and cost it 14% of its rate (docs/benchmarks.md, seventh pass). A
// queue with peers keeps one claim in flight whatever this says (inflightLimit).
func (f *fetcher) secondClaim(free int) bool {
	if f.backlog {
		return free >= f.want()
	}
	return f.sent != f.wakes && f.perClaim.value() >= secondClaimYield
}

// secondClaimYield is the least number of jobs a claim brings, on average, for a
// wake-up to send a second claim while one is on its way.
const secondClaimYield = 16

// took buffers the jobs a claim brought back, starts those that have a free slot, and
// returns the claim's error.
func (f *fetcher) took(res claimed) error {
	f.reserved -= res.asked
	switch {
	case res.warm:
		f.resume.forget() // a warm claim may have skipped cold jobs below its last key
	case res.sweep:
		f.resume.swept(res.jobs, res.err)
	default:
		f.resume.claimed(res.jobs, res.err)
	}
	if res.err != nil {
		if !res.sweep {
			f.backlog = false
		}
		return res.err
	}
	if len(res.jobs) > 0 {
		f.gotAt = time.Now()
	}
	f.r.stats.claimed.Add(int64(len(res.jobs)))
	f.r.stats.claimCalls.Add(1)
	f.readyMu.Lock()
	f.ready = append(f.ready, res.jobs...)
	f.readyMu.Unlock()
	f.startBuffered()
	if res.sweep {
		// Not a measure of the queue: one job, and a scan over what was claimed since the
		// last sweep.
		return nil
	}
	if f.fair.Load() {
		f.fairTook(res.jobs)
	}
	f.rtt.add(res.took.Seconds())
	f.perClaim.add(float64(len(res.jobs)))
	f.yield.Store(int64(len(res.jobs)))
	f.backlog = len(res.jobs) == res.asked
	if !f.backlog && res.wakes == f.wakes && !f.overlapped(res) {
		f.drained = true
	}
	return nil
}

// overlapped reports whether a claim of a fair queue ran beside another claim of the
// capacity (one was in flight when it was sent, or one was sent before it came back),
// which then does not say the queue is drained: a fair claim's walk locks each key's
// job as it finds it and may lock more than it takes (each key's share, cut to the
// claim's size), so a claim beside it passes over jobs that are still queued once the
// other commits. Taken for drained, the last jobs of a fair backlog waited for the
// poll: in a quarter of the burn-downs of 100,000 jobs the last claim went out 0.63-0.65
// s after the one before (docs/benchmarks-log.md). The next claim, alone, says.
func (f *fetcher) overlapped(res claimed) bool {
	return f.fair.Load() && (res.beside || f.claims > res.seq)
}

// startBuffered starts buffered jobs while slots are free, together (startJobs: the
// jobs of a batch kind go into their batches at once).
func (f *fetcher) startBuffered() {
	f.readyMu.Lock()
	n := min(f.slots-f.busy, len(f.ready))
	if n <= 0 {
		f.readyMu.Unlock()
		return
	}
	jobs := make([]*pgrun.Job, n)
	for i := range jobs {
		jobs[i] = f.popReady()
	}
	f.busy += n
	f.readyMu.Unlock()
	f.r.startJobs(jobs, f)
}

// bufferedJobs lists the buffered jobs, whose leases the runner renews like those of
// running jobs.
func (f *fetcher) bufferedJobs() []*pgrun.Job {
	f.readyMu.Lock()
	defer f.readyMu.Unlock()
	return slices.Clone(f.ready)
}

// requeueBuffered puts the jobs still waiting for a slot back in the queue without
// spending an attempt, in one call (the runner is stopping).
func (f *fetcher) requeueBuffered() {
	f.readyMu.Lock()
	jobs := f.ready
	f.ready = nil
	f.readyMu.Unlock()
	f.requeue(jobs)
}

// requeue puts jobs claimed here and not started back in the queue without spending
// an attempt, in one call.
func (f *fetcher) requeue(jobs []*pgrun.Job) {
	if len(jobs) == 0 {
		return
	}
	ids := make([]int64, len(jobs))
	attempts := make([]int32, len(jobs))
	claims := make([]pgrun.ClaimID, len(jobs))
	for i, j := range jobs {
		ids[i], attempts[i], claims[i] = j.ID, int32(j.Attempt), j.ClaimID
	}
	ctx, cancel := context.WithTimeout(context.Background(), reportTimeout)
	defer cancel()
	err := withRetry(ctx, func(ctx context.Context) error {
		_, err := f.r.pool.Exec(ctx, sqlapi.RequeueJobs, ids, attempts, claims, "runner shut down before the job started", f.r.cfg.WorkerID)
		return err
	})
	if err != nil {
		f.r.log.Error("could not requeue claimed jobs at shutdown; their leases will bring them back",
			"queue", f.queue, "jobs", len(jobs), "err", err)
	}
}

// fetchCooldown is the longest a fetcher with a backlog waits for enough free
// capacity to make a claim worth its round trip.
const fetchCooldown = 5 * time.Millisecond

// gather collects further freed slots before the next claim. With no backlog (the
// last claim came back short) it takes only what is already free, so a new job
// starts at once. With a backlog it waits, for at most fetchCooldown, until half the
// capacity (or half a claim) is free: many small claims would cost more round trips
// than the jobs themselves. It returns false if ctx is done.
func (f *fetcher) gather(ctx context.Context) bool {
	select {
	case <-f.freedCh:
		f.slotsFreed()
	default:
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
			f.slotsFreed()
		}
	}
	return true
}

// claimTimeout bounds one claim call. The call is not cancelled by shutdown: a claim
// that committed on the server but whose answer was dropped would leave its jobs to
// wait for their leases to run out.
const claimTimeout = 30 * time.Second

// warm reports whether the claim passed models warm here: then claim_jobs may take
// jobs out of key order and ignores after, and the claim must not move the key.
func (f *fetcher) claim(ctx context.Context, n int, after *claimKey) (jobs []*pgrun.Job, warm bool, err error) {
	var afterPriority *int16
	var afterRunAt *time.Time
	var afterID *int64
	if after != nil {
		afterPriority, afterRunAt, afterID = &after.priority, &after.runAt, &after.id
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
	defer cancel()
	err = retryReachable(cctx, func(cctx context.Context) error {
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
		models := f.r.models()
		warm = len(models) > 0
		rows, err := f.r.pool.Query(ctx, sqlapi.ClaimJobs,
			f.queue, f.r.cfg.WorkerID, n, f.r.leaseArg(), models, f.r.handledKinds(),
			afterPriority, afterRunAt, afterID)
		if err != nil {
			return err
		}
		if jobs, err = scanClaimed(rows, min(n, max(16, 2*int(f.yield.Load())))); err != nil {
			return err
		}
		f.r.arrive(jobs)
		f.r.down.ok(began)
		return nil
	})
	if err != nil {
		return nil, warm, fmt.Errorf("claim %s: %w", f.queue, err)
	}
	return jobs, warm, nil
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
