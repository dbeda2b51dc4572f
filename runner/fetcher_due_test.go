package runner

import (
	"sync/atomic"
	"testing"
	"time"
)

// Sleeps that end in one bucket set one timer, which wakes once when they come; a
// stopped set wakes nothing.
func TestDueTimersCoalesceAndStop(t *testing.T) {
	var d dueTimers
	woke := make(chan struct{}, 10)
	var n atomic.Int32
	wake := func() { n.Add(1); woke <- struct{}{} }
	end := time.Now().Add(50 * time.Millisecond)
	for range 1000 {
		d.at(end, wake)
	}
	d.mu.Lock()
	pending := len(d.pending)
	d.mu.Unlock()
	if pending != 1 {
		t.Fatalf("%d timers pending for one bucket, want 1", pending)
	}
	select {
	case <-woke:
	case <-time.After(5 * time.Second):
		t.Fatal("no wake-up")
	}
	if time.Now().Before(end) {
		t.Fatal("woke before the sleeps ended")
	}
	d.at(time.Now().Add(time.Hour), wake)
	d.stop()
	d.at(time.Now(), wake)
	d.mu.Lock()
	pending = len(d.pending)
	d.mu.Unlock()
	if pending != 0 || n.Load() != 1 {
		t.Fatalf("after stop: %d pending, %d wake-ups; want 0 and 1", pending, n.Load())
	}
}
