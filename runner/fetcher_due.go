package runner

import (
	"sync"
	"time"
)

// dueTimers wake a fetcher when jobs this runner parked (durable sleeps, durable.go)
// become due. Nothing announces that a run_at has come, so without them a sleeper is
// found at the next poll, up to a PollInterval late; ten thousand sleeps ending at
// one second took 2.5 s to start instead of 1.7 (docs/benchmarks.md, "Durable
// execution"). Wake-ups are kept per dueBucket, so sleeps that end together set one
// timer, and at most maxDueTimers are pending (the poll finds the rest).
type dueTimers struct {
	mu      sync.Mutex
	pending map[int64]*time.Timer // by bucket
	stopped bool
}

const (
	dueBucket    = 100 * time.Millisecond
	maxDueTimers = 1000
)

// at calls wake once t has come (at the end of t's bucket), unless a wake-up for that
// bucket is pending already or the timers were stopped.
func (d *dueTimers) at(t time.Time, wake func()) {
	b := t.UnixMilli()/dueBucket.Milliseconds() + 1
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped || d.pending[b] != nil || len(d.pending) >= maxDueTimers {
		return
	}
	if d.pending == nil {
		d.pending = map[int64]*time.Timer{}
	}
	d.pending[b] = time.AfterFunc(time.Until(time.UnixMilli(b*dueBucket.Milliseconds())), func() {
		d.mu.Lock()
		delete(d.pending, b)
		d.mu.Unlock()
		wake()
	})
}

// stop cancels the pending wake-ups; later calls of at do nothing.
func (d *dueTimers) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stopped = true
	for b, t := range d.pending {
		t.Stop()
		delete(d.pending, b)
	}
}

// wakeAt wakes the fetcher when t comes, with its resume key dropped: the job due
// then may sort below the key (see resumer).
func (f *fetcher) wakeAt(t time.Time) {
	f.due.at(t, func() {
		f.resume.notified(nil)
		f.wake()
	})
}
