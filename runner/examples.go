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

// The durable examples (durable.go), one behaviour each, observable from the
// database: every step body emits a step.ran event (with the step, the worker, the
// claim_id and the attempt) and returns {"attempt": n}, so a test counts how often
// a step ran and sees which attempt's result a step kept. The Python example worker
// implements them too (tests/conformance_durable_test.go).
const (
	// KindDurableSteps records step "one", pauses PauseMS on its first attempt (a
	// window in which to kill the worker), records step "two", and returns both
	// steps' results.
	KindDurableSteps = "durable_steps"
	// KindDurableFlaky records step "before", then step "flaky", whose body fails on
	// the first attempt and succeeds on the next; it returns both steps' results.
	KindDurableFlaky = "durable_flaky"
	// KindDurableSleep sleeps durably for MS (the job parks, holding no slot) and
	// returns {"slept_ms": MS}.
	KindDurableSleep = "durable_sleep"
	// KindDurableEvent awaits Event for at most TimeoutMS (0: the longest wait) and
	// returns its payload, or {"timeout": true} when the time ran out.
	KindDurableEvent = "durable_event"
	// KindDurableSpawn spawns a noop child on the job's queue, fails its first attempt
	// after the spawn, then awaits the child and returns {"child": id, "status": s}.
	KindDurableSpawn = "durable_spawn"
	// KindDurableMismatch records step "a" and fails on its first attempt; later
	// attempts ask for step "b" first, which the database refuses (step_mismatch).
	KindDurableMismatch = "durable_mismatch"
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

// DurableStepsArgs are the args of a durable_steps job.
type DurableStepsArgs struct {
	// PauseMS is how long the first attempt pauses between its steps. The pause
	// ends early, with the context's error, if the job is cancelled or its lease lost.
	PauseMS int64 `json:"pause_ms"`
}

// DurableSleepArgs are the args of a durable_sleep job.
type DurableSleepArgs struct {
	// MS is how long to sleep, in milliseconds (at least 0).
	MS int64 `json:"ms"`
}

// DurableEventArgs are the args of a durable_event job.
type DurableEventArgs struct {
	// Event is the name of the event to await (pgrun.emit_event).
	Event string `json:"event"`
	// TimeoutMS is how long to wait for it; 0 waits the longest (366 days).
	TimeoutMS int64 `json:"timeout_ms"`
}

// RegisterExamples registers noop, sleep, echo, fail, later and fanout, and the
// durable examples durable_steps, durable_flaky, durable_sleep, durable_event,
// durable_spawn and durable_mismatch, on r; it is an error if r has a handler for
// one of them already. Workers in other languages implement the same kinds for the
// conformance suite (tests/conformance_test.go).
func RegisterExamples(r *Runner) error {
	return errors.Join(
		Handle(r, KindNoop, func(context.Context, *Job[struct{}]) (any, error) { return nil, nil }),
		Handle(r, KindEcho, func(_ context.Context, j *Job[map[string]any]) (any, error) { return j.Args, nil }),
		Handle(r, KindSleep, sleepExample),
		Handle(r, KindLater, laterExample),
		Handle(r, KindFanout, fanoutExample),
		Handle(r, KindFail, failExample),
		Handle(r, KindDurableSteps, durableStepsExample),
		Handle(r, KindDurableFlaky, durableFlakyExample),
		Handle(r, KindDurableSleep, durableSleepExample),
		Handle(r, KindDurableEvent, durableEventExample),
		Handle(r, KindDurableSpawn, durableSpawnExample),
		Handle(r, KindDurableMismatch, durableMismatchExample),
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

// stepRun is what a durable example's step returns: the attempt that ran it.
type stepRun struct {
	Attempt int `json:"attempt"`
}

// ran is a durable example's step body: it emits step.ran, under the job's claim,
// and returns the attempt that ran it.
func ran[A any](ctx context.Context, j *Job[A], step string) (stepRun, error) {
	worker := ""
	if j.ClaimedBy != nil {
		worker = *j.ClaimedBy
	}
	err := j.Emit(ctx, "step.ran", map[string]any{
		"step": step, "worker": worker, "claim_id": j.ClaimID.String(), "attempt": j.Attempt,
	})
	return stepRun{Attempt: j.Attempt}, err
}

// exampleStep is step name of a durable example, with ran as its body.
func exampleStep[A any](ctx context.Context, j *Job[A], name string) (stepRun, error) {
	return Step(ctx, j, name, func(ctx context.Context) (stepRun, error) { return ran(ctx, j, name) })
}

// durableStepsExample records step one, pauses on its first attempt, then records
// step two.
func durableStepsExample(ctx context.Context, j *Job[DurableStepsArgs]) (any, error) {
	one, err := exampleStep(ctx, j, "one")
	if err != nil {
		return nil, err
	}
	if j.Attempt == 1 && j.Args.PauseMS > 0 {
		pause := time.NewTimer(time.Duration(j.Args.PauseMS) * time.Millisecond)
		defer pause.Stop()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-pause.C:
		}
	}
	two, err := exampleStep(ctx, j, "two")
	if err != nil {
		return nil, err
	}
	return map[string]stepRun{"one": one, "two": two}, nil
}

// durableFlakyExample records step before, then step flaky, whose body fails on the
// first attempt.
func durableFlakyExample(ctx context.Context, j *Job[struct{}]) (any, error) {
	before, err := exampleStep(ctx, j, "before")
	if err != nil {
		return nil, err
	}
	flaky, err := Step(ctx, j, "flaky", func(ctx context.Context) (stepRun, error) {
		r, err := ran(ctx, j, "flaky")
		if err == nil && j.Attempt == 1 {
			err = errors.New("durable_flaky: the flaky step fails on the first attempt")
		}
		return r, err
	})
	if err != nil {
		return nil, err
	}
	return map[string]stepRun{"before": before, "flaky": flaky}, nil
}

// durableSleepExample sleeps durably for the job's ms.
func durableSleepExample(ctx context.Context, j *Job[DurableSleepArgs]) (any, error) {
	if j.Args.MS < 0 {
		return nil, Permanent(fmt.Errorf("durable_sleep: ms %d is negative", j.Args.MS))
	}
	if err := Sleep(ctx, j, "nap", time.Duration(j.Args.MS)*time.Millisecond); err != nil {
		return nil, err
	}
	return map[string]any{"slept_ms": j.Args.MS}, nil
}

// durableEventExample awaits the job's event and returns its payload.
func durableEventExample(ctx context.Context, j *Job[DurableEventArgs]) (any, error) {
	payload, err := AwaitEvent(ctx, j, j.Args.Event, time.Duration(j.Args.TimeoutMS)*time.Millisecond)
	if errors.Is(err, ErrEventTimeout) {
		return map[string]any{"timeout": true}, nil
	}
	if err != nil {
		return nil, err
	}
	return payload, nil
}

// durableSpawnExample spawns a noop child, fails its first attempt, then awaits the
// child.
func durableSpawnExample(ctx context.Context, j *Job[struct{}]) (any, error) {
	child, err := Spawn(ctx, j, "child", pgrun.JobSpec{Kind: KindNoop, Queue: j.Queue})
	if err != nil {
		return nil, err
	}
	if j.Attempt == 1 {
		return nil, errors.New("durable_spawn: the first attempt fails after the spawn")
	}
	done, err := AwaitJob(ctx, j, child, 0)
	if err != nil && !errors.Is(err, ErrAwaitedJobFailed) {
		return nil, err
	}
	return map[string]any{"child": child, "status": done.Status}, nil
}

// durableMismatchExample records step a and fails on its first attempt, and asks
// for step b first on later ones: its code "changed" between attempts.
func durableMismatchExample(ctx context.Context, j *Job[struct{}]) (any, error) {
	first := "a"
	if j.Attempt > 1 {
		first = "b"
	}
	if _, err := exampleStep(ctx, j, first); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("durable_mismatch: fails after step %s", first)
}
