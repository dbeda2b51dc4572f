package runner

import (
	"context"
	"encoding/json"
	"runtime/debug"
	"time"

	"github.com/pgrun/pgrun"
)

// The direct path of batch handlers (see batcher): the jobs of a batch kind that a
// claim brought are started straight into their batch, and the call settles them. A
// per-job handler's job costs the runner a hand-off to a worker goroutine, a lock of
// the runner to register it and one to forget it, a lock of the completer for its
// success and a wake-up of the fetcher for its slot; here each of those is paid once
// per claim or per call instead. Each job is still an execution of its own, in
// r.running: lease renewal, cancellation, the watchdog and the shutdown handle it as
// they handle any, and the parts that end one job (report, requeue, fail) are the
// per-job path's own (execution.report).

// startJobs starts jobs, claimed for f's queue, on slots already counted as theirs
// (f.busy): the jobs of a kind registered with HandleBatch go straight into their
// batches where the runner has no middleware, the others as start starts them.
func (r *Runner) startJobs(jobs []*pgrun.Job, f *fetcher) {
	r.mu.Lock()
	batchers := r.batchers
	r.mu.Unlock()
	if len(batchers) == 0 {
		for _, j := range jobs {
			r.start(j, f)
		}
		return
	}
	var groups map[*batcher][]*pgrun.Job
	for _, j := range jobs {
		b := directBatcher(batchers, j.Kind)
		if b == nil {
			r.start(j, f)
			continue
		}
		if groups == nil {
			groups = map[*batcher][]*pgrun.Job{}
		}
		groups[b] = append(groups[b], j)
	}
	for b, js := range groups {
		b.startDirect(f, js)
	}
}

// directBatcher is the batcher that takes jobs of kind straight into its batches, or
// nil.
func directBatcher(batchers []*batcher, kind string) *batcher {
	for _, b := range batchers {
		if b.kind == kind && b.direct {
			return b
		}
	}
	return nil
}

// startDirect starts jobs, of b's kind, into f's gathering batch, and runs the
// batches they fill, each on a goroutine of its own. A job whose args do not decode
// or validate, or that was stopped before it started, ends alone.
func (b *batcher) startDirect(f *fetcher, jobs []*pgrun.Job) {
	ws := b.beginDirect(jobs, f)
	ready := ws[:0]
	for _, w := range ws {
		e := w.e
		if e.ctx.Err() != nil {
			go b.r.settleAlone(e, nil, context.Cause(&e.ctx)) // as invoke does: the handler does not see it
			continue
		}
		job, err := b.prepareJob(e)
		if err != nil {
			go b.r.settleAlone(e, nil, err)
			continue
		}
		w.job = job
		ready = append(ready, w)
	}
	full, gone := b.join(f, ready)
	for _, w := range gone {
		go b.r.settleAlone(w.e, nil, context.Cause(&w.e.ctx))
	}
	for _, c := range full {
		go c.run()
	}
}

// prepareJob is b.prepare, with a panic (in a Validate method) turned into the job's
// error as invoke turns a handler's.
func (b *batcher) prepareJob(e *execution) (job any, err error) {
	defer func() {
		if p := recover(); p != nil {
			job, err = nil, &panicError{value: p, stack: string(debug.Stack())}
		}
	}()
	return b.prepare(e)
}

// directJob is a job of the direct path: its execution and its place in a batch, in
// one allocation.
type directJob struct {
	e      execution
	w      batchWaiter
	b      *batcher
	cancel context.CancelCauseFunc
}

// stop is the execution's stop (see beginDirect): it cancels the job's context and,
// the first time, tells the job's batch.
func (d *directJob) stop(cause error) {
	first := d.e.ctx.Err() == nil
	d.cancel(cause)
	if first {
		d.b.hear(&d.w)
	}
}

// beginDirect makes the executions of jobs and registers them as running here, as
// begin does for one, under one lock of the runner for all, and returns their
// waiters. Each execution's stop (the CancelCauseFunc that execution.cancel calls:
// an operator's cancel, a lost lease, a timeout, a shutdown) also tells its batch,
// which an AfterFunc on the job's context would do at several allocations a job.
// (r.jobCtx, the parent of every job's context, is never cancelled on its own.)
func (b *batcher) beginDirect(jobs []*pgrun.Job, f *fetcher) []*batchWaiter {
	r := b.r
	now := time.Now()
	ws := make([]*batchWaiter, len(jobs))
	es := make([]*execution, len(jobs))
	for i, job := range jobs {
		d := &directJob{e: execution{r: r, job: job, f: f, done: make(chan struct{}), began: now}, b: b}
		d.w.e = &d.e
		d.e.ctx.Context, d.cancel = context.WithCancelCause(r.jobCtx)
		d.e.ctx.e = &d.e
		d.e.stop = d.stop
		ws[i], es[i] = &d.w, &d.e
	}
	r.register(es...)
	return ws
}

