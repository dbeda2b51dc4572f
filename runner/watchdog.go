package runner

import (
	"context"
	"fmt"
	"os"
	"time"
)

// ExitAbandoned is the exit status `runner work` uses when too many handlers ignored
// their cancelled context: the process is presumed wedged (a hung GPU call, say), so
// it exits for its supervisor to restart it, and the leases bring its jobs back.
// 75 is EX_TEMPFAIL.
const ExitAbandoned = 75

// Watchdog defaults.
const (
	// DefaultAbandonAfter is how long a handler whose context was cancelled may take
	// to return before it is abandoned. It is also the last part of a shutdown, so
	// DefaultShutdownGrace plus it stays inside the 30 s most supervisors allow.
	DefaultAbandonAfter = 5 * time.Second
	// DefaultMaxAbandoned is how many abandoned handlers a runner tolerates.
	DefaultMaxAbandoned = 3
)

// WatchdogConfig configures the abandonment of handlers that ignore their cancelled
// context. Timeouts are not the watchdog's: the timeout rule is pgrun.maintain()'s
// (see docs/sql-api.md), and reaches a handler as a cancellation with cause
// ErrTimeout.
type WatchdogConfig struct {
	// AbandonAfter: a handler whose context was cancelled (cancel, timeout, lease
	// lost, shutdown) and that has not returned this long after is abandoned: its
	// slot is freed and its outcome reported without it. The same period ends a
	// shutdown's wait for cancelled handlers.
	AbandonAfter time.Duration
	// MaxAbandoned: when more handlers than this have been abandoned,
	// OnTooManyAbandoned is called.
	MaxAbandoned int
	// OnTooManyAbandoned is called with the count; the default logs and exits the
	// process with ExitAbandoned.
	OnTooManyAbandoned func(abandoned int)
	// Interval is how often the watchdog looks (default 1 second).
	Interval time.Duration
	// Now is the clock abandonment is judged by (default time.Now).
	Now func() time.Time
}

func (w *WatchdogConfig) defaults(log interface{ Error(string, ...any) }) {
	if w.AbandonAfter == 0 {
		w.AbandonAfter = DefaultAbandonAfter
	}
	if w.MaxAbandoned == 0 {
		w.MaxAbandoned = DefaultMaxAbandoned
	}
	if w.Interval == 0 {
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

func (w WatchdogConfig) validate() error {
	switch {
	case w.AbandonAfter < 0:
		return fmt.Errorf("runner: watchdog abandon-after %s is negative", w.AbandonAfter)
	case w.MaxAbandoned < 0:
		return fmt.Errorf("runner: watchdog max abandoned %d is negative", w.MaxAbandoned)
	case w.Interval < 0:
		return fmt.Errorf("runner: watchdog interval %s is negative", w.Interval)
	}
	return nil
}

// watchdog checks running executions every Interval and abandons handlers that
// ignore their cancelled context.
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
		if e.ctx.Err() != nil {
			e.cancelledAt.CompareAndSwap(0, now.UnixNano())
		}
		at := e.abandonFrom()
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
		n := r.abandoned.Add(e.abandonCount())
		r.log.Error("handler ignored its cancelled context; abandoning it", "job", e.job.ID, "kind", e.job.Kind,
			"cause", context.Cause(&e.ctx), "abandoned", n)
		e.report(nil, context.Cause(&e.ctx))
		if next := e.finish(); next != nil { // the slot passes to a ready job
			r.start(next, e.f)
		}
		if int(n) > w.MaxAbandoned {
			w.OnTooManyAbandoned(int(n))
		}
	}
}

// Abandoned is how many handlers this runner has abandoned.
func (r *Runner) Abandoned() int64 { return r.abandoned.Load() }
