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
