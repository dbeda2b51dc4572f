package runner

import (
	"fmt"
	"testing"
	"time"

	"github.com/pgrun/pgrun"
)

// A fetcher keeps two claims in flight while it serves its queue alone and one while
// the queue has peers (pgrun.queue_peers); what a look finds before the fetcher
// exists is kept for it.
func TestFetcherKeepsOneClaimInFlightWithPeers(t *testing.T) {
	r := newRunner(nil, Config{Queues: map[string]QueueConfig{"a": {Workers: 1}}})
	f := newFetcher(r, "a", 1)
	if got := f.inflightLimit(); got != maxInflight {
		t.Fatalf("alone: %d claims in flight, want %d", got, maxInflight)
	}
	r.looked("a", queueLook{shared: true}) // no fetcher yet: remembered
	if !r.looks["a"].shared {
		t.Fatal("a queue's peers found before its fetcher started were forgotten")
	}
	r.fetchers["a"] = f
	r.looked("a", queueLook{shared: true})
	if got := f.inflightLimit(); got != 1 {
		t.Fatalf("with peers: %d claims in flight, want 1", got)
	}
	r.looked("a", queueLook{})
	if got := f.inflightLimit(); got != maxInflight {
		t.Fatalf("peers gone: %d claims in flight, want %d", got, maxInflight)
	}
}

// A drained fetcher asks again as its jobs finish only while its queue may have a
// rate limit (until a look says, it may): room under max_running or
// concurrency_limit is announced by pgrun.jobs_room_made once the completion commits,
// and a queue without limits has nothing more until it is woken.
func TestFinishedJobsUndrainOnlyARateLimitedQueue(t *testing.T) {
	r := newRunner(nil, Config{Queues: map[string]QueueConfig{"a": {Workers: 4}}})
	f := newFetcher(r, "a", 4)
	r.fetchers["a"] = f
	finish := func() {
		t.Helper()
		f.took(claimed{wakes: f.wakes, asked: 4}) // short, with no wake-up since: drained
		if !f.drained {
			t.Fatal("a short claim with no wake-up since did not drain the fetcher")
		}
		f.busy = 1
		f.freed(time.Millisecond)
		f.slotsFreed()
	}
	finish()
	if f.drained {
		t.Fatal("before any look, a finished job did not bring another claim")
	}
	r.looked("a", queueLook{})
	finish()
	if !f.drained {
		t.Fatal("a queue without a rate limit asked again when a job finished")
	}
	r.looked("a", queueLook{ratePeriod: time.Second})
	finish()
	if f.drained {
		t.Fatal("a rate-limited queue did not ask again when a job finished")
	}
	// What a look found before the fetcher started is kept for it.
	r.looked("b", queueLook{})
	if l, ok := r.looks["b"]; !ok || l.ratePeriod != 0 {
		t.Fatal("a queue's rate limit found before its fetcher started was forgotten")
	}
}

// A drained fetcher of a rate-limited queue retries within a quarter of the limit's
// window (at least rateRetryMin, at most the poll), for two windows after a claim
// last brought jobs; with no limit, no period read yet or nothing brought lately,
// never.
func TestRateRetryFollowsTheWindow(t *testing.T) {
	r := newRunner(nil, Config{Queues: map[string]QueueConfig{"a": {Workers: 4}}, PollInterval: time.Second})
	f := newFetcher(r, "a", 4)
	r.fetchers["a"] = f
	if got := f.rateRetry(); got != 0 {
		t.Fatalf("before a look: retry %s, want none", got)
	}
	f.gotAt = time.Now()
	for period, want := range map[time.Duration]time.Duration{
		100 * time.Millisecond: 25 * time.Millisecond,
		time.Millisecond:       rateRetryMin,
		time.Hour:              time.Second, // the poll
	} {
		r.looked("a", queueLook{ratePeriod: period})
		if got := f.rateRetry(); got != want {
			t.Fatalf("window %s: retry %s, want %s", period, got, want)
		}
	}
	r.looked("a", queueLook{ratePeriod: 100 * time.Millisecond})
	f.gotAt = time.Now().Add(-time.Second)
	if got := f.rateRetry(); got != 0 {
		t.Fatalf("nothing brought for ten windows: retry %s, want none", got)
	}
	f.gotAt = time.Now()
	r.looked("a", queueLook{})
	if got := f.rateRetry(); got != 0 {
		t.Fatalf("no rate limit: retry %s, want none", got)
	}
	select {
	case <-f.wakeCh:
	default:
		t.Fatal("a rate limit found by a look did not wake the fetcher")
	}
}

