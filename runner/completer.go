package runner

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/sqlapi"
)

// completion is a succeeded attempt waiting to be recorded.
type completion struct {
	id      int64
	attempt int
	claim   pgrun.ClaimID
	result  []byte // JSON, or nil for no result
	// job and ran (the handler's time) are for the outcome hooks.
	job *pgrun.Job
	ran time.Duration
	// at is when the success was added; soon, that it must not be held back (see
	// completer.hold).
	at   time.Time
	soon bool
	// hand: the job is of a sequence, and its completion takes the job after it for
	// this runner (handoff.go).
	hand bool
}

// completeConcurrency is how many complete_jobs calls the completer keeps in flight:
// one, and a second only while a full batch (DefaultCompleteBatch) waits behind it.
// A completion that arrives while a call is being recorded mostly waits for it and
// goes out in the next, larger batch. Against two calls at all times, on two cores:
// 18% more workflow chain runs a second, 6% more burn-down, 2–6% less server CPU per
// job in the steady state, and four runners on one queue at 0.88 of one runner's
// burn-down instead of 0.80, each runner putting one statement fewer on the server
// at a time. With one call only, a runner that claims faster than one call records
// (about 62k jobs/s here: 1,000 jobs in 16 ms) piled successes up unrecorded behind
// it and lost 10% of a burn-down; the second call for a full batch keeps that
// capacity (docs/benchmarks.md, 2026-11-26, third pass).
const completeConcurrency = 2

// completer records successes in batches: it takes whatever has queued up (up to
// DefaultCompleteBatch) and finishes it with one complete_jobs call, with up to
// completeConcurrency calls in flight. Under light load a batch is one job and adds
// no delay; under heavy load the batches grow and the commit cost is shared. When a
// batch readied jobs (a workflow's next nodes, a map's children) in queues this runner
// serves, their fetchers are woken as soon as it commits, without waiting for the
// notification.
type completer struct {
	r   *Runner
	mu  sync.Mutex
	buf []completion
	// flying holds the batches being recorded, by their first element, so that a
	// settle after an outage counts them as held (pending).
	flying map[*completion][]completion
	// soon counts the buffered successes that must not be held back, last is the
	// size of the latest batch taken (see hold); linger pokes run when the oldest held
	// success is due, and is run's own.
	soon   int
	last   int
	linger *time.Timer
	signal chan struct{}
	slots  chan struct{} // one token per call in flight
	sends  sync.WaitGroup
	done   chan struct{}
	closed chan struct{}
	// draining is set when run drains the buffer for a shutdown: from then on a
	// batch whose try runs out is given up to its leases rather than kept (keep).
	draining atomic.Bool
}

func newCompleter(r *Runner) *completer {
	return &completer{
		r:      r,
		signal: make(chan struct{}, 1),
		slots:  make(chan struct{}, completeConcurrency),
		done:   make(chan struct{}),
		closed: make(chan struct{}),
	}
}

// completionChunk is the least room the buffer grows by: batches are cut from it
// (take), so it is refilled in steps of a few hundred rather than regrown from one.
const completionChunk = 256

// add buffers successes for the next call (a batch's together: one lock, one poke).
func (c *completer) add(xs ...completion) {
	if len(xs) == 0 {
		return
	}
	at := time.Now()
	c.mu.Lock()
	for i := range xs {
		xs[i].at = at
		if xs[i].soon {
			c.soon++
		}
	}
	if len(c.buf)+len(xs) > cap(c.buf) {
		grown := make([]completion, len(c.buf), max(2*len(c.buf), len(c.buf)+len(xs), completionChunk))
		copy(grown, c.buf)
		c.buf = grown
	}
	c.buf = append(c.buf, xs...)
	c.mu.Unlock()
	c.poke()
}

func (c *completer) poke() {
	select {
	case c.signal <- struct{}{}:
	default:
	}
}

// close asks run to flush what is left and return; it waits for that.
func (c *completer) close() {
	close(c.done)
	<-c.closed
}

func (c *completer) run(ctx context.Context) {
	defer close(c.closed)
	defer func() {
		if c.linger != nil {
			c.linger.Stop()
		}
	}()
	for {
		select {
		case <-c.signal:
			c.dispatch()
		case <-c.done:
			c.drain()
			return
		case <-ctx.Done():
			c.drain()
			return
		}
	}
}

// take removes the next batch from the buffer; nil if it is empty, or, with full,
// if it holds less than a full batch.
func (c *completer) take(full bool) []completion {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := min(len(c.buf), DefaultCompleteBatch)
	if n == 0 || (full && n < DefaultCompleteBatch) {
		return nil
	}
	batch := c.buf[:n:n]
	c.buf = c.buf[n:] // what is left of the chunk takes the next completions
	for _, x := range batch {
		if x.soon {
			c.soon--
		}
	}
	c.last = n
	if c.flying == nil {
		c.flying = map[*completion][]completion{}
	}
	c.flying[&batch[0]] = batch
	return batch
}

