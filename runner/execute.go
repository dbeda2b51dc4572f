package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/gpu"
	"github.com/pgrun/pgrun/internal/sqlapi"
)

// execContext is the context a handler runs under: the job's cancellable context,
// which also answers execKey with its execution. It lives inside the execution, so
// starting a job costs no context.WithValue; cancellation reaches contexts a handler
// derives from it as directly as from the context it wraps (its Done and its
// cancelCtx are that context's).
type execContext struct {
	context.Context
	e *execution
}

// Value answers execKey with the execution, and any other key as the wrapped
// context does.
func (c *execContext) Value(key any) any {
	if _, ok := key.(execKey); ok {
		return c.e
	}
	return c.Context.Value(key)
}

// cancel cancels the handler's context with cause (nil: the attempt is over). The
// first cancellation with a cause is timed on the watchdog's clock, so abandonment
// is measured from it rather than from when the watchdog next looks; a lost lease is
// counted.
func (e *execution) cancel(cause error) {
	if cause != nil && e.ctx.Err() == nil {
		if e.cancelledAt.CompareAndSwap(0, e.r.cfg.Watchdog.Now().UnixNano()) && errors.Is(cause, ErrLeaseLost) {
			e.r.leaseLost(e.job)
		}
	}
	e.stop(cause)
}

// execution is one attempt at one job in this runner.
type execution struct {
	r   *Runner
	job *pgrun.Job
	// ctx is the handler's context (passed as &ctx), cancelled by stop (through
	// cancel).
	ctx  execContext
	stop context.CancelCauseFunc
	beat atomic.Bool
	// done is closed when the handler has returned.
	done chan struct{}
	// cancelledAt is when the watchdog first saw ctx cancelled (unix nanoseconds,
	// 0: not yet); abandonment is measured from it.
	cancelledAt atomic.Int64
	// reported is set by whoever reports the outcome: the handler's goroutine, or
	// the watchdog when it abandons the handler.
	reported   atomic.Bool
	f          *fetcher
	began      time.Time
	finishOnce sync.Once
	// releases release the models the handler took from the cache, when it returns.
	mu       sync.Mutex
	releases []func()

	// completedInTx is set when the handler finished the job in its own transaction
	// (CompleteTx): if that committed, the job no longer runs here, which is no news.
	completedInTx atomic.Bool
	// steps counts the handler's durable calls (durable.go): each has the position
	// of its order.
	steps atomic.Int32
	// recorded is what the job had recorded when its handler's first Step ran
	// (durable.go, loadRecorded), by name; loaded once per attempt.
	recordedOnce sync.Once
	recorded     map[string]recordedStep
	recordedErr  error
	// batch is the batch call the job joined, for a kind registered with HandleBatch
	// (batch.go): the watchdog judges the call, not the job, and durable calls are
	// refused.
	batch atomic.Pointer[batchCall]
}

// reportTimeout bounds one try at reporting an outcome through transient database
// errors. A finished attempt's outcome is not given up when a try runs out (see
// keepReporting); a shutdown's requeue of an unfinished job is, and its lease brings
// the job back instead.
const reportTimeout = time.Minute

// noHandlerDelay is how long a job of a kind this runner cannot run (its handler
// went away between claim and start) is put back for, without spending an attempt.
// claim_jobs hands out only handled kinds, so this is a safety net.
const noHandlerDelay = time.Minute

// start runs job on a worker goroutine; f is told when the slot is free again.
func (r *Runner) start(job *pgrun.Job, f *fetcher) {
	e := r.begin(job, f)
	select {
	case r.handoff <- e: // an idle worker goroutine takes it
	default:
		go r.work(e, r.workersStop)
	}
}

// begin makes the execution of job and registers it as running here; the caller runs
// it (start, or a worker goroutine that finished the slot's previous job).
func (r *Runner) begin(job *pgrun.Job, f *fetcher) *execution {
	e := &execution{r: r, job: job, f: f, done: make(chan struct{}), began: time.Now()}
	// No deadline here: the timeout rule is pgrun.maintain()'s (a job past its
	// timeout is spared while it shows a sign of life), and its verdict reaches the
	// handler as a cancellation with cause ErrTimeout.
	e.ctx.Context, e.stop = context.WithCancelCause(r.jobCtx)
	e.ctx.e = e
	r.register(e)
	return e
}

// register records executions as running, under one lock: their leases are renewed,
// a cancellation reaches them (one that arrived before they began, at once), and
// shutdown waits for them.
func (r *Runner) register(es ...*execution) {
	r.mu.Lock()
	for _, e := range es {
		r.running[e.job.ID] = e
		delete(r.arriving, e.job.ClaimID)
		k := cancelKey{id: e.job.ID, attempt: e.job.Attempt}
		if _, gone := r.cancelled[k]; gone {
			delete(r.cancelled, k)
			e.cancel(ErrJobCancelled)
		}
	}
	r.mu.Unlock()
	r.execWG.Add(len(es))
}

