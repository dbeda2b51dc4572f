package runner

import (
	"errors"
	"fmt"
	"time"

	"github.com/pgrun/pgrun"
)

// RetryLater asks for the job to run again after d without spending an attempt: the
// handler could not do the work now (a rate limit, a busy GPU) but nothing failed.
// reason is recorded in the job's events.
func RetryLater(d time.Duration, reason string) error {
	return &retryLaterError{delay: d, reason: reason}
}

type retryLaterError struct {
	delay  time.Duration
	reason string
}

func (e *retryLaterError) Error() string {
	return fmt.Sprintf("retry later (%s): %s", e.delay, e.reason)
}

// Permanent marks err as not worth retrying: the job fails at once whatever attempts
// it has left (bad input, a missing resource that will not appear).
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Defer makes the job a coordinator: the children are enqueued and the job waits for
// them (pgrun.defer_job), atomically. It succeeds once every child has finished, and
// fails as soon as all of them failed; use [DeferWithRatio] to fail earlier. The
// handler's own return value is not stored.
func Defer(children ...pgrun.JobSpec) error {
	return &deferError{children: children, ratio: 1.0}
}

// DeferWithRatio is [Defer] with the share of failed children (0 < ratio <= 1) at
// which the parent fails and its unfinished children are cancelled.
func DeferWithRatio(ratio float64, children ...pgrun.JobSpec) error {
	return &deferError{children: children, ratio: ratio}
}

type deferError struct {
	children []pgrun.JobSpec
	ratio    float64
}

func (e *deferError) Error() string {
	return fmt.Sprintf("defer to %d children (failure ratio %g)", len(e.children), e.ratio)
}

// Validator is implemented by args types that can check themselves. A job whose args
// fail Validate fails permanently before its handler runs or any child is created,
// with the reason in its error and events.
type Validator interface {
	Validate() error
}

// IsPermanent reports whether err was marked with [Permanent].
func IsPermanent(err error) bool {
	var pe *permanentError
	return errors.As(err, &pe)
}

// ErrorClass lets an error name its class in the job's error and events (timeout,
// rate_limited, ...). Errors without one are class "error".
type ErrorClass interface {
	ErrorClass() string
}

// Cancellation causes a handler's context can carry (context.Cause tells which).
// Each but ErrShutdown means the database has decided the attempt's fate already;
// the runner learns it from a notification it confirms in the database, or from a
// lease renewal, and reports nothing for the attempt.
var (
	// ErrJobCancelled: an operator cancelled the job (pgrun.cancel_job, or a cancel
	// of its parent or run).
	ErrJobCancelled = errors.New("pgrun: job cancelled")
	// ErrLeaseLost: the job is no longer this runner's to run: its lease was
	// reclaimed, an operator turned the worker off for its queue (the job was
	// requeued without spending an attempt), or it finished elsewhere.
	ErrLeaseLost = errors.New("pgrun: job lease lost")
	// ErrShutdown: the runner is stopping and the grace period ran out; the job is
	// requeued without spending an attempt.
	ErrShutdown = errors.New("pgrun: runner shutting down")
	// ErrTimeout: pgrun.maintain() failed the attempt for its timeout (past the
	// timeout with no sign of life within the stall window); it is retried if
	// attempts remain.
	ErrTimeout = errors.New("pgrun: job timed out")
)