// landed forgets batch, which take handed out, once its call has ended.
func (c *completer) landed(batch []completion) {
	c.mu.Lock()
	delete(c.flying, &batch[0])
	c.mu.Unlock()
}

// pending lists the claims of the successes not yet recorded: buffered, or in a call.
func (c *completer) pending() []pgrun.ClaimID {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []pgrun.ClaimID
	for _, x := range c.buf {
		out = append(out, x.claim)
	}
	for _, b := range c.flying {
		for _, x := range b {
			out = append(out, x.claim)
		}
	}
	return out
}

// flushPoll is how often flush looks whether its completions were recorded.
const flushPoll = 10 * time.Millisecond

// flush waits until the successes pending when it was called have been recorded (or
// given up), or ctx is done, and returns how many there were. Successes added
// meanwhile are not waited for, so a busy runner's flush ends.
func (c *completer) flush(ctx context.Context) int {
	want := map[pgrun.ClaimID]struct{}{}
	for _, x := range c.pending() {
		want[x] = struct{}{}
	}
	n := len(want)
	t := time.NewTicker(flushPoll)
	defer t.Stop()
	for len(want) > 0 {
		c.poke()
		select {
		case <-ctx.Done():
			return n
		case <-t.C:
		}
		still := map[pgrun.ClaimID]struct{}{}
		for _, x := range c.pending() {
			if _, ok := want[x]; ok {
				still[x] = struct{}{}
			}
		}
		want = still
	}
	return n
}

// Under load the completer holds successes back for up to Config.CompleteLinger, so that
// they share a call: every complete_jobs call costs the server a fixed part (about
// 0.7 ms of processor time on two slow cores, whatever its size) on top of its rows,
// and in a steady state of 22,500 jobs a second one call in flight at a time made
// calls of 83–95 successes. Held for up to 20 ms they grew to 481–488, and the host's
// processors were 3–12 points less busy (docs/benchmarks.md, seventh pass), which
// the start latency's tail feels on a busy machine. River's batch completer holds
// longer: it looks every 50 ms and completes once 100 wait, or every 250 ms.
//
// A success is held only while the latest batch held at least completeLingerFrom
// (the runner is busy: a trickle's successes go at once), fewer than completeHoldMax
// wait, and none of those waiting is one whose recording someone waits for: a
// workflow node or a child (their dependents and parents are readied by the
// completion) and a job of a queue with max_running or concurrency_limit, or whose
// limits no look has read yet (the completion makes room for the next job). A
// success held back and then lost with the runner is one more job its lease brings
// back, as for any success not yet recorded.
const (
	completeLingerFrom = 64
	completeHoldMax    = DefaultCompleteBatch / 2
)

// hold returns how much longer the buffered successes may wait before a call takes
// them, 0 for none: see Config.CompleteLinger and the rules above.
func (c *completer) hold(now time.Time) time.Duration {
	linger := c.r.cfg.CompleteLinger
	c.mu.Lock()
	defer c.mu.Unlock()
	if linger <= 0 || len(c.buf) == 0 || len(c.buf) >= completeHoldMax || c.soon > 0 || c.last < completeLingerFrom {
		return 0
	}
	return max(0, linger-now.Sub(c.buf[0].at))
}

// dispatch sends buffered completions while a call slot is free: the first call takes
// whatever waits, unless it may be held back (hold), a further one only a full batch
// (see completeConcurrency). A call that ends frees its slot and pokes run, so what
// arrived meanwhile goes out next.
func (c *completer) dispatch() {
	if wait := c.hold(time.Now()); wait > 0 {
		if c.linger == nil {
			c.linger = time.AfterFunc(wait, c.poke)
		} else {
			c.linger.Reset(wait)
		}
		return
	}
	for {
		select {
		case c.slots <- struct{}{}:
		default:
			return // all slots busy: the next call to end pokes run
		}
		batch := c.take(len(c.slots) > 1)
		if batch == nil {
			<-c.slots
			return
		}
		c.sends.Add(1)
		go func() {
			defer c.sends.Done()
			c.complete(batch)
			c.landed(batch)
			<-c.slots
			c.poke()
		}()
	}
}

// drain waits for the calls in flight, then records everything still buffered, one
// try each.
func (c *completer) drain() {
	c.draining.Store(true)
	c.sends.Wait()
	for batch := c.take(false); batch != nil; batch = c.take(false) {
		c.complete(batch)
		c.landed(batch)
	}
}