// While a claim is on its way, a second one goes out with a backlog only when the
// free capacity makes a round trip worth it, and without a backlog only when the
// fetcher was woken after the first was sent (the jobs that wake-up announces may be
// past the first claim's snapshot) and claims have been bringing many jobs.
func TestSecondClaimOnlyForABacklogOrANewWakeUp(t *testing.T) {
	r := newRunner(nil, Config{Queues: map[string]QueueConfig{"a": {Workers: 100}}})
	f := newFetcher(r, "a", 100)
	f.perClaim.add(100)
	f.sent = f.wakes // a claim was sent and nothing woke the fetcher since
	if f.secondClaim(100) {
		t.Fatal("no backlog and no wake-up since the claim: a second claim went out")
	}
	f.woken()
	if !f.secondClaim(1) {
		t.Fatal("woken after the claim was sent: no second claim for the jobs it announced")
	}
	f.sent = f.wakes
	if f.secondClaim(100) {
		t.Fatal("the wake-up was answered by the latest claim, yet another went out")
	}
	f.backlog = true
	if f.secondClaim(f.want() - 1) {
		t.Fatal("a backlog with less than a claim's worth free sent a second claim")
	}
	f.woken()
	if f.secondClaim(f.want() - 1) {
		t.Fatal("a wake-up made a backlog's second claim of a few jobs")
	}
	if !f.secondClaim(f.want()) {
		t.Fatal("a backlog with a claim's worth free sent no second claim")
	}

	// Claims of a job or two (a workflow's nodes, single enqueues): a wake-up waits
	// for the claim on its way.
	f.backlog = false
	f.perClaim = ewma{}
	for range 20 {
		f.perClaim.add(2)
	}
	if f.secondClaim(100) {
		t.Fatal("claims bring two jobs each, yet a wake-up sent a second claim")
	}
}

// A fair queue's claims are capped at FairMaxClaim while they take more than one job
// of a key; a claim whose every job is a different key's doubles the cap for the next
// (up to the runner's MaxClaim), and a claim with a second job of a key, by the
// queue's fair key, brings it back. Jobs without a key count as one key.
func TestFairClaimCapGrowsWhileClaimsTakeOneJobAKey(t *testing.T) {
	r := newRunner(nil, Config{Queues: map[string]QueueConfig{"a": {Workers: 1}}})
	f := newFetcher(r, "a", 1)
	r.fetchers["a"] = f
	r.looked("a", queueLook{fairBy: "tenant"})
	jobs := func(n int, key func(i int) *string) []*pgrun.Job {
		js := make([]*pgrun.Job, n)
		for i := range js {
			js[i] = &pgrun.Job{Tenant: key(i), ConcurrencyKey: new("same")}
		}
		return js
	}
	distinct := func(i int) *string { return new(fmt.Sprint("t", i)) }
	if got := f.claimCap(); got != FairMaxClaim {
		t.Fatalf("first claim capped at %d, want %d", got, FairMaxClaim)
	}
	f.fairTook(jobs(250, distinct)) // by tenant: 250 tenants, one concurrency key
	if got := f.claimCap(); got != 500 {
		t.Fatalf("after a claim of 250 keys: cap %d, want 500", got)
	}
	f.fairTook(jobs(600, distinct))
	if got := f.claimCap(); got != DefaultMaxClaim {
		t.Fatalf("after a claim of 600 keys: cap %d, want the runner's %d", got, DefaultMaxClaim)
	}
	f.fairTook(jobs(3, func(i int) *string { return distinct(i % 2) }))
	if got := f.claimCap(); got != FairMaxClaim {
		t.Fatalf("after a claim with a key's second job: cap %d, want %d", got, FairMaxClaim)
	}
	f.fairTook(jobs(300, distinct))
	f.fairTook(jobs(2, func(int) *string { return nil }))
	if got := f.claimCap(); got != FairMaxClaim {
		t.Fatalf("after a claim of two jobs without a key: cap %d, want %d", got, FairMaxClaim)
	}
	r.looked("a", queueLook{fairBy: "concurrency_key"})
	f.fairTook(jobs(300, distinct)) // by concurrency key: one key
	if got := f.claimCap(); got != FairMaxClaim {
		t.Fatalf("fair by concurrency key, one key: cap %d, want %d", got, FairMaxClaim)
	}
	r.looked("a", queueLook{})
	if got := f.claimCap(); got != DefaultMaxClaim {
		t.Fatalf("no longer fair: cap %d, want %d", got, DefaultMaxClaim)
	}
}
