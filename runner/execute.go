package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/gpu"
)

// execution is one attempt at one job in this runner.
type execution struct {
	r      *Runner
	job    *pgrun.Job
	ctx    context.Context
	cancel context.CancelCauseFunc
	beat   atomic.Bool
	// lastBeat is when the handler last called Beat (unix nanoseconds, 0: never),
	// for the stall watchdog.
	lastBeat atomic.Int64
	// done is closed when the handler has returned.
	done chan struct{}
	// cancelledAt is when the watchdog first saw ctx cancelled (unix nanoseconds,
	// 0: not yet); abandonment is measured from it.
	cancelledAt atomic.Int64
	// reported is set by whoever reports the outcome: the handler's goroutine, or
	// the watchdog when it abandons the handler.
	reported   atomic.Bool
	f          *fetcher
	finishOnce sync.Once
	// models are the cache handles the handler took, released when it returns.
	mu     sync.Mutex
	models []*gpu.Handle
}

// reportTimeout bounds how long reporting an outcome may keep retrying through
// transient database errors; past it the lease brings the job back instead.
const reportTimeout = time.Minute

// start runs job in its own goroutine; f is told when the slot is free again.
func (r *Runner) start(job *pgrun.Job, f *fetcher) {
	ctx, cancel := context.WithCancelCause(r.jobCtx)
	e := &execution{r: r, job: job, f: f, cancel: cancel, done: make(chan struct{})}
	ctx = context.WithValue(ctx, execKey{}, e)
	if job.Timeout != nil && *job.Timeout > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeoutCause(ctx, *job.Timeout, ErrTimeout)
		prev := cancel
		cancel = func(cause error) { prev(cause); stop() }
		e.cancel = cancel
	}
	e.ctx = ctx
	r.mu.Lock()
	r.running[job.ID] = e
	if _, gone := r.cancelled[cancelKey{id: job.ID, attempt: job.Attempt}]; gone {
		delete(r.cancelled, cancelKey{id: job.ID, attempt: job.Attempt})
		e.cancel(ErrJobCancelled)
	}
	r.mu.Unlock()
	r.execWG.Add(1)
	go func() {
		defer e.finish()
		defer e.cancel(nil)
		result, err := e.invoke()
		close(e.done)
		e.releaseModels()
		if !e.reported.CompareAndSwap(false, true) {
			return // abandoned by the watchdog, which reported already
		}
		e.report(result, err)
	}()
}

// finish frees the execution's slot, once: when the handler returns, or earlier if
// the watchdog abandons it.
func (e *execution) finish() {
	e.finishOnce.Do(func() {
		e.r.mu.Lock()
		if e.r.running[e.job.ID] == e {
			delete(e.r.running, e.job.ID)
		}
		e.r.mu.Unlock()
		e.f.freed()
		e.r.execWG.Done()
	})
}

// invoke runs the handler, turning a panic into an error that carries the stack.
func (e *execution) invoke() (result any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &panicError{value: p, stack: string(debug.Stack())}
		}
	}()
	if e.ctx.Err() != nil {
		// Cancelled between claim and execution (a cancelled parent, say): the
		// handler does not run at all.
		return nil, context.Cause(e.ctx)
	}
	h := e.r.handlerFor(e.job.Kind)
	if h == nil {
		return nil, Permanent(fmt.Errorf("no handler registered for kind %q on worker %s", e.job.Kind, e.r.cfg.WorkerID))
	}
	return h(e.ctx, e.job)
}

type panicError struct {
	value any
	stack string
}

func (p *panicError) Error() string      { return fmt.Sprintf("handler panicked: %v", p.value) }
func (p *panicError) ErrorClass() string { return "panic" }

// report tells the database how the attempt ended.
func (e *execution) report(result any, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), reportTimeout)
	defer cancel()
	cause := context.Cause(e.ctx)
	log := e.r.log.With("job", e.job.ID, "kind", e.job.Kind, "attempt", e.job.Attempt)
	switch {
	case errors.Is(cause, ErrJobCancelled) || errors.Is(cause, ErrLeaseLost):
		// The job is no longer ours: cancelled, timed out by maintain(), or
		// reclaimed. Whatever the handler returned is ignored.
		log.Info("job stopped", "cause", cause)
		return
	case errors.Is(cause, ErrShutdown):
		e.requeue(ctx, "runner shut down before the job finished")
		return
	case errors.Is(cause, ErrWorkerOff):
		e.requeue(ctx, "an operator turned the worker off")
		return
	}
	if err == nil {
		payload, merr := json.Marshal(result)
		if merr != nil {
			e.fail(ctx, log, Permanent(fmt.Errorf("encode result: %w", merr)))
			return
		}
		if result == nil {
			payload = nil
		}
		e.r.completer.add(completion{id: e.job.ID, attempt: e.job.Attempt, result: payload})
		return
	}
	var de *deferError
	if errors.As(err, &de) {
		children, merr := json.Marshal(de.children)
		if merr != nil {
			e.fail(ctx, log, Permanent(fmt.Errorf("encode children: %w", merr)))
			return
		}
		e.exec(ctx, log, `select pgrun.defer_job($1, $2, $3::jsonb, $4)`, e.job.ID, e.job.Attempt, children, de.ratio)
		return
	}
	var rl *retryLaterError
	if errors.As(err, &rl) {
		e.exec(ctx, log, `select pgrun.retry_later($1, $2, $3, nullif($4, ''))`,
			e.job.ID, e.job.Attempt, rl.delay, rl.reason)
		return
	}
	if errors.Is(cause, ErrTimeout) {
		err = timeoutError{limit: *e.job.Timeout}
	}
	if errors.Is(cause, ErrStalled) {
		err = stalledError{after: e.r.cfg.Watchdog.StallTimeout}
	}
	e.fail(ctx, log, err)
}

