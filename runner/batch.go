package runner

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgrun/pgrun"
)

// Batch handlers (docs/batches.md): one handler call for up to a batch's worth of
// claimed jobs of one kind, for work whose cost is mostly per call (a model's forward
// pass, a bulk API, one multi-row INSERT). Every job of a batch is an execution of its
// own, as a job run by [Handle] is: claimed, registered as running, renewed,
// cancelled, reported and counted on its own, on its own slot, so that a job's
// outcome, its log lines, its OnOutcome hook and its metrics are the same as a
// per-job handler's, and a batch holds exactly the slots of its jobs while it runs.
// What a batch saves is the per-job dispatch around the handler: the jobs of a claim
// are started into their batches together (batch_direct.go), under one lock rather
// than one each, with no goroutine per job, and a call's successes go to the
// completer in one piece.

// Bounds of [HandleBatch].
const (
	// MaxBatch is the most jobs one batch call takes: DefaultMaxClaim, what one claim
	// brings at most, so that a full batch never needs more than one claim.
	MaxBatch = 1000
	// MaxBatchLinger bounds how long a batch may wait to fill. Every job waiting holds
	// its slot and its lease meanwhile; longer than this and a trickle of jobs would
	// mostly wait rather than run.
	MaxBatchLinger = 10 * time.Second
)

// ErrDurableInBatch is what the durable helpers (Step, Sleep, AwaitEvent, Spawn,
// AwaitJob) return for a job of a batch: a durable handler is one job's code run from
// the top on every attempt, while the jobs of a batch meet in one call and are retried
// one by one, each into whatever batch it next joins. Make such work a per-job kind.
var ErrDurableInBatch = errors.New("runner: durable steps are not available to the jobs of a batch handler")

// BatchResult is how one job of a batch ended: with Err nil the job succeeds and
// Result is stored as its result (JSON; nil stores none); with an error the job takes
// the failure path an error from a per-job handler takes: retried with backoff while
// attempts remain, failed for good if [Permanent] (or of a permanent class), put back
// without spending an attempt with [RetryLater], or made to wait for children with
// [Defer].
type BatchResult struct {
	Result any
	Err    error
}

