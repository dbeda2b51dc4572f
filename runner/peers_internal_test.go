package runner

import "testing"

// A fetcher keeps two claims in flight while it serves its queue alone and one while
// the queue has peers (pgrun.queue_peers); what a look finds before the fetcher
// exists is kept for it.
func TestFetcherKeepsOneClaimInFlightWithPeers(t *testing.T) {
	r := newRunner(nil, Config{Queues: map[string]QueueConfig{"a": {Workers: 1}}})
	f := newFetcher(r, "a", 1)
	if got := f.inflightLimit(); got != maxInflight {
		t.Fatalf("alone: %d claims in flight, want %d", got, maxInflight)
	}
	r.setShared("a", true) // no fetcher yet: remembered
	if !r.shared["a"] {
		t.Fatal("a queue's peers found before its fetcher started were forgotten")
	}
	r.fetchers["a"] = f
	r.setShared("a", true)
	if got := f.inflightLimit(); got != 1 {
		t.Fatalf("with peers: %d claims in flight, want 1", got)
	}
	r.setShared("a", false)
	if got := f.inflightLimit(); got != maxInflight {
		t.Fatalf("peers gone: %d claims in flight, want %d", got, maxInflight)
	}
}