// work runs e and then whatever executions are handed to it, until the runner stops.
// Worker goroutines are reused rather than started per job: at tens of thousands of
// jobs a second, starting a goroutine (and growing its stack again) for each was a
// measurable share of the runner's CPU. There are never more of them than jobs that
// ran at once (plus handlers the watchdog abandoned, until they return).
// A worker whose job leaves a ready job behind runs that next, on the same slot.
func (r *Runner) work(e *execution, stop <-chan struct{}) {
	for {
		if next := e.run(); next != nil {
			e = r.begin(next, e.f)
			continue
		}
		select {
		case e = <-r.handoff:
		case <-stop:
			return
		}
	}
}

// run invokes the handler and reports the outcome, unless the watchdog abandoned
// the handler and reported already. It then frees the slot and returns the ready
// job the slot passes to, if any.
func (e *execution) run() *pgrun.Job {
	result, err := e.invoke()
	close(e.done)
	e.releaseModels()
	if e.reported.CompareAndSwap(false, true) { // else abandoned by the watchdog, which reported already
		e.report(result, err)
	}
	e.cancel(nil)
	return e.finish()
}

// finish frees the execution's slot, once: when the handler returns, or earlier if
// the watchdog abandons it. It returns the ready job the slot passes to (nil: the
// slot is free, or it was freed before), which the caller must start.
func (e *execution) finish() (next *pgrun.Job) {
	e.finishOnce.Do(func() {
		e.r.mu.Lock()
		if e.r.running[e.job.ID] == e {
			delete(e.r.running, e.job.ID)
		}
		e.r.mu.Unlock()
		next = e.f.freed(time.Since(e.began))
		e.r.execWG.Done()
	})
	return next
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
		return nil, context.Cause(&e.ctx)
	}
	h := e.r.handlerFor(e.job.Kind)
	if h == nil {
		// Never fail work this runner cannot do: another runner (or a later deploy)
		// may handle the kind.
		return nil, RetryLater(noHandlerDelay, fmt.Sprintf("no handler for kind %q on worker %s", e.job.Kind, e.r.cfg.WorkerID))
	}
	return h(&e.ctx, e.job)
}

type panicError struct {
	value any
	stack string
}

func (p *panicError) Error() string      { return fmt.Sprintf("handler panicked: %v", p.value) }
func (p *panicError) ErrorClass() string { return "panic" }

// report tells the database how the attempt ended. Where reporting fails for a
// reason no retry can fix (the server refuses the result, the children, the delay),
// the job fails with that reason instead of staying running until its lease runs out.
func (e *execution) report(result any, err error) {
	cause := context.Cause(&e.ctx)
	if err == nil && cause == nil {
		e.succeed(result) // the common case, kept free of allocations it does not need
		return
	}
	// The attempt ran to its end: its outcome is reported until it lands or the runner
	// has shut down (keepReporting), whatever the length of an outage meanwhile.
	ctx := e.r.reports
	log := e.r.log.With("job", e.job.ID, "kind", e.job.Kind, "attempt", e.job.Attempt)
	switch {
	case errors.Is(cause, ErrJobCancelled) || errors.Is(cause, ErrLeaseLost) || errors.Is(cause, ErrTimeout):
		// The database has already decided: the job was cancelled, failed for its
		// timeout, or taken back. Whatever the handler returned is ignored.
		log.Info("job stopped", "cause", cause)
		e.r.ended(e.job, stoppedBy(cause), time.Since(e.began), 0, nil)
		return
	case errors.Is(cause, ErrShutdown):
		// Not finished: one bounded try, then the lease brings the job back.
		ctx, cancel := context.WithTimeout(context.Background(), reportTimeout)
		defer cancel()
		e.requeue(ctx, "runner shut down before the job finished")
		return
	case err == nil:
		e.succeed(result)
		return
	}
	var dd *decidedError
	if errors.As(err, &dd) {
		// A durable call ended the attempt in the database itself (durable.go).
		if dd.outcome != OutcomeParked {
			log.Warn("job stopped by the database", "err", err)
		}
		e.r.ended(e.job, dd.outcome, time.Since(e.began), 0, nil)
		return
	}
	var de *deferError
	if errors.As(err, &de) {
		children, merr := json.Marshal(de.children)
		if merr != nil {
			e.failEnded(ctx, "report_failed", fmt.Sprintf("encode children: %v", merr))
			return
		}
		e.exec(ctx, log, "defer", sqlapi.DeferJob,
			e.job.ID, e.job.Attempt, children, de.ratio, e.r.cfg.WorkerID, e.job.ClaimID)
		return
	}
	var rl *retryLaterError
	if errors.As(err, &rl) {
		e.exec(ctx, log, "retry later", sqlapi.RetryLater,
			e.job.ID, e.job.Attempt, rl.delay, sanitize(rl.reason), e.r.cfg.WorkerID, e.job.ClaimID)
		return
	}
	e.fail(ctx, log, err)
}