// HandleBatch registers fn for jobs of kind, which it runs in batches: fn gets up to
// maxJobs claimed jobs at once, in the order they arrived, and returns one
// BatchResult per job in that order. Each job then succeeds, retries or fails on its
// own. fn returns an error instead to end every job of the batch alike (a model that
// did not load): the common whole-batch failure needs no loop, and a per-job outcome
// is one value rather than two slices to keep in step. Results of the wrong length
// and a panic fail every job of the batch with an error that says so (class
// batch_result or panic: retried while attempts remain); the runner carries on.
//
// Jobs are claimed as any others (they are a kind like any other to claim_jobs), up
// to a claim's worth at once, and the runner puts the jobs of one claim straight into
// batches: without middleware no goroutine runs per job, and a call's successes reach
// the completer in one piece, so that a job costs the runner a little less than under
// [Handle] (docs/benchmarks.md; the database's work per job is the same). Each job
// holds a slot of its queue while it waits for and runs in its batch. A batch is sent
// when it holds maxJobs jobs, or linger after its first job arrived, whichever comes
// first; with linger 0 it takes the jobs already waiting and goes at once. A batch
// holds jobs of one queue, and at most as many as the queue has slots in this runner:
// a queue of 16 workers makes batches of up to 16 whatever maxJobs says. Give the
// queue twice maxJobs workers and one batch gathers while another runs.
//
// fn's ctx is the batch's: it is cancelled when every job of the batch has stopped,
// which is at the end of a shutdown's grace period or when each was cancelled, timed
// out or taken back; never by one job alone. Each job's own context is
// jobs[i].Context(), cancelled when that job stops: its outcome is then the
// database's (cancelled, timed out, lost), and whatever fn returns for it is ignored.
// The watchdog abandons a batch call only once its ctx is cancelled (AbandonAfter
// later), and counts it as one abandoned handler. A shutdown sends a batch that is
// still gathering at once.
//
// Args are decoded and validated per job as for [Handle]; a job whose args fail does
// not join a batch and fails permanently alone. Middleware wraps each job's wait for
// its batch (what it puts in the job's context is in jobs[i].Context()), not the
// batch call; with middleware each job waits on a goroutine of its own, as a per-job
// handler's does. A job in a batch may Emit, Progress, Beat (a long batch keeps its jobs
// past their timeout by beating each) and UseModel; durable steps are refused
// ([ErrDurableInBatch]). maxJobs is 1 to [MaxBatch]; linger is 0 to [MaxBatchLinger].
func HandleBatch[T any](r *Runner, kind string, fn func(ctx context.Context, jobs []*Job[T]) ([]BatchResult, error),
	maxJobs int, linger time.Duration) error {
	switch {
	case fn == nil:
		return fmt.Errorf("runner: nil batch handler for kind %q", kind)
	case maxJobs < 1 || maxJobs > MaxBatch:
		return fmt.Errorf("runner: batch size %d for kind %q is not valid (1 to %d)", maxJobs, kind, MaxBatch)
	case linger < 0 || linger > MaxBatchLinger:
		return fmt.Errorf("runner: batch linger %s for kind %q is not valid (0 to %s)", linger, kind, MaxBatchLinger)
	}
	structArgs := reflect.TypeFor[T]().Kind() == reflect.Struct
	b := &batcher{r: r, kind: kind, max: maxJobs, linger: linger, gathering: map[*fetcher]*batchCall{},
		direct: len(r.cfg.Middleware) == 0,
		call: func(ctx context.Context, ws []*batchWaiter) ([]BatchResult, error) {
			jobs := make([]*Job[T], len(ws))
			for i, w := range ws {
				jobs[i] = w.job.(*Job[T])
			}
			return fn(ctx, jobs)
		},
		prepare: func(e *execution) (any, error) {
			j, err := newJob[T](&e.ctx, kind, e.job, structArgs)
			if err != nil {
				return nil, err
			}
			return j, nil
		}}
	err := r.handle(kind, func(ctx context.Context, row *pgrun.Job) (any, error) {
		j, err := newJob[T](ctx, kind, row, structArgs)
		if err != nil {
			return nil, err
		}
		if j.exec == nil {
			return nil, fmt.Errorf("runner: batch handler of %q: job %d's context is not the one the runner started it with (middleware must derive from it)", kind, row.ID)
		}
		return b.submit(ctx, &batchWaiter{job: j, e: j.exec, done: make(chan struct{})})
	})
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.batchers = append(r.batchers, b)
	r.mu.Unlock()
	return nil
}

// HandleBatchArgs registers fn for the kind T names (T{}.Kind()), as [HandleBatch]
// does.
func HandleBatchArgs[T JobArgs](r *Runner, fn func(ctx context.Context, jobs []*Job[T]) ([]BatchResult, error),
	maxJobs int, linger time.Duration) error {
	var zero T
	return HandleBatch(r, zero.Kind(), fn, maxJobs, linger)
}

// batcher gathers the jobs of one batch kind into calls, one gathering call per queue
// (per fetcher) at a time. Its jobs reach it two ways. Without middleware the runner
// starts the jobs a claim brought straight into their batch (startJobs,
// batch_direct.go): no goroutine per job, and the call settles its jobs itself, their
// successes handed to the completer in one piece. With middleware each job runs as a
// per-job handler would, so that the middleware wraps it, and waits on its goroutine
// for the call (submit); so does a job started on its own (a slot passed to it by a
// per-job execution that ended, say). One call may hold jobs of both.
type batcher struct {
	r      *Runner
	kind   string
	max    int
	linger time.Duration
	// call runs the typed handler on the jobs of ws.
	call func(ctx context.Context, ws []*batchWaiter) ([]BatchResult, error)
	// prepare makes the typed job (*Job[T]) of an execution started straight into a
	// batch: its args decoded and validated, as Handle's are.
	prepare func(e *execution) (any, error)
	// direct is set when the runner has no middleware: a claim's jobs of this kind go
	// straight into batches (startJobs).
	direct bool

	mu        sync.Mutex
	gathering map[*fetcher]*batchCall
	// stopping is set by the runner's shutdown: from then on every job is sent at once.
	stopping bool
}

