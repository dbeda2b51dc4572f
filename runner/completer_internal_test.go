package runner

import (
	"testing"
	"time"

	"github.com/pgrun/pgrun"
)

// The queues a completion readied (pgrun.readied, ",q1,q2,") wake this runner's
// fetchers for those queues, and only those; queues served elsewhere are skipped.
func TestWakeReadiedWakesTheQueuesItServes(t *testing.T) {
	r := newRunner(nil, Config{Queues: map[string]QueueConfig{"a": {Workers: 1}, "b": {Workers: 1}}})
	fa, fb := newFetcher(r, "a", 1), newFetcher(r, "b", 1)
	r.fetchers["a"], r.fetchers["b"] = fa, fb
	woken := func(f *fetcher) bool {
		select {
		case <-f.wakeCh:
			return true
		default:
			return false
		}
	}
	r.wakeReadied("")
	if woken(fa) || woken(fb) {
		t.Fatal("an empty report woke a fetcher")
	}
	r.wakeReadied(",elsewhere,b,")
	if !woken(fb) {
		t.Fatal("the fetcher of a readied queue was not woken")
	}
	if woken(fa) {
		t.Fatal("the fetcher of a queue nothing was readied in was woken")
	}
}

// A second complete_jobs call goes out only for a full batch: completions that arrive
// while one call is in flight wait for it and go out together (completeConcurrency).
func TestCompleterSecondCallOnlyForAFullBatch(t *testing.T) {
	r := newRunner(nil, Config{Queues: map[string]QueueConfig{"a": {Workers: 1}}})
	c := newCompleter(r)
	fill := func(n int) {
		for i := range n {
			c.add(completion{id: int64(i + 1), attempt: 1})
		}
	}
	fill(DefaultCompleteBatch - 1)
	c.slots <- struct{}{} // one call in flight
	c.dispatch()
	if got := len(c.slots); got != 1 {
		t.Fatalf("%d calls in flight for less than a full batch, want the one", got)
	}
	if got := len(c.buf); got != DefaultCompleteBatch-1 {
		t.Fatalf("the buffer holds %d after dispatch, want all %d still waiting", got, DefaultCompleteBatch-1)
	}
	if b := c.take(true); b != nil {
		t.Fatalf("a second call took %d, less than a full batch", len(b))
	}
	if b := c.take(false); len(b) != DefaultCompleteBatch-1 {
		t.Fatalf("the first call took %d, want everything waiting (%d)", len(b), DefaultCompleteBatch-1)
	}
	fill(DefaultCompleteBatch + 500)
	if b := c.take(true); len(b) != DefaultCompleteBatch {
		t.Fatalf("a second call took %d of a full batch, want %d", len(b), DefaultCompleteBatch)
	}
	if b := c.take(true); b != nil {
		t.Fatalf("a second call took the %d left over", len(b))
	}
	if b := c.take(false); len(b) != 500 {
		t.Fatalf("the next first call took %d, want the 500 left", len(b))
	}
}

// Successes wait to share a call only under load (the latest batch held
// completeLingerFrom or more), for at most completeLinger, fewer than completeHoldMax
// at a time, and not while one waiting must be recorded soon; a held batch's timer
// pokes the completer when it is due.
func TestCompleterHoldsSuccessesBackOnlyUnderLoad(t *testing.T) {
	r := newRunner(nil, Config{Queues: map[string]QueueConfig{"a": {Workers: 1}}})
	c := newCompleter(r)
	add := func(n int, soon bool) {
		for i := range n {
			c.add(completion{id: int64(i + 1), attempt: 1, soon: soon})
		}
	}
	add(10, false)
	if d := c.hold(time.Now()); d != 0 {
		t.Fatalf("a trickle's success (no batch yet) held back for %v", d)
	}
	c.take(false)
	add(10, false)
	if d := c.hold(time.Now()); d != 0 {
		t.Fatalf("after a batch of 10, a success held back for %v", d)
	}
	c.take(false)

	c.last = completeLingerFrom // under load
	add(10, false)
	if d := c.hold(time.Now()); d <= 0 || d > DefaultCompleteLinger {
		t.Fatalf("under load, successes held back for %v, want up to %v", d, DefaultCompleteLinger)
	}
	if d := c.hold(time.Now().Add(DefaultCompleteLinger)); d != 0 {
		t.Fatalf("the oldest success waited the linger, yet is held back %v more", d)
	}
	add(1, true)
	if d := c.hold(time.Now()); d != 0 {
		t.Fatalf("a success that must be recorded soon waits, held back for %v", d)
	}
	if b := c.take(false); len(b) != 11 || c.soon != 0 {
		t.Fatalf("took %d with %d still counted soon, want 11 and 0", len(b), c.soon)
	}
	c.last = completeLingerFrom
	add(completeHoldMax, false)
	if d := c.hold(time.Now()); d != 0 {
		t.Fatalf("%d successes waiting, yet held back for %v", completeHoldMax, d)
	}
	c.take(false)

	// dispatch sends nothing while held, and its timer pokes run when they are due.
	c.last = completeLingerFrom
	add(5, false)
	<-c.signal // add's own poke
	c.dispatch()
	if len(c.slots) != 0 || len(c.buf) != 5 {
		t.Fatalf("held successes went out: %d calls, %d left", len(c.slots), len(c.buf))
	}
	select {
	case <-c.signal:
	case <-time.After(10 * time.Second):
		t.Fatal("the held successes' timer never poked the completer")
	}
	c.linger.Stop()

	// A negative linger: nothing is ever held.
	off := newCompleter(newRunner(nil, Config{Queues: map[string]QueueConfig{"a": {Workers: 1}}, CompleteLinger: -1}))
	off.last = completeLingerFrom
	off.add(completion{id: 1, attempt: 1})
	if d := off.hold(time.Now()); d != 0 {
		t.Fatalf("with CompleteLinger < 0 a success was held back for %v", d)
	}
}

// A success must be recorded soon when its completion readies other jobs (a
// workflow's node, a child) or may make room under its queue's limits (max_running,
// concurrency_limit, or limits not yet read).
func TestRecordSoonForWorkflowsAndLimitedQueues(t *testing.T) {
	r := newRunner(nil, Config{Queues: map[string]QueueConfig{"a": {Workers: 1}}})
	f := newFetcher(r, "a", 1)
	one := int64(1)
	plain := &execution{r: r, f: f, job: &pgrun.Job{Queue: "a"}}
	if !plain.recordSoon() {
		t.Fatal("before any look a success of the queue may be held back")
	}
	f.apply(queueLook{roomy: true})
	if plain.recordSoon() {
		t.Fatal("a plain job of a queue without limits may not be held back")
	}
	for _, j := range []*pgrun.Job{{Queue: "a", RunID: &one}, {Queue: "a", ParentID: &one}} {
		if !(&execution{r: r, f: f, job: j}).recordSoon() {
			t.Fatalf("a workflow node or child (run %v, parent %v) may be held back", j.RunID, j.ParentID)
		}
	}
	f.apply(queueLook{})
	if !plain.recordSoon() {
		t.Fatal("a job of a queue with max_running or concurrency_limit may be held back")
	}
}