// succeed hands the result to the completer, which records it in its next batch
// (with its own timeout). A result that does not encode fails the job for good.
func (e *execution) succeed(result any) {
	var payload []byte
	if result != nil {
		var err error
		if payload, err = json.Marshal(result); err != nil {
			e.failEnded(e.r.reports, "bad_result", fmt.Sprintf("encode result: %v", err))
			return
		}
	}
	e.r.completer.add(completion{id: e.job.ID, attempt: e.job.Attempt, claim: e.job.ClaimID, result: payload,
		job: e.job, ran: time.Since(e.began), soon: e.recordSoon(), hand: e.job.SequenceKey != nil && e.f != nil})
}

// recordSoon reports whether the job's success must be recorded without being held
// back (see Config.CompleteLinger): its completion readies a workflow's next nodes or its
// parent, or makes room under its queue's max_running or concurrency_limit (or no
// look has said yet whether the queue has one).
func (e *execution) recordSoon() bool {
	return e.job.ParentID != nil || e.job.RunID != nil || e.f == nil || e.f.limited()
}

// fail records a failed attempt with its class, message and (for panics) stack.
// Whether it is retried is the database's decision (pgrun.fail_job: the class, the
// attempts left); the runner only says when the handler marked it Permanent.
func (e *execution) fail(ctx context.Context, log *slog.Logger, err error) {
	class := "error"
	var ec ErrorClass
	if errors.As(err, &ec) {
		class = ec.ErrorClass()
	}
	body := map[string]any{"class": class, "message": sanitize(err.Error())}
	var pe *panicError
	if errors.As(err, &pe) {
		body["stack"] = sanitize(pe.stack)
	}
	payload, _ := json.Marshal(body)
	var retryable *bool
	if IsPermanent(err) {
		retryable = new(bool)
	}
	log.Warn("job failed", "class", class, "err", err, "permanent", retryable != nil)
	e.exec(ctx, log, "fail", sqlapi.FailJob,
		e.job.ID, e.job.Attempt, payload, retryable, e.r.cfg.WorkerID, e.job.ClaimID)
}

// requeue returns the job to its queue without spending an attempt.
func (e *execution) requeue(ctx context.Context, reason string) {
	e.exec(ctx, e.r.log, "requeue", sqlapi.RequeueJob,
		e.job.ID, e.job.Attempt, reason, e.r.cfg.WorkerID, e.job.ClaimID)
}

// exec runs one transition, whose statement returns the job's status after it,
// retrying transient errors, and tells the outcome hooks. A transition that matches
// nothing (the job moved on) is not an error. One the server refuses for its input
// fails the job with class report_failed and the server's reason.
func (e *execution) exec(ctx context.Context, log *slog.Logger, what, sql string, args ...any) {
	ran := time.Since(e.began)
	began := time.Now()
	var status *string
	err := e.r.keepReporting(ctx, what, e.job.ID, func(ctx context.Context) error {
		return e.r.pool.QueryRow(ctx, sql, args...).Scan(&status)
	})
	switch {
	case err == nil:
		e.r.ended(e.job, reported(what, deref(status)), ran, time.Since(began), nil)
	case isRefused(err):
		log.Error("the database refused the job's outcome; failing the job", "report", what, "err", err)
		e.failEnded(ctx, "report_failed", fmt.Sprintf("%s refused: %v", what, err))
	default:
		log.Error("could not report job outcome; its lease will bring it back", "report", what, "err", err)
		e.r.ended(e.job, intended(what), ran, time.Since(began), err)
	}
}

// failEnded fails the job for good (failReport) and tells the outcome hooks.
func (e *execution) failEnded(ctx context.Context, class, message string) {
	ran := time.Since(e.began)
	began := time.Now()
	status, err := e.r.failReport(ctx, e.job, class, message)
	e.r.ended(e.job, reported("fail", status), ran, time.Since(began), err)
}

// failReport fails job's claim for good with class and message: the outcome the
// handler produced could not be recorded. It is the runner's last word on a job, so
// the message is sanitised to be storable.
func (r *Runner) failReport(ctx context.Context, job *pgrun.Job, class, message string) (string, error) {
	return r.failClaim(ctx, job.ID, job.Attempt, job.ClaimID, class, message)
}