// complete records batch, one try of up to reportTry. A try that runs out while the
// database is away puts the batch back in the buffer, to go out in a later call (see
// keepReporting), unless the runner is shutting down.
func (c *completer) complete(batch []completion) {
	ctx, cancel := context.WithTimeout(c.r.reports, c.r.reportTry)
	defer cancel()
	start := time.Now()
	done, err := c.send(ctx, batch)
	switch {
	case err == nil:
		c.r.stats.completed.Add(int64(len(batch)))
		c.r.log.Debug("completed", "jobs", len(batch), "took", time.Since(start))
		c.ended(batch, done, time.Since(start), nil)
	case isRefused(err):
		// One bad result (a value the server will not store) must not poison the
		// batch: complete one by one, and fail only the job the server refuses.
		for _, x := range batch {
			began := time.Now()
			done, err := c.send(ctx, []completion{x})
			if err == nil {
				c.r.stats.completed.Add(1)
				c.ended([]completion{x}, done, time.Since(began), nil)
			}
			if err != nil && isRefused(err) {
				c.r.log.Error("the database refused a job's result; failing the job", "job", x.id, "err", err)
				status, err := c.r.failClaim(ctx, x.id, x.attempt, x.claim, "bad_result", fmt.Sprintf("result refused: %v", err))
				c.r.ended(x.job, reported("fail", status), x.ran, time.Since(began), err)
			} else if err != nil {
				c.r.log.Error("could not record a completion; its lease will bring the job back", "job", x.id, "err", err)
				c.ended([]completion{x}, nil, time.Since(began), err)
			}
		}
	case !c.draining.Load() && c.r.keep(c.r.reports, err):
		c.r.log.Warn("could not record completions yet; keeping them until the database is back",
			"jobs", len(batch), "err", err)
		c.add(batch...) // back in the buffer: the next call takes it again
	default:
		c.r.log.Error("could not record completions; their leases will bring the jobs back",
			"jobs", len(batch), "err", err)
		c.ended(batch, nil, time.Since(start), err)
	}
}

// ended tells the outcome hooks how batch ended: done lists the ids complete_jobs
// finished (the others had moved on), err the call's error.
func (c *completer) ended(batch []completion, done []int64, took time.Duration, err error) {
	if !c.r.hooked() {
		return
	}
	finished := make(map[int64]bool, len(done))
	for _, id := range done {
		finished[id] = true
	}
	for _, x := range batch {
		o := OutcomeSucceeded
		if err == nil && !finished[x.id] {
			o = OutcomeStale
		}
		c.r.ended(x.job, o, x.ran, took, err)
	}
}

// send records batch with one complete_jobs call, retrying transient errors, and
// then wakes this runner's fetchers of the queues in which the batch readied jobs. It
// returns the ids complete_jobs finished. The call also takes the next jobs of the
// batch's sequence heads for this runner, where the database hands them over
// (handoff.go).
func (c *completer) send(ctx context.Context, batch []completion) ([]int64, error) {
	ids := make([]int64, len(batch))
	attempts := make([]int32, len(batch))
	claims := make([]pgrun.ClaimID, len(batch))
	var results [][]byte // nil while no job has a result: complete_jobs then skips its size check
	for i, x := range batch {
		ids[i], attempts[i], claims[i] = x.id, int32(x.attempt), x.claim
		if x.result != nil && results == nil {
			results = make([][]byte, len(batch))
		}
		if results != nil {
			results[i] = x.result
		}
	}
	var readied string
	var done []int64
	h := c.handoffFor(batch)
	var handed []*pgrun.Job
	err := withRetry(ctx, func(ctx context.Context) error {
		// pgrun.readied lists, for the rest of the transaction, the queues in which
		// its dispatches queued jobs (pgrun.queue_readied); the outer select reads it
		// once complete_jobs has run.
		began := time.Now()
		var err error
		if h == nil {
			err = c.r.pool.QueryRow(ctx, sqlapi.CompleteJobs, ids, attempts, results, c.r.cfg.WorkerID, claims).Scan(&readied, &done)
		} else {
			readied, done, handed, err = c.sendHandoff(ctx, h, ids, attempts, results, claims)
		}
		if err != nil {
			c.r.down.fail("complete_jobs", err)
		} else {
			c.r.down.ok(began)
		}
		return err
	})
	if h != nil {
		h.release(c.r, handed)
	}
	if err == nil {
		c.r.stats.completeCalls.Add(1)
		c.r.wakeReadied(readied)
	}
	return done, err
}

// wakeReadied wakes the fetchers of the queues in list (",q1,q2,", as complete_jobs
// leaves it in pgrun.readied) that this runner serves: their new jobs are committed
// and the notification is still on its way.
func (r *Runner) wakeReadied(list string) {
	for _, q := range strings.Split(strings.Trim(list, ","), ",") {
		if q != "" {
			r.wake(q)
		}
	}
}
