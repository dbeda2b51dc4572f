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
// pass, a bulk API, one multi-row INSERT). The batch is a rendezvous, not a second
// execution path: every job of it is claimed, started, renewed, cancelled, reported
// and counted as a job run by [Handle] is, on its own slot, and only waits there for
// the call its batch makes. So a job's outcome, its log lines, its OnOutcome hook and
// its metrics are the same as a per-job handler's, and a batch holds exactly the
// slots of its jobs while it runs.

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
// Jobs are claimed as any others (they are a kind like any other to claim_jobs);
// each waits on its own slot for its batch. A batch is sent when it holds maxJobs
// jobs, or linger after its first job arrived, whichever comes first; with linger 0
// it takes the jobs already waiting and goes at once. A batch holds jobs of one
// queue, and at most as many as the queue has slots in this runner: a queue of 16
// workers makes batches of up to 16 whatever maxJobs says. Give the queue twice
// maxJobs workers and one batch gathers while another runs.
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
// batch call. A job in a batch may Emit, Progress, Beat (a long batch keeps its jobs
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
	b := &batcher{r: r, kind: kind, max: maxJobs, linger: linger, gathering: map[*fetcher]*batchCall{},
		call: func(ctx context.Context, ws []*batchWaiter) ([]BatchResult, error) {
			jobs := make([]*Job[T], len(ws))
			for i, w := range ws {
				jobs[i] = w.job.(*Job[T])
			}
			return fn(ctx, jobs)
		}}
	structArgs := reflect.TypeFor[T]().Kind() == reflect.Struct
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
// (per fetcher) at a time.
type batcher struct {
	r      *Runner
	kind   string
	max    int
	linger time.Duration
	// call runs the typed handler on the jobs of ws.
	call func(ctx context.Context, ws []*batchWaiter) ([]BatchResult, error)

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
	// cancelledAt is when every job of the sent call had stopped, on the watchdog's
	// clock (unix nanoseconds; 0: not yet), which is when the call's ctx was
	// cancelled: the watchdog measures abandonment from it (abandonFrom). counted is
	// set once the call counts as abandoned (abandonCount).
	cancelledAt atomic.Int64
	counted     atomic.Bool
}

// batchWaiter is one job waiting in a batch for its outcome.
type batchWaiter struct {
	job  any // *Job[T]
	e    *execution
	done chan struct{} // closed once res is set
	res  BatchResult
}

// limit is how many jobs a batch of f's queue holds: maxJobs, at most the queue's
// slots (a job waits for its batch on its slot, so more could never arrive).
func (b *batcher) limit(f *fetcher) int {
	if f == nil {
		return b.max
	}
	return max(1, min(b.max, f.slots))
}

// submit adds w to its queue's gathering batch and returns w's outcome. The job that
// fills a batch runs the call on its own goroutine (it would only wait for it
// otherwise); a batch sent by its linger runs on the timer's. A job whose ctx ends
// while its batch is still gathering leaves it at once with the cause.
func (b *batcher) submit(ctx context.Context, w *batchWaiter) (any, error) {
	f := w.e.f
	b.mu.Lock()
	c := b.gathering[f]
	if c == nil {
		c = &batchCall{b: b, f: f}
		b.gathering[f] = c
		if !b.stopping {
			c.timer = time.AfterFunc(b.linger, func() { b.due(c) })
		}
	}
	c.waiters = append(c.waiters, w)
	w.e.batch.Store(c)
	full := b.stopping || len(c.waiters) >= b.limit(f)
	if full {
		b.take(c)
	}
	b.mu.Unlock()
	if full {
		c.run()
		return w.res.Result, w.res.Err
	}
	select {
	case <-w.done:
	case <-ctx.Done():
		if b.leave(c, w) {
			return nil, context.Cause(ctx)
		}
		<-w.done // sent already: the outcome comes with the call's
	}
	return w.res.Result, w.res.Err
}

// leave takes w out of c if c is still gathering, and reports whether it did. A batch
// left empty is dropped with its timer.
func (b *batcher) leave(c *batchCall, w *batchWaiter) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c.sent {
		return false
	}
	for i, x := range c.waiters {
		if x == w {
			c.waiters = append(c.waiters[:i], c.waiters[i+1:]...)
			break
		}
	}
	if len(c.waiters) == 0 {
		b.take(c) // nothing to send: drops it, and its timer
	}
	return true
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

// due sends c when its linger has passed, unless it was sent (filled) or dropped.
func (b *batcher) due(c *batchCall) {
	b.mu.Lock()
	if c.sent || b.gathering[c.f] != c {
		b.mu.Unlock()
		return
	}
	b.take(c)
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
		b.take(c)
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

// run calls the handler on c's jobs and hands each job its outcome. The call's ctx
// is cancelled, with the last job's cause, once every job's own context is done
// (each job's AfterFunc counts down), and released when the call returns.
func (c *batchCall) run() {
	r := c.b.r
	ctx, cancel := context.WithCancelCause(r.jobCtx)
	var live atomic.Int32
	live.Store(int32(len(c.waiters)))
	stops := make([]func() bool, len(c.waiters))
	for i, w := range c.waiters {
		jobCtx := &w.e.ctx
		stops[i] = context.AfterFunc(jobCtx, func() {
			if live.Add(-1) == 0 {
				c.cancelledAt.CompareAndSwap(0, r.cfg.Watchdog.Now().UnixNano())
				cancel(context.Cause(jobCtx))
			}
		})
	}
	began := time.Now()
	results, err := c.invoke(ctx)
	for _, stop := range stops {
		stop()
	}
	cancel(nil)
	r.log.Debug("batch ran", "kind", c.b.kind, "jobs", len(c.waiters), "took", time.Since(began), "err", err)
	if err == nil && len(results) != len(c.waiters) {
		err = &batchResultError{kind: c.b.kind, got: len(results), want: len(c.waiters)}
	}
	for i, w := range c.waiters {
		if err != nil {
			w.res = BatchResult{Err: err}
		} else {
			w.res = results[i]
		}
		close(w.done)
	}
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