// failClaim is failReport for a job known by its id, attempt and claim. It returns the
// job's status after the call ("" if the claim matched nothing: the job moved on).
func (r *Runner) failClaim(ctx context.Context, id int64, attempt int, claim pgrun.ClaimID, class, message string) (string, error) {
	payload, _ := json.Marshal(map[string]any{"class": class, "message": sanitize(message)})
	var status *string
	err := r.keepReporting(ctx, "fail", id, func(ctx context.Context) error {
		return r.pool.QueryRow(ctx, sqlapi.FailJob, id, attempt, payload, false, r.cfg.WorkerID, claim).Scan(&status)
	})
	if err != nil {
		r.log.Error("could not fail a job whose outcome was refused; its lease will bring it back",
			"job", id, "attempt", attempt, "class", class, "err", err)
	}
	return deref(status), err
}

// keepReporting records a finished attempt's outcome with call: withRetry through
// transient errors for up to r.reportTry, and, when a try runs out on a database it
// cannot reach, again, until call lands, fails for another reason, or ctx is done
// (r.reports: Run has shut down). Given up, the outcome would be lost and the job's
// lease would bring it back to run again: an outage longer than one try (a failover
// that waits 45 s for a promotion, a partition) would re-run work that had finished.
// Holding on costs a slot, or a place in the completer's buffer, that could not claim
// anyway while the database is away. A report the database refuses or answers with
// "moved on" (its claim token no longer matches: the lease ran out and the job went
// elsewhere) ends at once, as before.
func (r *Runner) keepReporting(ctx context.Context, what string, job int64, call func(context.Context) error) error {
	for tries := 1; ; tries++ {
		err := r.reportOnce(ctx, call)
		if !r.keep(ctx, err) {
			return err
		}
		r.log.Warn("could not report a finished job's outcome yet; keeping it until the database is back",
			"report", what, "job", job, "tries", tries, "err", err)
	}
}

// reportOnce is one try of keepReporting: withRetry within r.reportTry.
func (r *Runner) reportOnce(ctx context.Context, call func(context.Context) error) error {
	tctx, cancel := context.WithTimeout(ctx, r.reportTry)
	defer cancel()
	return withRetry(tctx, call)
}

// keep reports whether a report that ended with err should be tried again: its try
// ran out of time (on transient errors, or in a call the database never answered)
// while ctx, the report's own lifetime, goes on. It counts the outcome as kept.
func (r *Runner) keep(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	r.stats.reportsKept.Add(1)
	return true
}

// isRefused reports errors the server raises for the input of a call (SQLSTATE
// classes 22 data exception, 23 integrity constraint, 54 program limit exceeded): the
// same call will fail again, so retrying it is pointless. Other errors (a missing
// function during an upgrade, say) are not the job's fault and fail nothing.
func isRefused(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || len(pe.Code) < 2 {
		return false
	}
	switch pe.Code[:2] {
	case "22", "23", "54":
		return true
	}
	return false
}

// sanitize makes s storable in a jsonb value: valid UTF-8 without NUL characters
// (PostgreSQL rejects \u0000 in jsonb).
func sanitize(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.ReplaceAll(s, "\x00", "\uFFFD")
}

func (e *execution) emit(ctx context.Context, event string, fields map[string]any) error {
	if fields == nil {
		fields = map[string]any{}
	}
	payload, err := json.Marshal(fields)
	if err != nil {
		return fmt.Errorf("emit %s: encode fields: %w", event, err)
	}
	_, err = e.r.pool.Exec(ctx, sqlapi.Emit, e.job.ID, event, payload, e.r.cfg.WorkerID, e.job.ClaimID)
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
	if _, err := e.r.pool.Exec(ctx, sqlapi.SetProgress, e.job.ID, current, t, e.r.cfg.WorkerID, e.job.ClaimID); err != nil {
		return fmt.Errorf("progress of job %d: %w", e.job.ID, err)
	}
	return nil
}

// useModel gets the job's model from the cache and keeps its release for when the
// handler returns.
func (e *execution) useModel(ctx context.Context) (gpu.Model, error) {
	cache := e.r.cfg.Models
	if cache == nil {
		return nil, errors.New("runner: no model cache configured (Config.Models)")
	}
	if e.job.Model == nil || *e.job.Model == "" {
		return nil, fmt.Errorf("runner: job %d names no model", e.job.ID)
	}
	name := *e.job.Model
	warm := slices.Contains(cache.Loaded(), name)
	m, release, err := cache.Acquire(ctx, name)
	if err != nil {
		return nil, err
	}
	if !warm {
		e.r.heartbeatSoon() // advertise the newly warm model
	}
	e.mu.Lock()
	e.releases = append(e.releases, release)
	e.mu.Unlock()
	return m, nil
}

func (e *execution) releaseModels() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, release := range e.releases {
		release()
	}
	e.releases = nil
}

// heartbeatSoon asks the renew loop for a heartbeat now.
func (r *Runner) heartbeatSoon() {
	select {
	case r.heartbeatCh <- struct{}{}:
	default:
	}
}
