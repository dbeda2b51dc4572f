package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/gpu"
)

// HandlerFunc runs one claimed job and returns its result (marshalled to JSON and
// stored on the job) or an error. It is what middleware wraps; typed handlers
// registered with [Handle] are adapted to it.
type HandlerFunc func(ctx context.Context, job *pgrun.Job) (any, error)

// Middleware wraps every handler of a runner: per-job context set-up (tracing,
// tenant, logging), metrics, extra recovery. The first in Config.Middleware is the
// outermost.
type Middleware func(next HandlerFunc) HandlerFunc

// Job is a claimed job with its args decoded into T. The embedded row carries the
// id, kind, attempt (the claim token) and the rest; Args shadows the row's raw args.
type Job[T any] struct {
	*pgrun.Job
	Args T

	exec *execution
	// ctx is the context the job's handler was called with (see Context).
	ctx context.Context
}

// Context is the job's own context: the one its handler was called with, carrying
// what middleware put in it, and cancelled when this job stops (an operator's cancel,
// its timeout, a lost lease, the end of a shutdown's grace), with the cause
// (context.Cause) saying which. A per-job handler has it as its ctx already; a batch
// handler ([HandleBatch]) reads each job's here, since its own ctx is the batch's.
func (j *Job[T]) Context() context.Context {
	if j.ctx == nil {
		return context.Background()
	}
	return j.ctx
}

// Emit appends an event to the job's audit log (pgrun.emit); it also counts as a
// sign of life for the stall rule.
func (j *Job[T]) Emit(ctx context.Context, event string, fields map[string]any) error {
	return j.exec.emit(ctx, event, fields)
}

// Progress records progress (current of total; total 0 keeps the previous total),
// shown in pgrun.active_jobs and `runner job`.
func (j *Job[T]) Progress(ctx context.Context, current, total int64) error {
	return j.exec.progress(ctx, current, total)
}

// Beat records a sign of life without a round trip; the runner sends beats with its
// next lease renewal. A job past its timeout that beat within the stall window is
// spared by the timeout rule (pgrun.fail_overdue), so a long job that keeps beating
// runs to the end whatever language its worker is written in.
func (j *Job[T]) Beat() {
	j.exec.beat.Store(true)
}

// UseModel returns the job's model from the runner's warm cache, loading it if it is
// not resident. The runner releases it when the handler returns. It is an error if
// the job names no model or the runner has no cache.
func (j *Job[T]) UseModel(ctx context.Context) (gpu.Model, error) {
	return j.exec.useModel(ctx)
}

// Handle registers fn for jobs of kind. Args are decoded from the job's JSON args
// into T; args that do not decode fail the job permanently, since no retry can fix
// them. A kind has one handler: registering it again is an error
// ([ErrKindRegistered]), as is an empty kind. Handlers may be registered while the
// runner runs; the next claim asks for the new kind too.
func Handle[T any](r *Runner, kind string, fn func(ctx context.Context, j *Job[T]) (any, error)) error {
	if fn == nil {
		return fmt.Errorf("runner: nil handler for kind %q", kind)
	}
	// "{}", the args of most jobs that take none, decodes into a struct as its zero
	// value: no need to run the decoder once per job for it. (Not for a map, which
	// the decoder would make non-nil.)
	structArgs := reflect.TypeFor[T]().Kind() == reflect.Struct
	return r.handle(kind, func(ctx context.Context, row *pgrun.Job) (any, error) {
		j, err := newJob[T](ctx, kind, row, structArgs)
		if err != nil {
			return nil, err
		}
		return fn(ctx, j)
	})
}

// newJob makes the typed job of row for a handler called with ctx: its args decoded
// into T and validated. Args that do not decode or validate are a permanent error,
// since no retry can fix them. structArgs says T is a struct (see Handle).
func newJob[T any](ctx context.Context, kind string, row *pgrun.Job, structArgs bool) (*Job[T], error) {
	j := &Job[T]{Job: row, exec: executionFrom(ctx), ctx: ctx}
	if len(row.Args) > 0 && !(structArgs && string(row.Args) == "{}") {
		if err := json.Unmarshal(row.Args, &j.Args); err != nil {
			return nil, Permanent(fmt.Errorf("decode args of %s job %d: %w", kind, row.ID, err))
		}
	}
	// &j.Args has both value and pointer methods, so either kind of Validate counts.
	if v, ok := any(&j.Args).(Validator); ok {
		if err := v.Validate(); err != nil {
			return nil, Permanent(invalidArgsError{err})
		}
	}
	return j, nil
}

// JobArgs is pgrun.JobArgs: args types that name their kind, so that the kind string
// is written once, on the type, for both enqueueing and handling. Kind must answer
// on the type's zero value.
type JobArgs = pgrun.JobArgs

// HandleArgs registers fn for the kind T names (T{}.Kind()), as [Handle] does:
//
//	func (ResizeArgs) Kind() string { return "resize" }
//	err := runner.HandleArgs(r, func(ctx context.Context, j *runner.Job[ResizeArgs]) (any, error) { ... })
func HandleArgs[T JobArgs](r *Runner, fn func(ctx context.Context, j *Job[T]) (any, error)) error {
	var zero T
	return Handle(r, zero.Kind(), fn)
}

type execKey struct{}

// executionFrom returns the execution a handler's ctx belongs to.
func executionFrom(ctx context.Context) *execution {
	e, _ := ctx.Value(execKey{}).(*execution)
	return e
}

// invalidArgsError is a failed preflight: the args did not pass Validate.
type invalidArgsError struct{ err error }

func (e invalidArgsError) Error() string      { return "invalid args: " + e.err.Error() }
func (e invalidArgsError) Unwrap() error      { return e.err }
func (e invalidArgsError) ErrorClass() string { return "invalid_args" }