// settleAlone ends e, a job of the direct path that does not go through a batch call
// (it stopped before its batch was sent, or its args failed), as execution.run ends
// a job: it reports the outcome and frees the slot, which passes to a ready job.
func (r *Runner) settleAlone(e *execution, result any, err error) {
	close(e.done)
	e.releaseModels()
	if e.reported.CompareAndSwap(false, true) {
		e.report(result, err)
	}
	e.cancel(nil)
	if next := e.finish(); next != nil {
		r.startJobs([]*pgrun.Job{next}, e.f)
	}
}

// settleBatch ends the jobs of one call that came by the direct path, with the
// outcomes the call gave them (w.res): the successes go to the completer together,
// their slots are freed together and passed to the ready jobs; any other outcome
// (an error, a job stopped meanwhile, a result that does not encode) is reported on
// its own, as execution.report reports a per-job handler's, on a goroutine of its
// own so that one slow report holds back no other job. A job the watchdog abandoned
// meanwhile was reported and freed by it already.
func (r *Runner) settleBatch(f *fetcher, ws []*batchWaiter) {
	if len(ws) == 0 {
		return
	}
	now := time.Now()
	succeeded := make([]completion, 0, len(ws))
	settled := ws[:0] // filtered in place
	for _, w := range ws {
		e := w.e
		close(e.done)
		e.releaseModels()
		if !e.reported.CompareAndSwap(false, true) {
			continue // abandoned: the watchdog reported the job and freed its slot
		}
		var payload []byte
		ok := w.res.Err == nil && e.ctx.Err() == nil
		if ok && w.res.Result != nil {
			var err error
			payload, err = json.Marshal(w.res.Result)
			ok = err == nil
		}
		if !ok {
			go func(res BatchResult) {
				e.report(res.Result, res.Err)
				e.cancel(nil)
				if next := e.finish(); next != nil {
					r.startJobs([]*pgrun.Job{next}, f)
				}
			}(w.res)
			continue
		}
		succeeded = append(succeeded, completion{id: e.job.ID, attempt: e.job.Attempt, claim: e.job.ClaimID,
			result: payload, job: e.job, ran: now.Sub(e.began), soon: e.recordSoon()})
		settled = append(settled, w)
	}
	r.completer.add(succeeded...)
	r.finishMany(f, settled)
}

// finishMany frees the slots of the jobs of ws, of f's queue, whose outcomes are
// reported, as finish does for one, under one lock of the runner and one of the
// fetcher for all; the slots pass to ready jobs, which start here.
func (r *Runner) finishMany(f *fetcher, ws []*batchWaiter) {
	now := time.Now()
	var ran time.Duration
	mine := make([]*execution, 0, len(ws))
	for _, w := range ws {
		e := w.e
		e.cancel(nil)
		e.finishOnce.Do(func() {
			mine = append(mine, e)
			ran += now.Sub(e.began)
		})
	}
	if len(mine) == 0 {
		return
	}
	r.mu.Lock()
	for _, e := range mine {
		if r.running[e.job.ID] == e {
			delete(r.running, e.job.ID)
		}
	}
	r.mu.Unlock()
	next := f.freedMany(len(mine), ran)
	r.execWG.Add(-len(mine))
	if len(next) > 0 {
		r.startJobs(next, f)
	}
}

// freedMany is freed for n slots at once, which held their jobs for ran in all: it
// returns up to n ready jobs, which the caller starts on n of the slots (the rest are
// free), and tells run once.
func (f *fetcher) freedMany(n int, ran time.Duration) []*pgrun.Job {
	f.readyMu.Lock()
	f.ranSum += ran
	f.ranN += n
	var next []*pgrun.Job
	for len(next) < n && len(f.ready) > 0 && !f.closed {
		next = append(next, f.popReady())
	}
	f.busy -= n - len(next)
	f.readyMu.Unlock()
	select {
	case f.freedCh <- struct{}{}:
	default:
	}
	return next
}