type timeoutError struct{ limit time.Duration }

func (t timeoutError) Error() string      { return fmt.Sprintf("timed out after %s", t.limit) }
func (t timeoutError) ErrorClass() string { return "timeout" }

// fail records a failed attempt with its class, message and (for panics) stack.
func (e *execution) fail(ctx context.Context, log *slog.Logger, err error) {
	class := "error"
	var ec ErrorClass
	if errors.As(err, &ec) {
		class = ec.ErrorClass()
	}
	body := map[string]any{"class": class, "message": err.Error()}
	var pe *panicError
	if errors.As(err, &pe) {
		body["stack"] = pe.stack
	}
	payload, _ := json.Marshal(body)
	retryable := !IsPermanent(err)
	log.Warn("job failed", "class", class, "err", err, "retryable", retryable)
	e.exec(ctx, log, `select pgrun.fail_job($1, $2, $3::jsonb, $4)`, e.job.ID, e.job.Attempt, payload, retryable)
}

// requeue returns the job to its queue without spending an attempt.
func (e *execution) requeue(ctx context.Context, reason string) {
	e.exec(ctx, e.r.log, `select pgrun.requeue_job($1, $2, $3)`, e.job.ID, e.job.Attempt, reason)
}

// exec runs one transition, retrying transient errors. A transition that matches
// nothing (the job moved on) is not an error.
func (e *execution) exec(ctx context.Context, log *slog.Logger, sql string, args ...any) {
	err := withRetry(ctx, func(ctx context.Context) error {
		_, err := e.r.pool.Exec(ctx, sql, args...)
		return err
	})
	if err != nil {
		log.Error("could not report job outcome; its lease will bring it back", "job", e.job.ID, "err", err)
	}
}

func (e *execution) emit(ctx context.Context, event string, fields map[string]any) error {
	if fields == nil {
		fields = map[string]any{}
	}
	payload, err := json.Marshal(fields)
	if err != nil {
		return fmt.Errorf("emit %s: encode fields: %w", event, err)
	}
	_, err = e.r.pool.Exec(ctx, `select pgrun.emit($1, $2, $3::jsonb)`, e.job.ID, event, payload)
	if err != nil {
		return fmt.Errorf("emit %s: %w", event, err)
	}
	return nil
}

func (e *execution) progress(ctx context.Context, current, total int64) error {
	var t *int64
	if total > 0 {
		t = &total
	}
	if _, err := e.r.pool.Exec(ctx, `select pgrun.set_progress($1, $2, $3)`, e.job.ID, current, t); err != nil {
		return fmt.Errorf("progress of job %d: %w", e.job.ID, err)
	}
	return nil
}

// useModel gets the job's model from the cache and keeps the handle for release.
func (e *execution) useModel(ctx context.Context) (gpu.Model, error) {
	if e.r.cfg.Models == nil {
		return nil, errors.New("runner: no model cache configured (Config.Models)")
	}
	if e.job.Model == nil || *e.job.Model == "" {
		return nil, fmt.Errorf("runner: job %d names no model", e.job.ID)
	}
	before := e.r.cfg.Models.Stats().Loads
	h, err := e.r.cfg.Models.Get(ctx, *e.job.Model)
	if err != nil {
		return nil, err
	}
	if e.r.cfg.Models.Stats().Loads != before {
		e.r.heartbeatSoon() // advertise the newly warm model
	}
	e.mu.Lock()
	e.models = append(e.models, h)
	e.mu.Unlock()
	return h.Model, nil
}

func (e *execution) releaseModels() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, h := range e.models {
		h.Release()
	}
	e.models = nil
}

// heartbeatSoon asks the renew loop for a heartbeat now.
func (r *Runner) heartbeatSoon() {
	select {
	case r.heartbeatCh <- struct{}{}:
	default:
	}
}