// batchCall is one batch: gathering until sent, then one call of the handler.
type batchCall struct {
	b       *batcher
	f       *fetcher
	waiters []*batchWaiter // guarded by b.mu until sent, then the call's own
	timer   *time.Timer    // the linger; nil once sent
	sent    bool           // taken for its call: no job joins or leaves it any more
	// ctx is the call's, made when it is sent; cancel cancels it, with the cause of
	// the last of its jobs to stop, once live (the jobs whose contexts are not done)
	// reaches 0.
	ctx    context.Context
	cancel context.CancelCauseFunc
	live   atomic.Int32
	// cancelledAt is when every job of the sent call had stopped, on the watchdog's
	// clock (unix nanoseconds; 0: not yet), which is when the call's ctx was
	// cancelled: the watchdog measures abandonment from it (abandonFrom). counted is
	// set once the call counts as abandoned (abandonCount).
	cancelledAt atomic.Int64
	counted     atomic.Bool
}

// batchWaiter is one job in a batch.
type batchWaiter struct {
	job any // *Job[T]
	e   *execution
	// done is closed once res is set, for a job that waits for its batch on its own
	// goroutine (submit); nil for one started straight into its batch, which the call
	// settles itself (settleBatch).
	done chan struct{}
	res  BatchResult
	// c is the call the job joined; left is set when it was taken out of it before
	// the call was sent (its job stopped meanwhile). Both guarded by b.mu.
	c    *batchCall
	left bool
	// The job's stop reaches its batch (stopped) once: through the job's own
	// CancelCauseFunc for a job of the direct path (beginDirect), through an
	// AfterFunc on its context (after stops it) for the others. heard is set once it
	// has, or once the batch no longer listens (unhook).
	heard atomic.Bool
	after func() bool
}

// unhook stops w's stop from reaching its batch from now on.
func (w *batchWaiter) unhook() {
	w.heard.Store(true)
	if w.after != nil {
		w.after()
	}
}

// hear passes the stop of w's job to its batch, the first time only.
func (b *batcher) hear(w *batchWaiter) {
	if w.heard.CompareAndSwap(false, true) {
		b.stopped(w)
	}
}

// limit is how many jobs a batch of f's queue holds: maxJobs, at most the queue's
// slots (each job of a batch holds a slot, so more could never arrive).
func (b *batcher) limit(f *fetcher) int {
	if f == nil {
		return b.max
	}
	return max(1, min(b.max, f.slots))
}

