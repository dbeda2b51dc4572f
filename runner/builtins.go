package runner

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The built-in operations, for smoke tests, demos and benchmarks. `runner work`
// always registers them.
const (
	KindNoop  = "noop"
	KindSleep = "sleep"
	KindEcho  = "echo"
	KindFail  = "fail"
)

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

// HandleBuiltins registers noop, sleep, echo and fail on r.
func HandleBuiltins(r *Runner) {
	Handle(r, KindNoop, func(context.Context, *Job[struct{}]) (any, error) { return nil, nil })
	Handle(r, KindEcho, func(_ context.Context, j *Job[map[string]any]) (any, error) { return j.Args, nil })
	Handle(r, KindSleep, func(ctx context.Context, j *Job[SleepArgs]) (any, error) {
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
	})
	Handle(r, KindFail, func(_ context.Context, j *Job[FailArgs]) (any, error) {
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
	})
}
