package runner

import "testing"

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