// join adds ws, jobs of f's queue, to its gathering batch, and returns the batches
// this filled (sent): the caller runs them. A job whose context is done already does
// not join, and is returned in gone for the caller to end alone.
//
// Each job's stop (its context done: a cancel, its timeout, a lost lease, a
// shutdown) reaches its batch (stopped): while the batch gathers the job leaves it at
// once, with the cause; once the batch is sent it counts towards cancelling the
// call's ctx, which happens when the last of its jobs stops. A job of the direct path
// is heard through its CancelCauseFunc already (beginDirect); the others get an
// AfterFunc on their context here.
func (b *batcher) join(f *fetcher, ws []*batchWaiter) (full []*batchCall, gone []*batchWaiter) {
	for _, w := range ws {
		if w.done != nil {
			w.after = context.AfterFunc(&w.e.ctx, func() { b.hear(w) })
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, w := range ws {
		if w.e.ctx.Err() != nil {
			w.left = true
			gone = append(gone, w)
			continue
		}
		c := b.gathering[f]
		if c == nil {
			c = &batchCall{b: b, f: f}
			b.gathering[f] = c
			if !b.stopping {
				c.timer = time.AfterFunc(b.linger, func() { b.due(c) })
			}
		}
		c.waiters = append(c.waiters, w)
		w.c = c
		w.e.batch.Store(c)
		if b.stopping || len(c.waiters) >= b.limit(f) {
			b.send(c)
			full = append(full, c)
		}
	}
	return full, gone
}

// submit is the wait of a job that runs as a per-job handler would (see batcher):
// it adds w to its queue's gathering batch and returns w's outcome. The job that
// fills a batch runs the call on its own goroutine (it would only wait for it
// otherwise). A job whose ctx (the middleware's, derived from the job's) ends while
// its batch is still gathering leaves it at once with the cause.
func (b *batcher) submit(ctx context.Context, w *batchWaiter) (any, error) {
	full, gone := b.join(w.e.f, []*batchWaiter{w})
	if len(gone) > 0 {
		w.unhook()
		return nil, context.Cause(&w.e.ctx)
	}
	for _, c := range full {
		c.run() // w's own, which it filled
	}
	select {
	case <-w.done:
	case <-ctx.Done():
		if b.leave(w) {
			w.unhook()
			return nil, context.Cause(ctx)
		}
		<-w.done // sent already, or left with its job's cause (stopped)
	}
	return w.res.Result, w.res.Err
}

// stopped is told that w's job stopped (its context is done), once (hear). Before
// its batch is sent the job leaves it and ends alone, with the cause; after, it
// counts down the call's live jobs, and the last to stop cancels the call's ctx with
// its cause. It may run under the runner's lock (a shutdown cancels its jobs under
// it), and takes b.mu under it.
func (b *batcher) stopped(w *batchWaiter) {
	b.mu.Lock()
	c := w.c
	if c == nil || w.left {
		b.mu.Unlock() // not joined (join ends it), or gone already
		return
	}
	if !c.sent {
		b.drop(c, w)
		b.mu.Unlock()
		cause := context.Cause(&w.e.ctx)
		if w.done != nil {
			w.res = BatchResult{Err: cause}
			close(w.done)
		} else {
			go b.r.settleAlone(w.e, nil, cause)
		}
		return
	}
	b.mu.Unlock()
	if c.live.Add(-1) == 0 {
		c.cancelledAt.CompareAndSwap(0, b.r.cfg.Watchdog.Now().UnixNano())
		c.cancel(context.Cause(&w.e.ctx))
	}
}

// leave takes w out of its batch if the batch is still gathering and w has not left
// it already, and reports whether it did.
func (b *batcher) leave(w *batchWaiter) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if w.left || w.c.sent {
		return false
	}
	b.drop(w.c, w)
	return true
}

// drop takes w out of c, which is gathering; b.mu is held. A batch left empty is
// dropped with its timer.
func (b *batcher) drop(c *batchCall, w *batchWaiter) {
	w.left = true
	for i, x := range c.waiters {
		if x == w {
			c.waiters = append(c.waiters[:i], c.waiters[i+1:]...)
			break
		}
	}
	if len(c.waiters) == 0 {
		b.take(c) // nothing to send: drops it, and its timer
	}
}

// take marks c sent and makes room for the next gathering batch; b.mu is held.
func (b *batcher) take(c *batchCall) {
	c.sent = true
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	if b.gathering[c.f] == c {
		delete(b.gathering, c.f)
	}
}

// send takes c, which holds jobs, for its call: from here its jobs' stops count down
// towards cancelling its ctx (stopped). b.mu is held; the caller runs c.
func (b *batcher) send(c *batchCall) {
	b.take(c)
	c.ctx, c.cancel = context.WithCancelCause(b.r.jobCtx)
	c.live.Store(int32(len(c.waiters)))
}

// due sends c when its linger has passed, unless it was sent (filled) or dropped.
func (b *batcher) due(c *batchCall) {
	b.mu.Lock()
	if c.sent || b.gathering[c.f] != c {
		b.mu.Unlock()
		return
	}
	b.send(c)
	b.mu.Unlock()
	c.run()
}

// flush sends every gathering batch at once, and every later job as it arrives: the
// runner is stopping, and a batch waiting to fill would only spend the grace period.
func (b *batcher) flush() {
	b.mu.Lock()
	b.stopping = true
	var calls []*batchCall
	for _, c := range b.gathering {
		b.send(c)
		calls = append(calls, c)
	}
	b.mu.Unlock()
	for _, c := range calls {
		go c.run()
	}
}

// flushBatches flushes every batcher of r (its shutdown has begun).
func (r *Runner) flushBatches() {
	r.mu.Lock()
	batchers := r.batchers
	r.mu.Unlock()
	for _, b := range batchers {
		b.flush()
	}
}

// run calls the handler on c's jobs and hands each job its outcome: a job waiting on
// its own goroutine gets it there, the others are settled here (settleBatch). The
// call's ctx is released when the call returns.
func (c *batchCall) run() {
	began := time.Now()
	results, err := c.invoke(c.ctx)
	for _, w := range c.waiters {
		w.unhook() // a job that stops from now on is no news to the call
	}
	c.cancel(nil)
	c.b.r.log.Debug("batch ran", "kind", c.b.kind, "jobs", len(c.waiters), "took", time.Since(began), "err", err)
	if err == nil && len(results) != len(c.waiters) {
		err = &batchResultError{kind: c.b.kind, got: len(results), want: len(c.waiters)}
	}
	direct := c.waiters[:0:0] // the direct path's; all of them, mostly
	waiting := 0
	for i, w := range c.waiters {
		if err != nil {
			w.res = BatchResult{Err: err}
		} else {
			w.res = results[i]
		}
		if w.done != nil {
			close(w.done)
			waiting++
		}
	}
	switch waiting {
	case 0:
		direct = c.waiters
	case len(c.waiters):
	default:
		for _, w := range c.waiters {
			if w.done == nil {
				direct = append(direct, w)
			}
		}
	}
	c.b.r.settleBatch(c.f, direct)
}

// invoke calls the handler, turning a panic into an error (with its stack) for every
// job of the batch.
func (c *batchCall) invoke(ctx context.Context) (results []BatchResult, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("batch handler of %q (%d jobs): %w", c.b.kind, len(c.waiters),
				&panicError{value: p, stack: string(debug.Stack())})
		}
	}()
	return c.b.call(ctx, c.waiters)
}

// batchResultError fails the jobs of a batch whose handler returned results of the
// wrong length: which result is whose cannot be told, so none is recorded.
type batchResultError struct {
	kind      string
	got, want int
}

func (e *batchResultError) Error() string {
	return fmt.Sprintf("batch handler of %q returned %d results for %d jobs", e.kind, e.got, e.want)
}

func (e *batchResultError) ErrorClass() string { return "batch_result" }

// abandonFrom is when the watchdog starts counting towards abandoning e's handler
// (unix nanoseconds, 0: not cancelled): when its context was cancelled, or for a job
// of a batch when the batch's call was (every job of it stopped). One job's cancel
// does not make its batch's call a wedged handler.
func (e *execution) abandonFrom() int64 {
	if c := e.batch.Load(); c != nil {
		return c.cancelledAt.Load()
	}
	return e.cancelledAt.Load()
}

// abandonCount is what abandoning e adds to the runner's count of abandoned
// handlers: one, and for the jobs of a batch one for the whole call.
func (e *execution) abandonCount() int64 {
	if c := e.batch.Load(); c != nil && !c.counted.CompareAndSwap(false, true) {
		return 0
	}
	return 1
}
