package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pgrun/pgrun"
)

// The example operations, for smoke tests, demos and benchmarks, registered by
// [RegisterExamples]: by `runner demo` and `runner bench`, and by `runner work` with
// --examples (not by default: a production worker serves only its own kinds).
const (
	KindNoop  = "noop"
	KindSleep = "sleep"
	KindEcho  = "echo"
	KindFail  = "fail"
	// KindLater asks to run again later, without spending an attempt, on its first
	// claim, and succeeds on the next.
	KindLater = "later"
	// KindFanout defers to Children noop children and succeeds when they have.
	KindFanout = "fanout"
)

// LaterArgs are the args of a later job.
type LaterArgs struct {
	// MS is how long to put the job back for (default 10).
	MS int64 `json:"ms"`
}

// FanoutArgs are the args of a fanout job.
type FanoutArgs struct {
	// Children is how many noop children to defer to (1 to 1000, default 2).
	Children int `json:"children"`
}

// SleepArgs are the args of a sleep job.
type SleepArgs struct {
	// MS is how long to sleep, in milliseconds. The sleep beats every second and
	// ends early, with the context's error, if the job is cancelled.
	MS int64 `json:"ms"`
}

// FailArgs are the args of a fail job.
type FailArgs struct {
	// Message is the error message (default "fail job failed as asked").
	Message string `json:"message"`
	// Permanent fails the job for good on its first attempt.
	Permanent bool `json:"permanent"`
	// Times, when above 0, fails only the first Times attempts; later ones succeed.
	Times int `json:"times"`
}

// RegisterExamples registers noop, sleep, echo, fail, later and fanout on r; it is
// an error if r has a handler for one of them already. Workers in other languages
// implement the same kinds for the conformance suite (tests/conformance_test.go).
func RegisterExamples(r *Runner) error {
	return errors.Join(
		Handle(r, KindNoop, func(context.Context, *Job[struct{}]) (any, error) { return nil, nil }),
		Handle(r, KindEcho, func(_ context.Context, j *Job[map[string]any]) (any, error) { return j.Args, nil }),
		Handle(r, KindSleep, sleepExample),
		Handle(r, KindLater, laterExample),
		Handle(r, KindFanout, fanoutExample),
		Handle(r, KindFail, failExample),
	)
}

// sleepExample sleeps for the job's ms, beating every second.
func sleepExample(ctx context.Context, j *Job[SleepArgs]) (any, error) {
	if j.Args.MS < 0 {
		return nil, Permanent(fmt.Errorf("sleep: ms %d is negative", j.Args.MS))
	}
	deadline := time.NewTimer(time.Duration(j.Args.MS) * time.Millisecond)
	defer deadline.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
			j.Beat()
		case <-deadline.C:
			return map[string]any{"slept_ms": j.Args.MS}, nil
		}
	}
}

// laterExample asks to run again later on its first attempt and succeeds on the next.
func laterExample(_ context.Context, j *Job[LaterArgs]) (any, error) {
	if j.Attempt == 1 {
		return nil, RetryLater(time.Duration(max(j.Args.MS, 10))*time.Millisecond, "later, as asked")
	}
	return map[string]any{"attempt": j.Attempt}, nil
}

// fanoutExample defers to the job's count of noop children.
func fanoutExample(_ context.Context, j *Job[FanoutArgs]) (any, error) {
	n := j.Args.Children
	if n == 0 {
		n = 2
	}
	if n < 1 || n > 1000 {
		return nil, Permanent(fmt.Errorf("fanout: children %d is not within 1 to 1000", n))
	}
	children := make([]pgrun.JobSpec, n)
	for i := range children {
		children[i] = pgrun.JobSpec{Kind: KindNoop, Queue: j.Queue}
	}
	return nil, Defer(children...)
}

// failExample fails as the job's args say.
func failExample(_ context.Context, j *Job[FailArgs]) (any, error) {
	if j.Args.Times > 0 && j.Failures >= j.Args.Times {
		return map[string]any{"failed_before": j.Failures}, nil
	}
	msg := j.Args.Message
	if msg == "" {
		msg = "fail job failed as asked"
	}
	if j.Args.Permanent {
		return nil, Permanent(errors.New(msg))
	}
	return nil, errors.New(msg)
}
