package runner

import (
	"context"
	"testing"
	"time"

	"github.com/pgrun/pgrun"
)

// claimCall is one claim a fetcher sent to its claimFn.
type claimCall struct {
	n     int
	after *claimKey
}

// A sweep goes out beside the claims that resume after the key and does not hold
// them back: while it is on its way (held here until released), the polls keep
// sending claims with the key. It asks for one job from the queue's start. It used to
// be the next claim itself, sent without the key for a full batch, and it held one of
// the two claims in flight for as long as its scan took.
func TestSweepGoesOutBesideResumedClaims(t *testing.T) {
	r := newRunner(nil, Config{Queues: map[string]QueueConfig{"a": {Workers: 10}}, PollInterval: MinPollInterval})
	f := newFetcher(r, "a", 10)
	key := claimKey{priority: 1, runAt: time.Unix(1000, 0), id: 9}
	f.resume.claimed([]*pgrun.Job{{Priority: key.priority, RunAt: key.runAt, ID: key.id}}, nil)

	calls := make(chan claimCall, 1024)
	release := make(chan struct{})
	f.claimFn = func(ctx context.Context, n int, after *claimKey) ([]*pgrun.Job, bool, error) {
		calls <- claimCall{n: n, after: after}
		if after == nil {
			<-release // the sweep, or a claim that lost the key: held until released
		}
		return nil, false, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.run(ctx); close(done) }()
	defer func() {
		cancel()
		select {
		case <-release:
		default:
			close(release)
		}
		<-done
	}()

	next := func(what string) claimCall {
		t.Helper()
		select {
		case c := <-calls:
			return c
		case <-time.After(30 * time.Second):
			t.Fatalf("no claim: waiting for %s", what)
			return claimCall{}
		}
	}
	// Claims resume after the key until the resumeEvery-th poll sends the sweep.
	var sweep claimCall
	for sweep = next("the sweep"); sweep.after != nil; sweep = next("the sweep") {
		if *sweep.after != key {
			t.Fatalf("a claim resumed after %+v, not the key %+v", *sweep.after, key)
		}
	}
	if sweep.n != 1 {
		t.Fatalf("the sweep asked for %d jobs, not one", sweep.n)
	}
	// The sweep is held; the polls go on claiming after the key, and more than once
	// (one claim could have been in flight already).
	for i := range 3 {
		c := next("a claim beside the sweep")
		if c.after == nil || *c.after != key {
			t.Fatalf("claim %d beside the sweep did not resume after the key: %+v", i, c)
		}
	}
	close(release)
	// The sweep found nothing below the key: the claims keep resuming.
	for range 3 {
		if c := next("a claim after the sweep"); c.after == nil && c.n != 1 {
			t.Fatalf("an empty sweep dropped the key: %+v", c)
		}
	}
}
