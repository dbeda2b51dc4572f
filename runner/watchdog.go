package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"
)

// ExitAbandoned is the exit status `runner work` uses when too many handlers ignored
// their cancelled context: the process is presumed wedged (a hung GPU call, say), so
// it exits for its supervisor to restart it, and the leases bring its jobs back.
// 75 is EX_TEMPFAIL.
const ExitAbandoned = 75

// ErrStalled: the handler beat once and then stopped beating for longer than the
// stall timeout; the attempt fails with class stalled.
var ErrStalled = errors.New("pgrun: job stalled (no beat)")

// Watchdog defaults.
const (
	// DefaultStallTimeout is long enough for a slow batch between beats, short
	// enough that a hung GPU kernel does not hold a slot for long.
	DefaultStallTimeout = 5 * time.Minute
	// DefaultAbandonAfter is how long a cancelled handler may take to return.
	DefaultAbandonAfter = 30 * time.Second
	// DefaultMaxAbandoned is how many abandoned handlers a runner tolerates.
	DefaultMaxAbandoned = 3
)

// WatchdogConfig configures the watchdogs of a runner. The wall-clock budget of a
// job is its timeout (a context deadline); these cover handlers that hang.
type WatchdogConfig struct {
	// StallTimeout: once a handler has called Job.Beat, going this long without
	// another beat fails the attempt (class stalled) and cancels its context.
	StallTimeout time.Duration
	// AbandonAfter: a handler whose context was cancelled (stall, timeout, cancel,
	// shutdown) and that has not returned this long after is abandoned: its slot
	// is freed and its outcome reported without it.
	AbandonAfter time.Duration
	// MaxAbandoned: when more handlers than this have been abandoned,
	// OnTooManyAbandoned is called.
	MaxAbandoned int
	// OnTooManyAbandoned is called with the count; the default logs and exits the
	// process with ExitAbandoned.
	OnTooManyAbandoned func(abandoned int)
	// Interval is how often the watchdog looks (default 1 second).
	Interval time.Duration
	// Now is the clock beats and stalls are judged by (default time.Now).
	Now func() time.Time
}

func (w *WatchdogConfig) defaults(log interface{ Error(string, ...any) }) {
	if w.StallTimeout <= 0 {
		w.StallTimeout = DefaultStallTimeout
	}
	if w.AbandonAfter <= 0 {
		w.AbandonAfter = DefaultAbandonAfter
	}
	if w.MaxAbandoned <= 0 {
		w.MaxAbandoned = DefaultMaxAbandoned
	}
	if w.Interval <= 0 {
		w.Interval = time.Second
	}
	if w.Now == nil {
		w.Now = time.Now
	}
	if w.OnTooManyAbandoned == nil {
		w.OnTooManyAbandoned = func(n int) {
			log.Error("too many abandoned handlers; exiting for the supervisor to restart us", "abandoned", n, "exit", ExitAbandoned)
			os.Exit(ExitAbandoned)
		}
	}
}

// watchdog checks running executions every Interval: it fails stalled ones and
// abandons handlers that ignore their cancelled context.
func (r *Runner) watchdog(ctx context.Context) {
	w := &r.cfg.Watchdog
	t := time.NewTicker(w.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.watch(w.Now())
		}
	}
}

// watch is one round of the watchdog at instant now.
func (r *Runner) watch(now time.Time) {
	w := &r.cfg.Watchdog
	r.mu.Lock()
	execs := make([]*execution, 0, len(r.running))
	for _, e := range r.running {
		execs = append(execs, e)
	}
	r.mu.Unlock()
	for _, e := range execs {
		if beat := e.lastBeat.Load(); beat != 0 && e.ctx.Err() == nil && now.Sub(time.Unix(0, beat)) > w.StallTimeout {
			r.log.Warn("job stalled: no beat", "job", e.job.ID, "since", time.Unix(0, beat))
			e.cancel(ErrStalled)
		}
		if e.ctx.Err() != nil {
			e.cancelledAt.CompareAndSwap(0, now.UnixNano())
		}
		at := e.cancelledAt.Load()
		if at == 0 || now.Sub(time.Unix(0, at)) <= w.AbandonAfter {
			continue
		}
		select {
		case <-e.done:
			continue // it returned
		default:
		}
		if !e.reported.CompareAndSwap(false, true) {
			continue
		}
		n := r.abandoned.Add(1)
		r.log.Error("handler ignored its cancelled context; abandoning it", "job", e.job.ID, "kind", e.job.Kind,
			"cause", context.Cause(e.ctx), "abandoned", n)
		e.report(nil, context.Cause(e.ctx))
		e.finish()
		if int(n) > w.MaxAbandoned {
			w.OnTooManyAbandoned(int(n))
		}
	}
}

// Abandoned is how many handlers this runner has abandoned.
func (r *Runner) Abandoned() int64 { return r.abandoned.Load() }

type stalledError struct{ after time.Duration }

func (s stalledError) Error() string      { return fmt.Sprintf("stalled: no beat for %s", s.after) }
func (s stalledError) ErrorClass() string { return "stalled" }
